#include "server/log_writer.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "transport/base/logging.h"

namespace unloadkv::server {

absl::StatusOr<FsyncPolicy> FsyncPolicy::Parse(absl::string_view text) {
  FsyncPolicy p;
  if (text == "always") return p;
  if (text == "never") {
    p.kind = Kind::kNever;
    return p;
  }
  int ms = 0;
  if (absl::ConsumePrefix(&text, "interval:") && absl::SimpleAtoi(text, &ms) && ms >= 1 &&
      ms <= 60000) {
    p.kind = Kind::kInterval;
    p.interval = absl::Milliseconds(ms);
    return p;
  }
  return absl::InvalidArgumentError(
      "--fsync: choose always, interval:MS (1 <= MS <= 60000) or never");
}

std::string FsyncPolicy::ToString() const {
  switch (kind) {
    case Kind::kAlways:
      return "always";
    case Kind::kNever:
      return "never";
    case Kind::kInterval:
      return absl::StrCat("interval:", absl::ToInt64Milliseconds(interval));
  }
  return "";
}

LogWriter::LogWriter(std::unique_ptr<ReplicaLog> log, FsyncPolicy policy, const Clock* clock)
    : log_(std::move(log)),
      policy_(policy),
      clock_(clock),
      last_sync_(clock->Now()),
      next_resume_(absl::InfinitePast()) {}

LogWriter::~LogWriter() { Stop(); }

void LogWriter::Submit(proto::LogEntry entry, Done done) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!stop_) {
      // Even while the log is stopped: Poll fails it (done never runs on Submit's thread).
      queue_.push_back({std::move(entry), std::move(done)});
      wake_.notify_one();
      return;
    }
    ++stats_.failed;
  }
  done(absl::UnavailableError("the log writer stopped"));
}

void LogWriter::Stopped(const absl::Status& st, std::vector<Done>* failed) {
  if (policy_.kind == FsyncPolicy::Kind::kAlways) {
    for (Done& d : waiting_) failed->push_back(std::move(d));
    waiting_.clear();
  }
  next_resume_ = clock_->Now() + absl::Seconds(1);
  std::lock_guard<std::mutex> l(mu_);
  failure_ = st;
}

int LogWriter::Poll() {
  std::deque<Pending> batch;
  {
    std::lock_guard<std::mutex> l(mu_);
    batch.swap(queue_);
  }
  std::vector<Done> acked, failed;
  std::vector<std::pair<Done, absl::Status>> refused;  // each with its own error
  absl::Status failure = log_->failure();
  if (!failure.ok() && clock_->Now() >= next_resume_) {
    // Under `always` nothing unsynced was acknowledged: back to the last sync.
    if (log_->Resume(/*keep_written=*/policy_.kind != FsyncPolicy::Kind::kAlways).ok()) {
      failure = absl::OkStatus();
      std::lock_guard<std::mutex> l(mu_);
      failure_ = absl::OkStatus();
    } else {
      next_resume_ = clock_->Now() + absl::Seconds(1);
    }
  }
  for (Pending& p : batch) {
    if (!failure.ok()) {
      failed.push_back(std::move(p.done));
      continue;
    }
    const absl::Status st = log_->Append(p.entry);
    if (!st.ok() && log_->failure().ok()) {  // this record's own fault (seq, size)
      refused.emplace_back(std::move(p.done), st);
      continue;
    }
    if (!st.ok()) {
      failure = st;
      failed.push_back(std::move(p.done));
      Stopped(st, &failed);
      continue;
    }
    unsynced_ = true;
    if (policy_.kind == FsyncPolicy::Kind::kAlways) {
      waiting_.push_back(std::move(p.done));
    } else {
      acked.push_back(std::move(p.done));
    }
  }
  const absl::Time now = clock_->Now();
  const bool due =
      policy_.kind == FsyncPolicy::Kind::kAlways ||
      (policy_.kind == FsyncPolicy::Kind::kInterval && now - last_sync_ >= policy_.interval);
  uint64_t syncs = 0;
  if (failure.ok() && unsynced_ && due) {
    const absl::Status st = log_->Sync();
    ++syncs;
    if (st.ok()) {
      for (Done& d : waiting_) acked.push_back(std::move(d));
      waiting_.clear();
      unsynced_ = false;
      last_sync_ = now;
    } else {
      Stopped(st, &failed);
      failure = st;
    }
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    sync_due_ = policy_.kind == FsyncPolicy::Kind::kInterval && unsynced_ && failure.ok()
                    ? last_sync_ + policy_.interval
                    : absl::InfiniteFuture();
    stats_.records += acked.size();
    stats_.syncs += syncs;
    stats_.failed += failed.size() + refused.size();
  }
  for (Done& d : acked) d(absl::OkStatus());
  for (Done& d : failed) d(failure);
  for (auto& [d, st] : refused) d(st);
  // Begins not while `always` records wait for their sync (it syncs first, for every policy).
  MaybeCompact(/*may_begin=*/failure.ok() && waiting_.empty());
  return static_cast<int>(acked.size() + failed.size() + refused.size());
}

