// SoftDevice::Options::wait_in_read: a caller-driven device with one stream waits in recv on
// it, and wakes for its input; a peer that dials it back is still accepted (a QP in its
// handshake makes the wait an epoll_wait); a peer that goes away ends the wait and fails the
// QP; and such a device says it cannot be interrupted.
#include <optional>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "transport/base/logging.h"
#include "transport/rnic/wait.h"
#include "transport/soft/soft_device.h"
#include "transport/soft/test_endpoint.h"

namespace unloadkv::soft {
namespace {

constexpr absl::Duration kBound = absl::Seconds(10);  // a generous bound; none is reached

using Endpoint = TestEndpoint;

SoftDevice::Options WaitsInRead() {
  SoftDevice::Options o;
  o.wait_in_read = true;
  return o;
}

SoftDevice::Options Threaded() {
  SoftDevice::Options o;
  o.progress_thread = true;
  return o;
}

// Progresses `e` as the SDK's caller does (waits of 1 ms) until its CQ yields a completion.
// It waits before it polls: the completion comes from the peer later.
std::optional<rnic::WorkCompletion> DriveUntilCompletion(Endpoint& e) {
  rnic::WorkCompletion wc;
  for (const absl::Time end = absl::Now() + kBound; absl::Now() < end;) {
    e.device->Progress(absl::Milliseconds(1));
    if (e.cq->Poll({&wc, 1}) == 1) return wc;
  }
  return std::nullopt;
}

// Connects a.qp(i) with b.qp(j) and exchanges one SEND from a to b, driving `a` meanwhile.
void ConnectAndSend(Endpoint& a, size_t i, Endpoint& b, size_t j) {
  ASSERT_TRUE(a.qp(i)->Connect(b.qp(j)->local_attributes()).ok());
  ASSERT_TRUE(b.qp(j)->Connect(a.qp(i)->local_attributes()).ok());
  ASSERT_TRUE(b.qp(j)->PostRecv(rnic::MakeRecv(100 + j, b.Sge(64 * j))).ok());
  ASSERT_TRUE(a.qp(i)->PostSend(rnic::MakeSend(200 + i, a.Sge(1024 + 64 * i))).ok());
  std::optional<rnic::WorkCompletion> wc = DriveUntilCompletion(a);
  ASSERT_TRUE(wc.has_value()) << "the first SEND on the pair never completed";
  EXPECT_EQ(wc->wr_id, 200 + i);
  EXPECT_EQ(wc->status, rnic::WcStatus::kSuccess);
}

TEST(SoftWaitInReadTest, WaitsInRecvOnItsOneStreamAndWakesForItsInput) {
  Endpoint a, b;
  a.Init(WaitsInRead(), 1);
  b.Init(Threaded(), 2);  // QP numbers 1 and 2: a's QP 1 is the smaller and dials b
  EXPECT_FALSE(a.device->interruptible());
  ConnectAndSend(a, 0, b, 1);
  for (int round = 0; round < 20; ++round) {
    ASSERT_TRUE(a.qp(0)->PostRecv(rnic::MakeRecv(300 + round, a.Sge(0))).ok());
    const uint64_t before = a.device->waits_in_read();
    // a waits first (as a client for its answer), then b sends.
    absl::Notification waiting;
    std::optional<rnic::WorkCompletion> wc;
    std::thread waiter([&] {
      waiting.Notify();
      wc = DriveUntilCompletion(a);
    });
    waiting.WaitForNotification();
    ASSERT_TRUE(b.qp(1)->PostSend(rnic::MakeSend(400 + round, b.Sge(2048))).ok());
    waiter.join();
    ASSERT_TRUE(wc.has_value()) << "round " << round << ": nothing arrived";
    EXPECT_EQ(wc->wr_id, 300u + round);
    EXPECT_EQ(wc->status, rnic::WcStatus::kSuccess);
    // Every wait was one: the device has one stream and nothing else to watch.
    EXPECT_GE(a.device->waits_in_read() - before, 1u) << "round " << round;
  }
}

TEST(SoftWaitInReadTest, APeerThatDialsBackIsStillAccepted) {
  Endpoint a, b;
  a.Init(WaitsInRead(), 4);
  b.Init(Threaded(), 3);
  ConnectAndSend(a, 0, b, 1);  // a's QP 1 dials b's QP 2: a's one stream
  // a's QP 4 against b's QP 3: b dials a, a new inbound stream a must accept while it waits.
  ASSERT_TRUE(a.qp(3)->PostRecv(rnic::MakeRecv(7, a.Sge(0))).ok());
  ASSERT_TRUE(a.qp(3)->Connect(b.qp(2)->local_attributes()).ok());
  ASSERT_TRUE(b.qp(2)->Connect(a.qp(3)->local_attributes()).ok());
  ASSERT_TRUE(b.qp(2)->PostSend(rnic::MakeSend(8, b.Sge(2048))).ok());
  std::optional<rnic::WorkCompletion> wc = DriveUntilCompletion(a);
  ASSERT_TRUE(wc.has_value()) << "the pair b dialed never connected";
  EXPECT_EQ(wc->wr_id, 7u);
  EXPECT_EQ(wc->status, rnic::WcStatus::kSuccess);
}

TEST(SoftWaitInReadTest, APeerThatGoesAwayEndsTheWaitAndFailsTheQp) {
  Endpoint a, b;
  a.Init(WaitsInRead(), 1);
  b.Init(Threaded(), 2);
  ConnectAndSend(a, 0, b, 1);
  ASSERT_TRUE(a.qp(0)->PostRecv(rnic::MakeRecv(9, a.Sge(0))).ok());
  a.device->Progress(absl::Milliseconds(1));  // nothing comes: a wait in recv that times out
  const uint64_t before = a.device->waits_in_read();
  EXPECT_GE(before, 1u);
  std::optional<rnic::WorkCompletion> wc;
  absl::Notification waiting;
  std::thread waiter([&] {
    waiting.Notify();
    wc = DriveUntilCompletion(a);
  });
  waiting.WaitForNotification();
  b = Endpoint();  // its device closes the stream a waits on
  waiter.join();
  ASSERT_TRUE(wc.has_value()) << "the receive was never flushed";
  EXPECT_EQ(wc->wr_id, 9u);
  EXPECT_NE(wc->status, rnic::WcStatus::kSuccess);
  EXPECT_EQ(a.qp(0)->state(), rnic::QpState::kError);
}

}  // namespace
}  // namespace unloadkv::soft
