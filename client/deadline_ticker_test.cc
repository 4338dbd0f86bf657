#include "client/deadline_ticker.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace unloadkv {
namespace {

// Waits (bounded) until `cond` holds.
template <typename F>
bool Eventually(F cond, absl::Duration limit = absl::Seconds(10)) {
  const absl::Time deadline = absl::Now() + limit;
  while (!cond()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

TEST(DeadlineTickerTest, ChecksOfManyClientsRunOnOneThreadAndStopWhenRemoved) {
  DeadlineTicker& ticker = DeadlineTicker::Get();
  constexpr int kClients = 16;
  std::atomic<int> runs[kClients] = {};
  std::atomic<std::thread::id> seen[kClients];
  std::vector<uint64_t> ids;
  for (int i = 0; i < kClients; ++i) {
    ids.push_back(ticker.Add([&runs, &seen, i] {
      seen[i] = std::this_thread::get_id();
      ++runs[i];
    }));
  }
  EXPECT_TRUE(ticker.running());
  ASSERT_TRUE(Eventually([&] {
    for (const auto& r : runs) {
      if (r.load() < 3) return false;
    }
    return true;
  })) << "checks did not run again and again";
  for (int i = 1; i < kClients; ++i) {
    EXPECT_EQ(seen[i].load(), seen[0].load()) << "check " << i << " ran on another thread";
  }
  EXPECT_NE(seen[0].load(), std::this_thread::get_id());

  // After Remove returns, a check never runs again.
  ticker.Remove(ids[0]);
  const int frozen = runs[0].load();
  ASSERT_TRUE(Eventually([&] { return runs[1].load() >= frozen + 3; }));
  EXPECT_EQ(runs[0].load(), frozen);

  for (int i = 1; i < kClients; ++i) ticker.Remove(ids[i]);
  // No check left: the thread ends (an idle process keeps no ticking thread).
  EXPECT_TRUE(Eventually([&] { return !ticker.running(); }));
  // And a new check starts it again.
  std::atomic<int> again{0};
  const uint64_t id = ticker.Add([&again] { ++again; });
  EXPECT_TRUE(Eventually([&] { return again.load() >= 2; }));
  ticker.Remove(id);
}

TEST(DeadlineTickerTest, RemoveWaitsForARunningCheck) {
  DeadlineTicker& ticker = DeadlineTicker::Get();
  std::atomic<bool> inside{false}, release{false}, finished{false};
  const uint64_t id = ticker.Add([&] {
    if (finished) return;
    inside = true;
    while (!release) std::this_thread::yield();
    finished = true;
  });
  ASSERT_TRUE(Eventually([&] { return inside.load(); }));
  std::thread releaser([&] {
    absl::SleepFor(absl::Milliseconds(50));
    release = true;
  });
  ticker.Remove(id);  // the check is running: Remove returns only after it ended
  EXPECT_TRUE(finished.load());
  releaser.join();
}

}  // namespace
}  // namespace unloadkv
