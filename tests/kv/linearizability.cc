#include "tests/kv/linearizability.h"

#include <algorithm>
#include <limits>
#include <map>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace unloadkv::testing {
namespace {

using Mask = std::pair<uint64_t, uint64_t>;  // up to 128 operations

bool Has(const Mask& m, size_t i) { return ((i < 64 ? m.first : m.second) >> (i % 64)) & 1; }
Mask With(Mask m, size_t i) {
  (i < 64 ? m.first : m.second) |= uint64_t{1} << (i % 64);
  return m;
}

class KeyChecker {
 public:
  explicit KeyChecker(std::vector<const KvOp*> ops) : ops_(std::move(ops)) {
    std::sort(ops_.begin(), ops_.end(),
              [](const KvOp* a, const KvOp* b) { return a->invoke_ns < b->invoke_ns; });
    for (const KvOp* op : ops_) {
      if (op->response_ns) ++must_;
    }
  }

  bool Check() { return Search(Mask{0, 0}, std::nullopt, 0); }

 private:
  static int64_t Response(const KvOp* op) {
    return op->response_ns ? *op->response_ns : std::numeric_limits<int64_t>::max();
  }

  // Applies `op` to `state` if consistent with what it observed.
  static bool Apply(const KvOp* op, std::optional<std::string>& state) {
    switch (op->kind) {
      case KvOp::kPut:
        state = op->value;
        return true;
      case KvOp::kGet:
        return !op->response_ns || op->value == state;
      case KvOp::kDelete:
        if (op->response_ns && op->found != state.has_value()) return false;
        state.reset();
        return true;
    }
    return false;
  }

  bool Search(const Mask& done, const std::optional<std::string>& state, size_t completed) {
    if (completed == must_) return true;
    if (!seen_.insert({done, state}).second) return false;
    // Candidates: not yet linearized, invoked before the earliest response among the rest.
    int64_t horizon = std::numeric_limits<int64_t>::max();
    for (size_t i = 0; i < ops_.size(); ++i) {
      if (!Has(done, i)) horizon = std::min(horizon, Response(ops_[i]));
    }
    for (size_t i = 0; i < ops_.size(); ++i) {
      if (Has(done, i)) continue;
      if (ops_[i]->invoke_ns > horizon) break;  // sorted by invocation
      std::optional<std::string> next = state;
      if (!Apply(ops_[i], next)) continue;
      if (Search(With(done, i), next, completed + (ops_[i]->response_ns ? 1 : 0))) return true;
    }
    return false;
  }

  struct Hash {
    size_t operator()(const std::pair<Mask, std::optional<std::string>>& k) const {
      return absl::HashOf(k.first.first, k.first.second, k.second.has_value(),
                          k.second.value_or(""));
    }
  };

  std::vector<const KvOp*> ops_;
  size_t must_ = 0;
  absl::flat_hash_set<std::pair<Mask, std::optional<std::string>>, Hash> seen_;
};

std::string Describe(const KvOp& op) {
  const char* kind = op.kind == KvOp::kPut ? "put" : op.kind == KvOp::kGet ? "get" : "del";
  std::string what = op.kind == KvOp::kDelete ? (op.found ? "ok" : "not-found")
                     : op.value               ? absl::StrCat("\"", *op.value, "\"")
                                              : "not-found";
  return absl::StrCat("  client ", op.client, " ", kind, " ", what, " [", op.invoke_ns, ", ",
                      op.response_ns ? absl::StrCat(*op.response_ns) : "?", "]\n");
}

}  // namespace

absl::Status CheckLinearizable(const std::vector<KvOp>& history) {
  std::map<std::string, std::vector<const KvOp*>> by_key;
  for (const KvOp& op : history) by_key[op.key].push_back(&op);
  for (auto& [key, ops] : by_key) {
    if (ops.size() > kMaxOpsPerKey) {
      return absl::InvalidArgumentError(
          absl::StrCat("key '", key, "' has ", ops.size(), " operations; at most ", kMaxOpsPerKey));
    }
    if (!KeyChecker(ops).Check()) {
      std::string msg = absl::StrCat("history of key '", key, "' is not linearizable:\n");
      for (const KvOp* op : ops) msg += Describe(*op);
      return absl::FailedPreconditionError(msg);
    }
  }
  return absl::OkStatus();
}

}  // namespace unloadkv::testing
