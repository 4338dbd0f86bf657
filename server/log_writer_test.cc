#include "server/log_writer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "transport/storage/memory_disk.h"

namespace unloadkv::server {
namespace {

class FakeClock : public Clock {
 public:
  absl::Time Now() const override {
    std::lock_guard<std::mutex> l(mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    std::lock_guard<std::mutex> l(mu_);
    now_ += d;
  }

 private:
  mutable std::mutex mu_;
  absl::Time now_ = absl::UnixEpoch() + absl::Hours(1);
};

// The real time, and how often it was asked: a writer's rounds each ask at least once.
class CountingClock : public Clock {
 public:
  absl::Time Now() const override {
    reads_.fetch_add(1);
    return absl::Now();
  }
  uint64_t reads() const { return reads_.load(); }

 private:
  mutable std::atomic<uint64_t> reads_{0};
};

proto::LogEntry Entry(uint64_t seq) {
  proto::LogEntry e;
  e.set_epoch(1);
  e.mutable_record()->set_seq(seq);
  e.mutable_record()->set_key("k" + std::to_string(seq));
  e.set_value(std::string(100, 'v'));
  return e;
}

std::unique_ptr<ReplicaLog> OpenLog(storage::Disk* disk, std::vector<uint64_t>* seqs = nullptr) {
  auto log = ReplicaLog::Open(disk, "/d", ReplicaLog::Options(), [seqs](const proto::LogEntry& e) {
    if (seqs != nullptr) seqs->push_back(e.record().seq());
    return absl::OkStatus();
  });
  EXPECT_TRUE(log.ok()) << log.status();
  return log.ok() ? *std::move(log) : nullptr;
}

// Records each done's status.
// Opens the log in "/d", each key's last value (state or live PUT) replayed into *state.
absl::StatusOr<std::unique_ptr<ReplicaLog>> OpenKeys(storage::Disk* disk,
                                                     const ReplicaLog::Options& o,
                                                     std::map<std::string, std::string>* state,
                                                     ReplicaLog::Recovery* rec = nullptr) {
  return ReplicaLog::Open(
      disk, "/d", o,
      [state](const proto::LogEntry& e) {
        if (e.kind() == proto::LogEntry::STATE || e.kind() == proto::LogEntry::LIVE) {
          (*state)[e.record().key()] = e.value();
        }
        return absl::OkStatus();
      },
      rec);
}

struct Dones {
  std::vector<absl::StatusCode> codes;
  LogWriter::Done Next() {
    const size_t i = codes.size();
    codes.push_back(absl::StatusCode::kUnknown);  // not run yet
    return [this, i](absl::Status st) { codes[i] = st.code(); };
  }
  int Count(absl::StatusCode c) const {
    return static_cast<int>(std::count(codes.begin(), codes.end(), c));
  }
};

TEST(FsyncPolicyTest, ParsesTheThreePoliciesStrictly) {
  EXPECT_EQ(FsyncPolicy::Parse("always")->kind, FsyncPolicy::Kind::kAlways);
  EXPECT_EQ(FsyncPolicy::Parse("never")->kind, FsyncPolicy::Kind::kNever);
  absl::StatusOr<FsyncPolicy> p = FsyncPolicy::Parse("interval:250");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->interval, absl::Milliseconds(250));
  EXPECT_EQ(p->ToString(), "interval:250");
  for (const char* bad : {"", "sometimes", "interval:", "interval:0", "interval:60001",
                          "interval:-5", "interval:1s", "Always"}) {
    EXPECT_EQ(FsyncPolicy::Parse(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

// `always`: nothing is acknowledged before the fsync that covers it, and one fsync covers every
// record submitted before the round.
TEST(LogWriterTest, AlwaysAcknowledgesAfterOneFsyncPerRound) {
  storage::MemoryDisk disk;
  FakeClock clock;
  Dones dones;
  {
    LogWriter w(OpenLog(&disk), *FsyncPolicy::Parse("always"), &clock);
    for (uint64_t s = 1; s <= 3; ++s) w.Submit(Entry(s), dones.Next());
    EXPECT_EQ(dones.Count(absl::StatusCode::kUnknown), 3);  // queued: nothing acknowledged
    EXPECT_EQ(w.Poll(), 3);
    EXPECT_EQ(dones.Count(absl::StatusCode::kOk), 3);
    EXPECT_EQ(w.stats().syncs, 1u);
    disk.Crash();  // power loss right after: every acknowledged record is on disk
  }
  std::vector<uint64_t> seqs;
  OpenLog(&disk, &seqs);
  EXPECT_EQ(seqs, (std::vector<uint64_t>{1, 2, 3}));
}

// `interval:MS`: acknowledged once written; an fsync only once MS passed since the last.
TEST(LogWriterTest, IntervalAcknowledgesOnWriteAndSyncsEveryInterval) {
  storage::MemoryDisk disk;
  FakeClock clock;
  Dones dones;
  LogWriter w(OpenLog(&disk), *FsyncPolicy::Parse("interval:100"), &clock);
  w.Submit(Entry(1), dones.Next());
  w.Submit(Entry(2), dones.Next());
  w.Poll();
  EXPECT_EQ(dones.Count(absl::StatusCode::kOk), 2);
  EXPECT_EQ(w.stats().syncs, 0u);
  clock.Advance(absl::Milliseconds(99));
  EXPECT_FALSE(w.pending());
  clock.Advance(absl::Milliseconds(1));
  EXPECT_TRUE(w.pending()) << "a sync due is work for a Poll";
  w.Poll();
  EXPECT_EQ(w.stats().syncs, 1u);
  EXPECT_FALSE(w.pending());
  clock.Advance(absl::Hours(1));
  EXPECT_FALSE(w.pending()) << "nothing written since the sync";
  w.Poll();  // nothing new to sync
  EXPECT_EQ(w.stats().syncs, 1u);
  // `never` would not have synced at all.
  storage::MemoryDisk other;
  LogWriter n(OpenLog(&other), *FsyncPolicy::Parse("never"), &clock);
  n.Submit(Entry(1), dones.Next());
  clock.Advance(absl::Hours(1));
  n.Poll();
  n.Stop();
  EXPECT_EQ(n.stats().syncs, 0u);
  EXPECT_EQ(dones.Count(absl::StatusCode::kOk), 3);
}

// A record the log refuses for itself (a seq not after the last) fails with that error alone;
// the log goes on.
TEST(LogWriterTest, ARecordTheLogRefusesFailsAloneWithItsOwnError) {
  storage::MemoryDisk disk;
  FakeClock clock;
  Dones dones;
  LogWriter w(OpenLog(&disk), *FsyncPolicy::Parse("always"), &clock);
  w.Submit(Entry(5), dones.Next());
  w.Submit(Entry(5), dones.Next());  // not after 5
  w.Submit(Entry(6), dones.Next());
  w.Poll();
  EXPECT_EQ(dones.codes,
            (std::vector<absl::StatusCode>{
                absl::StatusCode::kOk, absl::StatusCode::kInvalidArgument, absl::StatusCode::kOk}));
  EXPECT_TRUE(w.failure().ok());
  EXPECT_EQ(w.stats().failed, 1u);
}

// A full disk: writes fail with RESOURCE_EXHAUSTED (at once while the log is stopped), and
// resume once space returns. Under `always` the failed records were never acknowledged and are
// gone; under `interval` every acknowledged record stays.
TEST(LogWriterTest, AFullDiskFailsWritesUntilSpaceReturns) {
  for (const char* policy : {"always", "interval:1000"}) {
    SCOPED_TRACE(policy);
    storage::MemoryDisk disk;
    FakeClock clock;
    Dones dones;
    std::vector<uint64_t> acked;
    {
      LogWriter w(OpenLog(&disk), *FsyncPolicy::Parse(policy), &clock);
      uint64_t seq = 1;
      auto submit = [&] {
        const uint64_t s = seq++;
        LogWriter::Done d = dones.Next();
        w.Submit(Entry(s), [&acked, s, d](absl::Status st) {
          if (st.ok()) acked.push_back(s);
          d(st);
        });
      };
      submit();
      submit();
      w.Poll();
      disk.set_capacity(disk.used() + 150);  // room for one record more, not two
      submit();
      submit();
      w.Poll();
      EXPECT_EQ(dones.Count(absl::StatusCode::kResourceExhausted), 1 + (policy[0] == 'a'));
      EXPECT_EQ(w.failure().code(), absl::StatusCode::kResourceExhausted);
      submit();                       // refused at the next round, changing nothing
      disk.set_capacity(UINT64_MAX);  // space returns
      w.Poll();                       // too soon to try again
      EXPECT_EQ(dones.codes.back(), absl::StatusCode::kResourceExhausted);
      EXPECT_FALSE(w.failure().ok());
      clock.Advance(absl::Seconds(1));
      w.Poll();  // resumes
      EXPECT_TRUE(w.failure().ok()) << w.failure();
      seq = acked.back() + 1;  // the caller goes on after what was acknowledged
      submit();
      w.Poll();
      EXPECT_EQ(dones.codes.back(), absl::StatusCode::kOk);
    }
    std::vector<uint64_t> seqs;
    OpenLog(&disk, &seqs);
    EXPECT_EQ(seqs, acked);  // exactly what was acknowledged: nothing lost, nothing extra
  }
}

// On its own thread, with a disk whose fsync takes a millisecond: records from several
// threads are all acknowledged in far fewer fsyncs than records (group commit).
class SlowSyncDisk : public storage::MemoryDisk {
 public:
  absl::StatusOr<std::unique_ptr<storage::WritableFile>> OpenForAppend(
      const std::string& path) override {
    auto f = MemoryDisk::OpenForAppend(path);
    if (!f.ok()) return f;
    return std::unique_ptr<storage::WritableFile>(new File(*std::move(f)));
  }

 private:
  class File : public storage::WritableFile {
   public:
    explicit File(std::unique_ptr<storage::WritableFile> f) : f_(std::move(f)) {}
    absl::Status Append(absl::string_view d) override { return f_->Append(d); }
    absl::Status Sync() override {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return f_->Sync();
    }
    uint64_t size() const override { return f_->size(); }

   private:
    std::unique_ptr<storage::WritableFile> f_;
  };
};

TEST(LogWriterTest, GroupCommitOnItsOwnThread) {
  SlowSyncDisk disk;
  LogWriter w(OpenLog(&disk), *FsyncPolicy::Parse("always"), RealClock::Get());
  w.Start();
  std::mutex seq_mu;
  uint64_t seq = 0;
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        std::lock_guard<std::mutex> l(seq_mu);  // seqs reach the queue in order
        w.Submit(Entry(++seq), [&ok](absl::Status st) { ok += st.ok(); });
      }
    });
  }
  for (std::thread& t : threads) t.join();
  w.Stop();
  EXPECT_EQ(ok.load(), 800);
  EXPECT_EQ(w.stats().records, 800u);
  EXPECT_LT(w.stats().syncs, 800u / 4) << "one fsync per record: no group commit";
}

// On its own thread, `interval` syncs a record when its interval ends, with nothing submitted
// after it to wake the thread.
TEST(LogWriterTest, IntervalSyncsOnItsOwnThreadWithNoLaterRecord) {
  storage::MemoryDisk disk;
  LogWriter w(OpenLog(&disk), *FsyncPolicy::Parse("interval:20"), RealClock::Get());
  w.Start();
  std::atomic<int> ok{0};
  w.Submit(Entry(1), [&ok](absl::Status st) { ok += st.ok(); });
  const auto start = std::chrono::steady_clock::now();
  while (w.stats().syncs == 0 &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(10)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(w.stats().syncs, 1u);
  EXPECT_EQ(ok.load(), 1);
  w.Stop();
}

// Once the log grew past compact_bytes, a round ends with a compaction (all three steps at once:
// the writer is driven by its caller):
// the log's keys are rewritten as a state, and what recovery rebuilds is unchanged.
// Under every policy (`never`'s log, never synced otherwise, too).
TEST(LogWriterTest, ARoundCompactsTheLogOnceItGrewEnough) {
  for (const char* policy : {"always", "interval:1000", "never"}) {
    SCOPED_TRACE(policy);
    storage::MemoryDisk disk;
    ReplicaLog::Options o;
    o.compact_bytes = 1 << 20;
    auto open = [&](std::map<std::string, std::string>* state) {
      return OpenKeys(&disk, o, state);
    };
    std::map<std::string, std::string> state;
    auto log = open(&state);
    ASSERT_TRUE(log.ok());
    FakeClock clock;
    LogWriter w(*std::move(log), *FsyncPolicy::Parse(policy), &clock);
    Dones dones;
    for (uint64_t s = 1; s <= 400; ++s) {  // 400 writes of 10 KB over 20 keys: 4 MB
      proto::LogEntry e = Entry(s);
      e.mutable_record()->set_key("k" + std::to_string(s % 20));
      e.set_value(std::string(10000, static_cast<char>('a' + s % 26)));
      w.Submit(e, dones.Next());
      if (s % 50 == 0) w.Poll();
    }
    w.Poll();
    EXPECT_EQ(dones.Count(absl::StatusCode::kOk), 400);
    EXPECT_GE(w.stats().compactions, 1u);
    w.Stop();
    std::map<std::string, std::string> recovered;
    ASSERT_TRUE(open(&recovered).ok());
    EXPECT_EQ(recovered.size(), 20u);
    EXPECT_EQ(recovered["k0"], std::string(10000, static_cast<char>('a' + 400 % 26)));
  }
}

// A disk whose reads wait while held: a compaction's reading stalls where a test wants it.
class HeldReadDisk : public storage::MemoryDisk {
 public:
  absl::StatusOr<std::string> ReadAt(const std::string& path, uint64_t offset,
                                     uint64_t length) override {
    std::unique_lock<std::mutex> l(hold_mu_);
    ++waiting_;
    cv_.wait(l, [this] { return !held_; });
    --waiting_;
    l.unlock();
    return MemoryDisk::ReadAt(path, offset, length);
  }
  void Hold(bool on) {
    std::lock_guard<std::mutex> l(hold_mu_);
    held_ = on;
    cv_.notify_all();
  }
  int waiting() {
    std::lock_guard<std::mutex> l(hold_mu_);
    return waiting_;
  }

 private:
  std::mutex hold_mu_;
  std::condition_variable cv_;
  bool held_ = false;
  int waiting_ = 0;
};

// Bounded: until `done` or 10 s.
bool WaitUntil(const std::function<bool()>& done) {
  const auto start = std::chrono::steady_clock::now();
  while (!done()) {
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(10)) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// Started, the writer builds a compaction's state on a thread of its own: while that thread
// is held in its reading, records are still written, synced and acknowledged; once it is let
// go the state is put in place, and recovery rebuilds every key's last value.
TEST(LogWriterTest, StartedItAppendsWhileACompactionReadsTheLog) {
  HeldReadDisk disk;
  ReplicaLog::Options o;
  o.compact_bytes = 1 << 20;
  auto open = [&](std::map<std::string, std::string>* state) { return OpenKeys(&disk, o, state); };
  std::map<std::string, std::string> want, state;
  auto log = open(&state);
  ASSERT_TRUE(log.ok());
  CountingClock clock;
  LogWriter w(*std::move(log), *FsyncPolicy::Parse("always"), &clock);
  w.Start();
  disk.Hold(true);
  std::atomic<int> ok{0};
  uint64_t s = 0;
  auto submit = [&](int n) {
    for (int i = 0; i < n; ++i) {
      proto::LogEntry e = Entry(++s);
      e.mutable_record()->set_key("k" + std::to_string(s % 20));
      e.set_value(std::string(10000, static_cast<char>('a' + s % 26)));
      want[e.record().key()] = e.value();
      w.Submit(e, [&ok](absl::Status st) { ok += st.ok(); });
    }
  };
  submit(200);  // 2 MB over 20 keys: a compaction begins, and its reading waits
  ASSERT_TRUE(WaitUntil([&] { return ok.load() == 200 && disk.waiting() == 1; }))
      << ok.load() << " acknowledged, " << disk.waiting() << " reads waiting";
  submit(50);
  EXPECT_TRUE(WaitUntil([&] { return ok.load() == 250; }))
      << "records waited for the compaction: " << ok.load() - 200 << " of 50 acknowledged";
  EXPECT_EQ(w.stats().compactions, 0u);
  disk.Hold(false);
  ASSERT_TRUE(WaitUntil([&] { return w.stats().compactions == 1; }));
  // Then, with nothing submitted, the writer's thread sleeps: it makes no rounds. (It once
  // woke for the finished compaction over and over, a core kept busy.)
  const uint64_t reads = clock.reads();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_LT(clock.reads() - reads, 10u) << "the writer's thread spins while idle";
  w.Stop();
  EXPECT_EQ(w.stats().records, 250u);
  std::map<std::string, std::string> recovered;
  ReplicaLog::Recovery rec;
  ASSERT_TRUE(OpenKeys(&disk, o, &recovered, &rec).ok());
  EXPECT_EQ(recovered, want);
  EXPECT_TRUE(rec.state);  // from the compaction's state, then the records after it
  EXPECT_EQ(rec.last_seq, 250u);
}

}  // namespace
}  // namespace unloadkv::server
