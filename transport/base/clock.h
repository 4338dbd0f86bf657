// Injectable time source. Real backends use RealClock; the simulated fabric supplies a virtual
// clock, so code that reads time through Clock runs unchanged in virtual time.
#ifndef UNLOADKV_TRANSPORT_BASE_CLOCK_H_
#define UNLOADKV_TRANSPORT_BASE_CLOCK_H_

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace unloadkv {

// Thread-safety: implementations must allow Now() from any thread.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

class RealClock : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  // A process-wide instance; never destroyed.
  static RealClock* Get() {
    static RealClock* clock = new RealClock();
    return clock;
  }
};

}  // namespace unloadkv

#endif  // UNLOADKV_TRANSPORT_BASE_CLOCK_H_
