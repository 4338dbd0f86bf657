// What only the soft RNIC can show about memory windows: a WRITE through a window whose
// payload is still arriving when the window is invalidated places no byte after the
// invalidation, and a QP that fails takes its windows' keys with it.
#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "transport/base/logging.h"
#include "transport/rnic/wait.h"
#include "transport/soft/soft_device.h"

namespace unloadkv::soft {
namespace {

constexpr size_t kBig = 32 << 20;  // several Progress budgets of payload

struct End {
  std::unique_ptr<SoftDevice> device;
  std::vector<char> buffer = std::vector<char>(kBig + 4096, 0);
  std::unique_ptr<rnic::MemoryRegion> mr;
  std::unique_ptr<rnic::CompletionQueue> cq;
  std::unique_ptr<rnic::QueuePair> qp;

  void Init(bool progress_thread, uint32_t access) {
    SoftDevice::Options o;
    o.progress_thread = progress_thread;
    device = std::move(*SoftDevice::Create(o));
    mr = *device->RegisterMemory(buffer.data(), buffer.size(), access);
    cq = *device->CreateCompletionQueue(256);
    rnic::QpConfig cfg;
    cfg.send_cq = cq.get();
    cfg.recv_cq = cq.get();
    qp = *device->CreateQueuePair(cfg);
  }
};

// The next completion on `waiter`'s CQ, driving `driven` (caller-driven) meanwhile.
absl::StatusOr<rnic::WorkCompletion> NextDriving(End& waiter, End& driven) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    rnic::WorkCompletion wc;
    if (waiter.cq->Poll(absl::MakeSpan(&wc, 1)) == 1) return wc;
    driven.device->Progress(absl::Milliseconds(1));
  }
  return absl::DeadlineExceededError("no completion within 10 s");
}

class SoftWindowTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetMinLogLevel(LogLevel::kError);
    a_.Init(/*progress_thread=*/true, rnic::kLocalWrite);
    // b is driven by this test: its payloads are placed only when it calls Progress.
    b_.Init(/*progress_thread=*/false, rnic::kLocalWrite | rnic::kMwBind);
    ASSERT_TRUE(a_.qp->Connect(b_.qp->local_attributes()).ok());
    ASSERT_TRUE(b_.qp->Connect(a_.qp->local_attributes()).ok());
    window_ = *b_.device->AllocateWindow();
    ASSERT_TRUE(b_.qp
                    ->PostSend(rnic::MakeBindWindow(1, window_.get(), *b_.mr, b_.mr->address(),
                                                    kBig, rnic::kRemoteWrite))
                    .ok());
    absl::StatusOr<rnic::WorkCompletion> bound =
        rnic::WaitForCompletion(*b_.device, *b_.cq, absl::Seconds(10));
    ASSERT_TRUE(bound.ok() && bound->status == rnic::WcStatus::kSuccess);
  }
  void TearDown() override { window_.reset(); }

  End a_, b_;
  std::unique_ptr<rnic::MemoryWindow> window_;
};

