#include "transport/base/ring_queue.h"

#include <deque>
#include <memory>
#include <random>
#include <string>

#include "gtest/gtest.h"

namespace unloadkv {
namespace {

TEST(RingQueueTest, KeepsFifoOrderAcrossWrapAndGrowth) {
  RingQueue<int> q;
  std::deque<int> model;
  std::mt19937 rng(7);
  int next = 0;
  for (int step = 0; step < 20000; ++step) {
    if (model.empty() || rng() % 3 != 0) {
      q.push_back(next);
      model.push_back(next++);
    } else {
      ASSERT_EQ(q.front(), model.front());
      q.pop_front();
      model.pop_front();
    }
    ASSERT_EQ(q.size(), model.size());
    if (!model.empty()) ASSERT_EQ(q.back(), model.back());
  }
  size_t i = 0;
  for (int v : q) ASSERT_EQ(v, model[i++]);
  EXPECT_EQ(i, model.size());
}

TEST(RingQueueTest, SteadyStreamKeepsItsCapacity) {
  RingQueue<std::string> q;
  for (int i = 0; i < 5; ++i) q.push_back("x");
  const size_t cap = q.capacity();
  for (int i = 0; i < 100000; ++i) {
    q.emplace_back("y");
    q.pop_front();
  }
  EXPECT_EQ(q.capacity(), cap);
  EXPECT_EQ(q.size(), 5u);
}

TEST(RingQueueTest, PopAndEraseReleaseWhatTheElementHeld) {
  auto held = std::make_shared<int>(1);
  RingQueue<std::shared_ptr<int>> q;
  q.push_back(held);
  q.push_back(held);
  q.push_back(held);
  EXPECT_EQ(held.use_count(), 4);
  q.pop_front();
  EXPECT_EQ(held.use_count(), 3);
  q.erase(q.begin());
  EXPECT_EQ(held.use_count(), 2);
  q.clear();
  EXPECT_EQ(held.use_count(), 1);
  EXPECT_TRUE(q.empty());
}

TEST(RingQueueTest, EraseInTheMiddleKeepsTheRestInOrder) {
  RingQueue<int> q;
  for (int i = 0; i < 6; ++i) q.push_back(i);
  q.pop_front();
  q.pop_front();
  for (int i = 6; i < 12; ++i) q.push_back(i);  // wraps
  auto it = q.begin();
  ++it;
  ++it;  // 4
  it = q.erase(it);
  EXPECT_EQ(*it, 5);
  std::vector<int> got(q.begin(), q.end());
  EXPECT_EQ(got, (std::vector<int>{2, 3, 5, 6, 7, 8, 9, 10, 11}));
  // Erasing by index while walking, as callers do.
  for (auto i = q.begin(); i != q.end();) i = (*i % 2 == 0) ? q.erase(i) : std::next(i);
  got.assign(q.begin(), q.end());
  EXPECT_EQ(got, (std::vector<int>{3, 5, 7, 9, 11}));
}

TEST(RingQueueTest, MoveAndSwapCarryTheElements) {
  RingQueue<int> a;
  for (int i = 0; i < 3; ++i) a.push_back(i);
  RingQueue<int> b = std::move(a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(b.size(), 3u);
  a.push_back(9);
  a.swap(b);
  EXPECT_EQ(a.size(), 3u);
  EXPECT_EQ(b.front(), 9);
  b.pop_front();
  b.ShrinkToFit();
  EXPECT_EQ(b.capacity(), 0u);
}

}  // namespace
}  // namespace unloadkv
