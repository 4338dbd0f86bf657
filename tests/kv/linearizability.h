// A linearizability checker for histories of a key-value store, key by key (linearizability is
// compositional, so a history is linearizable iff each key's sub-history is). Each key is a
// register: Put(v) sets it, Delete clears it, Get observes a value or absence.
//
// The search is Wing & Gong's with Lowe's memoization: repeatedly linearize one of the
// operations that could take effect first (invoked before every remaining operation
// responded), if the register agrees with what it observed; backtrack otherwise, skipping
// configurations (set of linearized operations, register value) already explored.
//
// Operations whose outcome the client does not know (a timeout) have no response: they may
// take effect at any point after their invocation, or never.
#ifndef UNLOADKV_TESTS_KV_LINEARIZABILITY_H_
#define UNLOADKV_TESTS_KV_LINEARIZABILITY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace unloadkv::testing {

struct KvOp {
  enum Kind { kPut, kGet, kDelete } kind = kGet;
  std::string key;
  std::optional<std::string> value;  // Put: written; Get: observed (nullopt = not found)
  bool found = true;                 // Delete: whether the key existed (OK vs NOT_FOUND)
  int64_t invoke_ns = 0;
  std::optional<int64_t> response_ns;  // nullopt: outcome unknown
  int client = 0;
};

// At most kMaxOpsPerKey operations per key (the search is exponential in the worst case).
inline constexpr size_t kMaxOpsPerKey = 128;

// OK when linearizable; otherwise FailedPrecondition naming the first key that is not, with
// its operations; InvalidArgument when a key has too many operations.
absl::Status CheckLinearizable(const std::vector<KvOp>& history);

}  // namespace unloadkv::testing

#endif  // UNLOADKV_TESTS_KV_LINEARIZABILITY_H_
