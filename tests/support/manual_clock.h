// A Clock that moves only when told: tests of lease expiry and timing in virtual time.
#ifndef UNLOADKV_TESTS_SUPPORT_MANUAL_CLOCK_H_
#define UNLOADKV_TESTS_SUPPORT_MANUAL_CLOCK_H_

#include "absl/time/time.h"
#include "transport/base/clock.h"
#include "transport/base/mutex.h"

namespace unloadkv::testing {

// Thread-safe. Starts one hour after the Unix epoch.
class ManualClock : public Clock {
 public:
  absl::Time Now() const override {
    MutexLock l(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    MutexLock l(&mu_);
    now_ += d;
  }

 private:
  mutable Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_) = absl::UnixEpoch() + absl::Hours(1);
};

}  // namespace unloadkv::testing

#endif  // UNLOADKV_TESTS_SUPPORT_MANUAL_CLOCK_H_
