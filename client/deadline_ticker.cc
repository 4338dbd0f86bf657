#include "client/deadline_ticker.h"

#include <chrono>
#include <thread>
#include <utility>
#include <vector>

namespace unloadkv {

DeadlineTicker& DeadlineTicker::Get() {
  static DeadlineTicker* const ticker = new DeadlineTicker;
  return *ticker;
}

uint64_t DeadlineTicker::Add(std::function<void()> check) {
  std::lock_guard<std::mutex> l(mu_);
  const uint64_t id = next_id_++;
  checks_.emplace(id, std::move(check));
  if (!running_) {
    // A thread that found no checks left may still be returning; it touches nothing of ours
    // after clearing running_, so a new one can start at once.
    running_ = true;
    std::thread([this] { Run(); }).detach();
  }
  return id;
}

void DeadlineTicker::Remove(uint64_t id) {
  {
    std::lock_guard<std::mutex> l(mu_);
    checks_.erase(id);
  }
  cv_.notify_all();
  std::lock_guard<std::mutex> wait_for_tick(tick_mu_);
}

bool DeadlineTicker::running() {
  std::lock_guard<std::mutex> l(mu_);
  return running_;
}

void DeadlineTicker::Run() {
  const auto tick = std::chrono::microseconds(absl::ToInt64Microseconds(kTick));
  std::vector<std::function<void()>> due;
  for (;;) {
    {
      std::unique_lock<std::mutex> l(mu_);
      if (checks_.empty()) {
        running_ = false;
        return;
      }
      // Woken early only when a check is removed: the last one ends the thread promptly.
      cv_.wait_for(l, tick, [&] { return checks_.empty(); });
      if (checks_.empty()) {
        running_ = false;
        return;
      }
    }
    std::lock_guard<std::mutex> ticking(tick_mu_);
    due.clear();
    {
      // Copied under tick_mu_: a check removed before this point is not in the copy, one
      // removed after waits in Remove until the tick ends.
      std::lock_guard<std::mutex> l(mu_);
      for (const auto& [id, check] : checks_) due.push_back(check);
    }
    for (const auto& check : due) check();
  }
}

}  // namespace unloadkv