TEST_F(SoftWindowTest, AnInvalidationEndsAWriteWhosePayloadIsStillArriving) {
  std::memset(a_.buffer.data(), 'w', kBig);
  ASSERT_TRUE(
      a_.qp->PostSend(rnic::MakeWrite(2, a_.mr->Sge(0, kBig), b_.mr->address(), window_->rkey()))
          .ok());
  // Drive b until the first bytes are in place but not the last.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (b_.buffer[0] != 'w' && absl::Now() < deadline) b_.device->Progress(absl::Milliseconds(1));
  ASSERT_EQ(b_.buffer[0], 'w') << "no byte arrived";
  ASSERT_EQ(b_.buffer[kBig - 1], 0) << "the whole payload arrived in one Progress";
  ASSERT_TRUE(b_.qp->PostSend(rnic::MakeLocalInvalidate(3, window_->rkey())).ok());
  // From here on, no byte lands: the write is refused.
  absl::StatusOr<rnic::WorkCompletion> inv =
      rnic::WaitForCompletion(*b_.device, *b_.cq, absl::Seconds(10));
  ASSERT_TRUE(inv.ok()) << inv.status();
  const size_t placed = static_cast<size_t>(
      std::find(b_.buffer.begin(), b_.buffer.begin() + kBig, 0) - b_.buffer.begin());
  absl::StatusOr<rnic::WorkCompletion> wrote = NextDriving(a_, b_);
  ASSERT_TRUE(wrote.ok()) << wrote.status();
  EXPECT_EQ(wrote->status, rnic::WcStatus::kRemoteAccessError) << wrote->DebugString();
  for (int i = 0; i < 20; ++i) b_.device->Progress(absl::Milliseconds(1));
  EXPECT_LT(placed, kBig);
  for (size_t i = placed; i < kBig; i += 4096) {
    ASSERT_EQ(b_.buffer[i], 0) << "byte " << i << " landed after the invalidation";
  }
  EXPECT_EQ(b_.qp->state(), rnic::QpState::kError);
}

TEST_F(SoftWindowTest, AFailedQpTakesItsWindowsKeysWithIt) {
  const uint32_t key = window_->rkey();
  b_.qp->SetError();
  // A fresh pair between the same devices cannot use the key (it was never bound on it), and
  // the window can be bound again: it is unbound.
  ASSERT_TRUE(b_.qp
                  ->PostSend(rnic::MakeBindWindow(4, window_.get(), *b_.mr, b_.mr->address(), 64,
                                                  rnic::kRemoteWrite))
                  .ok());
  absl::StatusOr<rnic::WorkCompletion> flushed =
      rnic::WaitForCompletion(*b_.device, *b_.cq, absl::Seconds(10));
  ASSERT_TRUE(flushed.ok());
  EXPECT_EQ(flushed->status, rnic::WcStatus::kFlushed);
  rnic::QpConfig cfg;
  cfg.send_cq = b_.cq.get();
  cfg.recv_cq = b_.cq.get();
  std::unique_ptr<rnic::QueuePair> fresh = *b_.device->CreateQueuePair(cfg);
  std::unique_ptr<rnic::QueuePair> peer = *a_.device->CreateQueuePair(
      rnic::QpConfig{a_.cq.get(), a_.cq.get(), 1024, 1024, nullptr, absl::Seconds(1)});
  ASSERT_TRUE(peer->Connect(fresh->local_attributes()).ok());
  ASSERT_TRUE(fresh->Connect(peer->local_attributes()).ok());
  ASSERT_TRUE(fresh
                  ->PostSend(rnic::MakeBindWindow(5, window_.get(), *b_.mr, b_.mr->address(), 64,
                                                  rnic::kRemoteWrite))
                  .ok());
  absl::StatusOr<rnic::WorkCompletion> rebound =
      rnic::WaitForCompletion(*b_.device, *b_.cq, absl::Seconds(10));
  ASSERT_TRUE(rebound.ok());
  EXPECT_EQ(rebound->status, rnic::WcStatus::kSuccess) << rebound->DebugString();
  EXPECT_NE(window_->rkey(), key);
  std::memset(a_.buffer.data(), 'k', 64);
  ASSERT_TRUE(peer->PostSend(rnic::MakeWrite(6, a_.mr->Sge(0, 64), b_.mr->address(), key)).ok());
  absl::StatusOr<rnic::WorkCompletion> old = NextDriving(a_, b_);
  // a's first QP failed too (b told it); skip its flush completions.
  while (old.ok() && old->qp_num != peer->qp_num()) old = NextDriving(a_, b_);
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->status, rnic::WcStatus::kRemoteAccessError) << old->DebugString();
  EXPECT_EQ(b_.buffer[0], 0);
}

}  // namespace
}  // namespace unloadkv::soft
