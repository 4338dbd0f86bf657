// The value path policy of a client connection (ClientOptions::policy): the engine's path
// policy for value writes, and optionally which PUTs carry their value inline instead.
//
//   POLICY[,inline:N]   POLICY: offload | unload | adaptive | split:F | unload_after:N
//                       (engine::MakePolicy)
//                       N: 0..4096 (proto::kMaxInlineValueBytes); a PUT (or a merge) of a
//                       value of at most N bytes carries it in the PUT message, with no grant
//                       and no value write; the server copies it into place. Without the
//                       suffix (or N = 0) every value goes through the engine.
//
// Thread-safety: a plain function.
#ifndef UNLOADKV_CLIENT_VALUE_POLICY_H_
#define UNLOADKV_CLIENT_VALUE_POLICY_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace unloadkv::client_internal {

struct ValuePolicy {
  std::string engine_policy;  // for engine::MakePolicy
  uint32_t inline_bytes = 0;  // values of at most this many bytes go inline (0: none)
};

// InvalidArgument naming the grammar for anything else (the engine policy's name is checked
// by engine::MakePolicy).
absl::StatusOr<ValuePolicy> ParseValuePolicy(absl::string_view policy);

}  // namespace unloadkv::client_internal

#endif  // UNLOADKV_CLIENT_VALUE_POLICY_H_
