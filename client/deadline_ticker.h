// One thread per process that runs the periodic checks of every live Client (request deadlines,
// a lost connection) every kTick, instead of a thread per client: a process with 64 clients
// wakes once per tick, not 64 times. The thread exists only while a check is registered.
#ifndef UNLOADKV_CLIENT_DEADLINE_TICKER_H_
#define UNLOADKV_CLIENT_DEADLINE_TICKER_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>

#include "absl/time/time.h"

namespace unloadkv {

// Thread-safe. Checks run on the ticker's thread, one at a time, and must not call Remove.
class DeadlineTicker {
 public:
  static constexpr absl::Duration kTick = absl::Milliseconds(5);

  // The process's ticker (never destroyed: its thread may outlive static destruction).
  static DeadlineTicker& Get();

  // Runs `check` every kTick from now on; returns its id for Remove.
  uint64_t Add(std::function<void()> check);
  // Stops running the check `id`. When it returns, the check is not running and never runs
  // again.
  void Remove(uint64_t id);

  // The ticker thread is running (for tests: it stops once no check is registered).
  bool running();

 private:
  DeadlineTicker() = default;
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, std::function<void()>> checks_;  // guarded by mu_
  uint64_t next_id_ = 1;                              // guarded by mu_
  bool running_ = false;                              // guarded by mu_
  // Held while checks run; Remove takes it after erasing, so it returns after a tick that
  // might still run the removed check.
  std::mutex tick_mu_;
};

}  // namespace unloadkv

#endif  // UNLOADKV_CLIENT_DEADLINE_TICKER_H_
