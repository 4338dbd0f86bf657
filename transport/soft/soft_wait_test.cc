// How a caller-driven soft device ends a Progress that waits: Interrupt, and a completion that
// appears without network work (here a receive flushed by a QP failed from another thread),
// both end the wait at once; nothing else would, before max_wait.
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "transport/base/logging.h"
#include "transport/rnic/wait.h"
#include "transport/soft/soft_device.h"

namespace unloadkv::soft {
namespace {

constexpr absl::Duration kLongWait = absl::Seconds(30);

// Runs device.Progress(kLongWait) on a thread; Join returns how long it waited.
class Waiter {
 public:
  explicit Waiter(SoftDevice& device)
      : thread_([this, &device] {
          const absl::Time t0 = absl::Now();
          started_.Notify();
          device.Progress(kLongWait);
          waited_ = absl::Now() - t0;
        }) {
    started_.WaitForNotification();
  }
  absl::Duration Join() {
    thread_.join();
    return waited_;
  }

 private:
  absl::Notification started_;
  absl::Duration waited_;
  std::thread thread_;
};

std::unique_ptr<SoftDevice> CallerDriven() {
  SetMinLogLevel(LogLevel::kError);
  absl::StatusOr<std::unique_ptr<SoftDevice>> d = SoftDevice::Create({});
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? std::move(*d) : nullptr;
}

TEST(SoftWaitTest, OnlyACallerDrivenDeviceIsInterruptible) {
  std::unique_ptr<SoftDevice> caller_driven = CallerDriven();
  ASSERT_NE(caller_driven, nullptr);
  EXPECT_TRUE(caller_driven->interruptible());
  SoftDevice::Options o;
  o.progress_thread = true;
  absl::StatusOr<std::unique_ptr<SoftDevice>> threaded = SoftDevice::Create(o);
  ASSERT_TRUE(threaded.ok()) << threaded.status();
  EXPECT_FALSE((*threaded)->interruptible());
  (*threaded)->Interrupt();  // nothing to wake; harmless
}

TEST(SoftWaitTest, InterruptEndsAWaitingProgress) {
  std::unique_ptr<SoftDevice> device = CallerDriven();
  ASSERT_NE(device, nullptr);
  Waiter waiter(*device);
  // Whether the waiter is already in epoll_wait or not yet: its Progress returns early.
  device->Interrupt();
  EXPECT_LT(waiter.Join(), kLongWait / 3);
  // The interrupt was used up: a later wait lasts.
  const absl::Time t0 = absl::Now();
  device->Progress(absl::Milliseconds(50));
  EXPECT_GE(absl::Now() - t0, absl::Milliseconds(45));
}

TEST(SoftWaitTest, ACompletionPushedByAnotherThreadEndsAWaitingProgress) {
  std::unique_ptr<SoftDevice> device = CallerDriven();
  ASSERT_NE(device, nullptr);
  std::unique_ptr<rnic::CompletionQueue> cq = *device->CreateCompletionQueue(16);
  rnic::QpConfig cfg;
  cfg.send_cq = cq.get();
  cfg.recv_cq = cq.get();
  std::unique_ptr<rnic::QueuePair> qp = *device->CreateQueuePair(cfg);
  std::vector<char> buffer(256);
  std::unique_ptr<rnic::MemoryRegion> mr =
      *device->RegisterMemory(buffer.data(), buffer.size(), rnic::kLocalWrite);
  rnic::RecvWorkRequest r;
  r.wr_id = 7;
  r.sg_list[0] = {reinterpret_cast<uint64_t>(buffer.data()), 256, mr->lkey()};
  r.num_sge = 1;
  ASSERT_TRUE(qp->PostRecv({&r, 1}).ok());

  Waiter waiter(*device);
  qp->SetError();  // flushes the receive: a completion with no frame behind it
  EXPECT_LT(waiter.Join(), kLongWait / 3);
  rnic::WorkCompletion wc;
  ASSERT_EQ(cq->Poll({&wc, 1}), 1);
  EXPECT_EQ(wc.wr_id, 7u);
  EXPECT_EQ(wc.status, rnic::WcStatus::kFlushed);
}

// progress_on_empty_poll false (kvserver's): a CQ poll that finds nothing leaves the device
// alone, so a SEND waiting on the socket is delivered by the owner's Progress and not by the
// poll; by default the poll delivers it itself.
TEST(SoftWaitTest, APollProgressesTheDeviceOnlyIfAskedTo) {
  SetMinLogLevel(LogLevel::kError);
  SoftDevice::Options threaded;
  threaded.progress_thread = true;
  std::unique_ptr<SoftDevice> sender = std::move(*SoftDevice::Create(threaded));
  for (bool progress_on_empty_poll : {true, false}) {
    SoftDevice::Options o;
    o.progress_on_empty_poll = progress_on_empty_poll;
    std::unique_ptr<SoftDevice> receiver = std::move(*SoftDevice::Create(o));
    auto scq = *sender->CreateCompletionQueue(16);
    auto rcq = *receiver->CreateCompletionQueue(16);
    rnic::QpConfig scfg, rcfg;
    scfg.send_cq = scfg.recv_cq = scq.get();
    rcfg.send_cq = rcfg.recv_cq = rcq.get();
    auto sqp = *sender->CreateQueuePair(scfg);
    auto rqp = *receiver->CreateQueuePair(rcfg);
    std::vector<char> src(64, 's'), dst(128, 0);
    auto smr = *sender->RegisterMemory(src.data(), src.size(), rnic::kLocalWrite);
    auto rmr = *receiver->RegisterMemory(dst.data(), dst.size(), rnic::kLocalWrite);
    for (uint64_t id : {1, 2}) {
      rnic::RecvWorkRequest r;
      r.wr_id = id;
      r.sg_list[0] = rmr->Sge(64 * (id - 1), 64);
      r.num_sge = 1;
      ASSERT_TRUE(rqp->PostRecv({&r, 1}).ok());
    }
    ASSERT_TRUE(sqp->Connect(rqp->local_attributes()).ok());
    ASSERT_TRUE(rqp->Connect(sqp->local_attributes()).ok());
    // The first SEND, with the receiver driven as its owner would: the stream is up after it.
    ASSERT_TRUE(sqp->PostSend(rnic::MakeSend(1, smr->Sge(0, 64))).ok());
    absl::StatusOr<rnic::WorkCompletion> first =
        rnic::WaitForCompletion(*receiver, *rcq, absl::Seconds(10));
    ASSERT_TRUE(first.ok()) << first.status();
    // The second waits on the receiver's socket (loopback: within microseconds), which only
    // a poll that progresses, or a Progress, reads.
    ASSERT_TRUE(sqp->PostSend(rnic::MakeSend(2, smr->Sge(0, 64))).ok());
    rnic::WorkCompletion wc;
    if (progress_on_empty_poll) {
      const absl::Time deadline = absl::Now() + absl::Seconds(10);
      while (rcq->Poll({&wc, 1}) == 0) {
        ASSERT_LT(absl::Now(), deadline) << "polls alone never delivered the SEND";
      }
    } else {
      const absl::Time until = absl::Now() + absl::Milliseconds(50);
      while (absl::Now() < until) {
        ASSERT_EQ(rcq->Poll({&wc, 1}), 0) << "the poll progressed the device";
      }
      absl::StatusOr<rnic::WorkCompletion> second =
          rnic::WaitForCompletion(*receiver, *rcq, absl::Seconds(10));
      ASSERT_TRUE(second.ok()) << second.status();
      wc = *second;
    }
    EXPECT_EQ(wc.wr_id, 2u);
    EXPECT_EQ(dst[64], 's');
  }
}

}  // namespace
}  // namespace unloadkv::soft