void LogWriter::MaybeCompact(bool may_begin) {
  if (compaction_ != nullptr) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!compaction_built_) return;
      compaction_built_ = false;  // or the thread's wait would find it and never sleep again
    }
    compactor_.join();
    FinishCompaction();
    return;
  }
  if (!may_begin || !log_->ShouldCompact()) return;
  auto running = std::make_unique<Running>();
  running->start = clock_->Now();
  absl::StatusOr<ReplicaLog::CompactionPlan> plan = log_->BeginCompaction();
  if (!plan.ok()) {
    CompactionFailed(plan.status());
    return;
  }
  running->plan = *std::move(plan);
  unsynced_ = false;  // BeginCompaction synced what was written
  last_sync_ = clock_->Now();
  {
    std::lock_guard<std::mutex> l(mu_);
    sync_due_ = absl::InfiniteFuture();
  }
  compaction_ = std::move(running);
  if (!thread_.joinable()) {  // Poll driven by its caller (a simulation): all at once
    compaction_->built = log_->BuildCompaction(compaction_->plan, &compaction_->result);
    FinishCompaction();
    return;
  }
  // The reading and writing on a thread of their own: the appends go on meanwhile.
  compactor_ = std::thread([this] {
    compaction_->built = log_->BuildCompaction(compaction_->plan, &compaction_->result);
    std::lock_guard<std::mutex> l(mu_);
    compaction_built_ = true;
    wake_.notify_one();
  });
}

void LogWriter::FinishCompaction() {
  std::unique_ptr<Running> c = std::move(compaction_);
  const absl::Status st = log_->FinishCompaction(c->plan, c->built, &c->result);
  if (!st.ok()) {
    CompactionFailed(st);
    return;
  }
  const absl::Duration took = clock_->Now() - c->start;
  {
    std::lock_guard<std::mutex> l(mu_);
    ++stats_.compactions;
    stats_.compaction_us += static_cast<uint64_t>(absl::ToInt64Microseconds(took));
  }
  const ReplicaLog::Compaction& r = c->result;
  Log(LogLevel::kInfo,
      absl::StrCat("log compacted: ", r.keys, " keys, ", r.bytes_read, " bytes read, ",
                   r.bytes_written, " written, ", r.segments_removed, " segments removed, in ",
                   absl::FormatDuration(took)));
}

void LogWriter::CompactionFailed(const absl::Status& st) {
  Log(LogLevel::kWarning,
      absl::StrCat("log compaction failed (the log goes on as it was): ", st.ToString()));
  if (!log_->failure().ok()) {
    std::vector<Done> none;
    Stopped(log_->failure(), &none);
  }
}

void LogWriter::Start() {
  thread_ = std::thread([this] {
    while (true) {
      {
        std::unique_lock<std::mutex> l(mu_);
        // Wake for a submission, a stop, or (interval) when the written records' sync is
        // due; while stopped by a disk error, once a second to try Resume.
        auto ready = [this] { return stop_ || !queue_.empty() || compaction_built_; };
        if (!failure_.ok()) {
          wake_.wait_for(l, std::chrono::seconds(1), ready);
        } else if (sync_due_ != absl::InfiniteFuture()) {
          const absl::Duration left = sync_due_ - clock_->Now();
          if (left > absl::ZeroDuration()) {
            wake_.wait_for(l, absl::ToChronoNanoseconds(left), ready);
          }
        } else {
          wake_.wait(l, ready);
        }
        if (crashed_ || (stop_ && queue_.empty())) break;
      }
      Poll();
    }
  });
}

void LogWriter::Crash() {
  std::deque<Pending> dropped;
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = crashed_ = true;
    dropped.swap(queue_);
    wake_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
  if (compactor_.joinable()) compactor_.join();
  compaction_.reset();  // its aside file stays: recovery removes it
  waiting_.clear();     // a dead process answers nothing
}

bool LogWriter::pending() const {
  std::lock_guard<std::mutex> l(mu_);
  return !queue_.empty() || clock_->Now() >= sync_due_;
}

void LogWriter::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stop_) return;
    stop_ = true;
    wake_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
  if (compaction_ != nullptr) {  // a state being built: waited for, and put in place
    compactor_.join();
    FinishCompaction();
  }
  Poll();  // what was queued before the stop
  if (policy_.kind != FsyncPolicy::Kind::kNever && unsynced_ && log_->failure().ok() &&
      log_->Sync().ok()) {
    unsynced_ = false;
  }
}

LogWriter::Stats LogWriter::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  return stats_;
}

absl::Status LogWriter::failure() const {
  std::lock_guard<std::mutex> l(mu_);
  // A copy of its own: a Status shares its message between copies by a reference count that
  // lives in Abseil's (uninstrumented) library, where ThreadSanitizer cannot see it order the
  // writer thread's release against the caller's reads.
  return absl::Status(failure_.code(), std::string(failure_.message()));
}

}  // namespace unloadkv::server
