#include "server/apply_thread.h"

#include <string>
#include <utility>

namespace unloadkv::server {

ApplyThread::ApplyThread(const Apply& apply) : apply_(apply) {
  batch_.reserve(kBatch);
  thread_ = std::thread([this] { Run(); });
}

ApplyThread::~ApplyThread() { (void)Finish(); }

absl::Status ApplyThread::Push(proto::LogEntry entry, uint64_t bytes) {
  batch_.push_back(std::move(entry));
  batch_bytes_ += bytes;
  if (batch_.size() >= kBatch) Hand();
  return Error();
}

absl::Status ApplyThread::Error() {
  std::lock_guard<std::mutex> l(mu_);
  // A copy of its own: a Status shares its message between copies by a reference count in
  // Abseil's (uninstrumented) library, where ThreadSanitizer cannot see the lock order it.
  return absl::Status(error_.code(), std::string(error_.message()));
}

void ApplyThread::Hand() {
  if (batch_.empty()) return;
  std::unique_lock<std::mutex> l(mu_);
  // Room for one more batch: the bound, or an empty queue (one batch may exceed it).
  changed_.wait(l, [this] {
    return !error_.ok() || queue_.empty() || queued_bytes_ + batch_bytes_ <= kMaxQueuedBytes;
  });
  if (error_.ok()) {
    queued_bytes_ += batch_bytes_;
    queue_.emplace_back(std::move(batch_), batch_bytes_);
    changed_.notify_all();
  }
  batch_ = {};
  batch_.reserve(kBatch);
  batch_bytes_ = 0;
}

absl::Status ApplyThread::Finish() {
  if (!finished_) {
    finished_ = true;
    Hand();
    {
      std::lock_guard<std::mutex> l(mu_);
      done_ = true;
      changed_.notify_all();
    }
    thread_.join();
  }
  return Error();
}

void ApplyThread::Run() {
  while (true) {
    std::pair<std::vector<proto::LogEntry>, uint64_t> batch;
    {
      std::unique_lock<std::mutex> l(mu_);
      changed_.wait(l, [this] { return !queue_.empty() || done_; });
      if (queue_.empty()) return;  // done_, and everything applied
      batch = std::move(queue_.front());
      queue_.pop_front();
      changed_.notify_all();  // an empty queue takes the reader's next batch
    }
    absl::Status st;
    for (const proto::LogEntry& e : batch.first) {
      st = apply_(e);
      if (!st.ok()) break;
    }
    std::lock_guard<std::mutex> l(mu_);
    queued_bytes_ -= batch.second;
    if (!st.ok()) {
      error_ = st;
      queue_.clear();  // nothing after the failed record is applied
      queued_bytes_ = 0;
    }
    changed_.notify_all();
  }
}

}  // namespace unloadkv::server
