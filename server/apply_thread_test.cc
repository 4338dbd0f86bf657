#include "server/apply_thread.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace unloadkv::server {
namespace {

proto::LogEntry Live(uint64_t seq) {
  proto::LogEntry e;
  e.set_kind(proto::LogEntry::LIVE);
  e.mutable_record()->set_seq(seq);
  return e;
}

TEST(ApplyThreadTest, AppliesEveryRecordOnceInOrderOnAnotherThread) {
  std::vector<uint64_t> applied;
  std::thread::id where;
  ApplyThread::Apply apply = [&](const proto::LogEntry& e) {
    applied.push_back(e.record().seq());
    where = std::this_thread::get_id();
    return absl::OkStatus();
  };
  ApplyThread t(apply);
  for (uint64_t seq = 1; seq <= 1000; ++seq) ASSERT_TRUE(t.Push(Live(seq), 100).ok());
  ASSERT_TRUE(t.Finish().ok());
  ASSERT_EQ(applied.size(), 1000u);
  for (uint64_t i = 0; i < applied.size(); ++i) EXPECT_EQ(applied[i], i + 1);
  EXPECT_NE(where, std::this_thread::get_id());
  EXPECT_TRUE(t.Finish().ok());  // again: the same answer
}

TEST(ApplyThreadTest, TheFirstErrorStopsItAndNothingAfterTheFailedRecordIsApplied) {
  std::vector<uint64_t> applied;
  ApplyThread::Apply apply = [&](const proto::LogEntry& e) {
    applied.push_back(e.record().seq());
    if (e.record().seq() == 100) return absl::DataLossError("record 100 is bad");
    if (e.record().seq() == 200) return absl::InternalError("a second error");
    return absl::OkStatus();
  };
  ApplyThread t(apply);
  // Pushes until refused: at the latest when the queue holds its bound (about 168,000 of these
  // records), the reader waits for the applier, which fails at record 100.
  absl::Status first_refusal;
  for (uint64_t seq = 1; seq <= 1000000 && first_refusal.ok(); ++seq) {
    first_refusal = t.Push(Live(seq), 100);
  }
  const absl::Status st = t.Finish();
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(st.message(), "record 100 is bad");
  EXPECT_EQ(first_refusal.code(), absl::StatusCode::kDataLoss);
  ASSERT_EQ(applied.size(), 100u);
  EXPECT_EQ(applied.back(), 100u);
}

TEST(ApplyThreadTest, FinishWithNothingPushedIsOk) {
  ApplyThread::Apply apply = [](const proto::LogEntry&) {
    ADD_FAILURE() << "nothing to apply";
    return absl::OkStatus();
  };
  ApplyThread t(apply);
  EXPECT_TRUE(t.Finish().ok());
}

// With the applier held, the reader can get at most the bound (and a batch either side) ahead:
// a log larger than memory never sits in the queue.
TEST(ApplyThreadTest, TheReaderWaitsWhenTheQueueHoldsItsBound) {
  std::mutex mu;
  std::condition_variable cv;
  bool released = false;
  ApplyThread::Apply apply = [&](const proto::LogEntry&) {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return released; });
    return absl::OkStatus();
  };
  constexpr uint64_t kRecordBytes = 1 << 20;
  constexpr int kRecords = 1000;
  std::atomic<int> pushed{0};
  ApplyThread t(apply);
  std::thread reader([&] {
    for (int i = 1; i <= kRecords; ++i) {
      EXPECT_TRUE(t.Push(Live(i), kRecordBytes).ok());
      pushed.store(i);
    }
  });
  // The applier holds the first batch of 64 and waits; the queue takes one more batch whatever
  // its size (it was empty), then no more: the 192nd Push hands over the third batch and waits.
  constexpr int kStuckAt = 3 * 64 - 1;
  for (int i = 0; i < 10000 && pushed.load() < kStuckAt; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(pushed.load(), kStuckAt);
  // Nothing can prove a wait but time: it stays there.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(pushed.load(), kStuckAt);
  {
    std::lock_guard<std::mutex> l(mu);
    released = true;
  }
  cv.notify_all();
  reader.join();
  EXPECT_EQ(pushed.load(), kRecords);
  EXPECT_TRUE(t.Finish().ok());
}

}  // namespace
}  // namespace unloadkv::server
