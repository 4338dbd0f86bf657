#include "server/reaper.h"

namespace unloadkv::server {

Reaper::Reaper() : thread_([this] { Run(); }) {}

Reaper::~Reaper() {
  Drain();
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
