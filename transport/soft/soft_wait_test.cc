// How a caller-driven soft device ends a Progress that waits: Interrupt, and a completion that
// appears without network work (here a receive flushed by a QP failed from another thread),
// both end the wait at once; nothing else would, before max_wait.
#include <thread>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "transport/base/logging.h"
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

}  // namespace
}  // namespace unloadkv::soft
