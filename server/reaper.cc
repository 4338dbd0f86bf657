#include "server/reaper.h"

namespace unloadkv::server {

Reaper::Reaper(Mode mode) {
  if (mode == Mode::kThread) thread_ = std::thread([this] { Run(); });
}

Reaper::~Reaper() {
  Drain();
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Reaper::Release(std::shared_ptr<void> object) {
  if (object == nullptr) return;
  {
    std::lock_guard<std::mutex> l(mu_);
    queue_.push_back(std::move(object));
    ++released_;
  }
  cv_.notify_all();
}

void Reaper::Drain() {
  if (!thread_.joinable()) {
    // Inline: drop here, outside the lock (a destructor may release more).
    while (true) {
      std::shared_ptr<void> object;
      {
        std::lock_guard<std::mutex> l(mu_);
        if (queue_.empty()) return;
        object = std::move(queue_.front());
        queue_.pop_front();
        ++dropped_;
      }
      object.reset();
    }
  }
  std::unique_lock<std::mutex> l(mu_);
  const uint64_t target = released_;
  cv_.wait(l, [&] { return dropped_ >= target; });
}

void Reaper::Run() {
  std::unique_lock<std::mutex> l(mu_);
  while (true) {
    cv_.wait(l, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and nothing left
    std::shared_ptr<void> object = std::move(queue_.front());
    queue_.pop_front();
    l.unlock();
    object.reset();
    l.lock();
    ++dropped_;
    cv_.notify_all();
  }
}

}  // namespace unloadkv::server
