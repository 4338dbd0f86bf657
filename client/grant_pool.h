// The slot grants a client holds and has not used yet, per size class, and the Puts waiting
// for one. At most one GRANT request per class is outstanding; its answer serves the waiters
// in arrival order. Thread-safe; callbacks are never run under its lock (it returns them).
#ifndef UNLOADKV_CLIENT_GRANT_POOL_H_
#define UNLOADKV_CLIENT_GRANT_POOL_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/kv.pb.h"
#include "proto/limits.h"
#include "transport/base/mutex.h"

namespace unloadkv::client_internal {

class GrantPool {
 public:
  using Use = std::function<void(absl::StatusOr<proto::SlotGrant>)>;
  // Grants asked for at a time (fewer are fine: a server grants what its arena has).
  static constexpr uint32_t kBatch = 16;

  // A pooled grant of class `cls`; or, with none pooled, queues `use` and returns nullopt,
  // setting *request when no GRANT of the class is outstanding (the caller sends one).
  std::optional<proto::SlotGrant> TakeOrWait(int cls, Use&& use, bool* request);
  // A pooled grant of class `cls`, or nullopt when none is pooled (nothing queued).
  std::optional<proto::SlotGrant> TryTake(int cls);
  // How many grants of class `cls` to ask for: the waiters, at least kBatch, at most
  // kMaxGrantsPerRequest.
  uint32_t RequestSize(int cls);

  struct Answered {
    std::vector<std::pair<Use, absl::StatusOr<proto::SlotGrant>>> run;  // call these
    bool again = false;  // waiters remain: send another GRANT of the class
  };
  // The answer to the class's GRANT: pools its grants and pairs waiters with them, or hands
  // every waiter the error (each its own copy).
  Answered OnAnswer(int cls, const absl::StatusOr<proto::GrantResponse>& answer);
  // A grant that was taken but not named by a PUT: still unused.
  void Return(const proto::SlotGrant& g);

 private:
  struct Class {
    std::vector<proto::SlotGrant> pool;
    std::deque<Use> waiters;
    bool requesting = false;
  };
  Mutex mu_;
  Class classes_[proto::kSlotClasses] ABSL_GUARDED_BY(mu_);
};

}  // namespace unloadkv::client_internal

#endif  // UNLOADKV_CLIENT_GRANT_POOL_H_
