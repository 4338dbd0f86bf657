// The value path policy of a client connection (ClientOptions::policy): the engine's path
// policy for value writes, and optionally which PUTs carry their value inline instead.
//
//   POLICY[,inline:N]   POLICY: offload | unload | adaptive | split:F | unload_after:N
//                       (engine::MakePolicy)
//                       N: 0..4096 (proto::kMaxInlineValueBytes); a PUT (or a merge) of a
//                       value of at most N bytes carries it in the PUT message, with no grant
//                       and no value write; the server copies it into place. N = 0: every
//                       value goes through the engine. Without the suffix the transport
//                       decides (InlineBytesOn).
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
  bool inline_said = false;   // the policy has ",inline:N": N holds on every transport
};

// InvalidArgument naming the grammar for anything else (the engine policy's name is checked
// by engine::MakePolicy).
absl::StatusOr<ValuePolicy> ParseValuePolicy(absl::string_view policy);

// The inline limit of a connection on `transport` ("soft", "verbs", or "sim" for a client on the
// simulated fabric): the policy's ",inline:N" when it has one. Otherwise the adaptive policy,
// which picks the cheaper path, inlines values up to proto::kMaxInlineValueBytes on soft, where
// a value write is one more frame through the TCP stream that carries the PUT and costs more
// than the server's copy at every size up to that limit (docs/benchmarks.md, "Inline PUTs");
// and nothing on verbs (the NIC places a granted value without the server's CPU) or on the
// simulated fabric (which models the engine's paths). A static policy (offload, unload,
// split:F, unload_after:N) names the engine's path for every value: nothing inline.
uint32_t InlineBytesOn(const ValuePolicy& policy, absl::string_view transport);

}  // namespace unloadkv::client_internal

#endif  // UNLOADKV_CLIENT_VALUE_POLICY_H_
