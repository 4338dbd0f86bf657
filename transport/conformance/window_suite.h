// The memory-window part of the RNIC conformance suite (rnic/memory_window.h): type-2 windows
// bound on one QP, their keys, and every way a key stops working. Instantiated next to
// RnicConformanceTest with the same traits type:
//
//   INSTANTIATE_TYPED_TEST_SUITE_P(Soft, RnicWindowTest, SoftBackend);
#ifndef UNLOADKV_TRANSPORT_CONFORMANCE_WINDOW_SUITE_H_
#define UNLOADKV_TRANSPORT_CONFORMANCE_WINDOW_SUITE_H_

#include <cstring>
#include <memory>
#include <set>
#include <vector>

#include "transport/conformance/conformance_suite.h"

namespace unloadkv::rnic {

template <typename B>
class RnicWindowTest : public RnicConformanceTest<B> {
 protected:
  // The target's region lends itself to windows only: no remote right of its own.
  static constexpr uint32_t kWindowsOnly = kLocalWrite | kMwBind;

  void ConnectForWindows() { this->Connect(absl::Seconds(5), kWindowsOnly); }

  std::unique_ptr<MemoryWindow> NewWindow(Device& d) {
    absl::StatusOr<std::unique_ptr<MemoryWindow>> w = d.AllocateWindow();
    EXPECT_TRUE(w.ok()) << w.status();
    return w.ok() ? std::move(*w) : nullptr;
  }

  // Posts a bind of `w` to [offset, offset+len) of `e`'s region on `qp` and returns its
  // completion's status.
  static WcStatus Bind(Endpoint& e, QueuePair& qp, CompletionQueue& cq, MemoryWindow* w,
                       size_t offset, size_t len, uint32_t access = kRemoteWrite) {
    SendWorkRequest wr = MakeBindWindow(77, w, *e.mr, e.mr->address() + offset, len, access);
    absl::Status st = qp.PostSend(wr);
    EXPECT_TRUE(st.ok()) << st;
    absl::StatusOr<WorkCompletion> wc = WaitForCompletion(*e.device, cq, absl::Seconds(10));
    EXPECT_TRUE(wc.ok()) << wc.status();
    if (!wc.ok()) return WcStatus::kRetryExceeded;
    if (wc->status == WcStatus::kSuccess) {
      EXPECT_EQ(wc->opcode, WcOpcode::kBindWindow) << wc->DebugString();
    }
    return wc->status;
  }
  WcStatus BindOnB(MemoryWindow* w, size_t offset, size_t len, uint32_t access = kRemoteWrite) {
    return Bind(*this->b_, *this->b_->qp, *this->b_->send_cq, w, offset, len, access);
  }

  // Writes `len` bytes from a's buffer at `offset` to b's `offset` through `rkey`; returns the
  // completion's status.
  WcStatus WriteToB(size_t offset, size_t len, uint32_t rkey, char seed) {
    Endpoint& a = *this->a_;
    this->Fill(a, offset, len, seed);
    EXPECT_TRUE(
        a.qp->PostSend(MakeWrite(5, a.mr->Sge(offset, len), this->BAddr(offset), rkey)).ok());
    absl::StatusOr<WorkCompletion> wc = a.NextSend();
    EXPECT_TRUE(wc.ok()) << wc.status();
    return wc.ok() ? wc->status : WcStatus::kRetryExceeded;
  }

  bool BHolds(size_t offset, size_t len, char byte) const {
    for (size_t i = 0; i < len; ++i) {
      if (this->b_->buffer[offset + i] != byte) return false;
    }
    return true;
  }
};

TYPED_TEST_SUITE_P(RnicWindowTest);

TYPED_TEST_P(RnicWindowTest, ARegionWithoutRemoteRightsRefusesWritesThroughItsOwnKey) {
  this->ConnectForWindows();
  EXPECT_EQ(this->WriteToB(0, 64, this->b_->mr->rkey(), 'x'), WcStatus::kRemoteAccessError);
  EXPECT_TRUE(this->BHolds(0, 64, 0)) << "a refused write placed bytes";
}

TYPED_TEST_P(RnicWindowTest, AWindowAdmitsExactlyItsRange) {
  this->ConnectForWindows();
  std::unique_ptr<MemoryWindow> w = this->NewWindow(*this->b_->device);
  ASSERT_NE(w, nullptr);
  ASSERT_EQ(this->BindOnB(w.get(), 4096, 256), WcStatus::kSuccess);
  ASSERT_NE(w->rkey(), 0u);
  EXPECT_NE(w->rkey(), this->b_->mr->rkey());
  ASSERT_EQ(this->WriteToB(4096, 256, w->rkey(), 'a'), WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(&this->a_->buffer[4096], &this->b_->buffer[4096], 256), 0);
  // One byte past the window (still inside the region): refused, nothing written.
  EXPECT_EQ(this->WriteToB(4096 + 200, 57, w->rkey(), 'b'), WcStatus::kRemoteAccessError);
  for (size_t i = 200; i < 256; ++i) {
    EXPECT_EQ(this->b_->buffer[4096 + i], static_cast<char>('a' + i * 7)) << "byte " << i;
  }
  EXPECT_EQ(this->b_->buffer[4096 + 256], 0);
  EXPECT_EQ(this->b_->qp->state(), QpState::kError) << "a refusal fails both QPs";
}

TYPED_TEST_P(RnicWindowTest, AReadOnlyWindowRefusesWritesAndServesReads) {
  this->ConnectForWindows();
  std::unique_ptr<MemoryWindow> w = this->NewWindow(*this->b_->device);
  ASSERT_NE(w, nullptr);
  for (size_t i = 0; i < 64; ++i) this->b_->buffer[8192 + i] = static_cast<char>(i + 1);
  ASSERT_EQ(this->BindOnB(w.get(), 8192, 64, kRemoteRead), WcStatus::kSuccess);
  Endpoint& a = *this->a_;
  ASSERT_TRUE(a.qp->PostSend(MakeRead(1, a.mr->Sge(0, 64), this->BAddr(8192), w->rkey())).ok());
  absl::StatusOr<WorkCompletion> wc = a.NextSend();
  ASSERT_TRUE(wc.ok()) << wc.status();
  ASSERT_EQ(wc->status, WcStatus::kSuccess) << wc->DebugString();
  EXPECT_EQ(std::memcmp(&a.buffer[0], &this->b_->buffer[8192], 64), 0);
  EXPECT_EQ(this->WriteToB(8192, 8, w->rkey(), 'z'), WcStatus::kRemoteAccessError);
  EXPECT_EQ(this->b_->buffer[8192], 1);
}

TYPED_TEST_P(RnicWindowTest, AWindowKeyWorksOnlyOnTheQpItIsBoundOn) {
  this->ConnectPairsBetweenTwoDevices(2, absl::Seconds(5));
  MultiEndpoint &x = *this->x_, &y = *this->y_;
  std::vector<char> arena(1 << 16, 0);
  absl::StatusOr<std::unique_ptr<MemoryRegion>> mr =
      y.device->RegisterMemory(arena.data(), arena.size(), TestFixture::kWindowsOnly);
  ASSERT_TRUE(mr.ok()) << mr.status();
  std::unique_ptr<MemoryWindow> w = this->NewWindow(*y.device);
  ASSERT_NE(w, nullptr);
  ASSERT_TRUE(y.qps[0]
                  ->PostSend(MakeBindWindow(1, w.get(), **mr, (*mr)->address(), 4096, kRemoteWrite))
                  .ok());
  absl::StatusOr<WorkCompletion> bound = y.NextSend(0);
  ASSERT_TRUE(bound.ok()) << bound.status();
  ASSERT_EQ(bound->status, WcStatus::kSuccess) << bound->DebugString();
  std::memset(x.buffer.data(), 'q', 64);
  // Through the other pair between the same two devices: refused, nothing written.
  ASSERT_TRUE(x.qps[1]->PostSend(MakeWrite(2, x.mr->Sge(0, 64), (*mr)->address(), w->rkey())).ok());
  absl::StatusOr<WorkCompletion> other = x.NextSend(1);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->status, WcStatus::kRemoteAccessError) << other->DebugString();
  EXPECT_EQ(arena[0], 0);
  // Through its own pair: placed.
  ASSERT_TRUE(x.qps[0]->PostSend(MakeWrite(3, x.mr->Sge(0, 64), (*mr)->address(), w->rkey())).ok());
  absl::StatusOr<WorkCompletion> own = x.NextSend(0);
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ(own->status, WcStatus::kSuccess) << own->DebugString();
  EXPECT_EQ(arena[63], 'q');
}

TYPED_TEST_P(RnicWindowTest, ALocallyInvalidatedWindowRefusesWrites) {
  this->ConnectForWindows();
  std::unique_ptr<MemoryWindow> w = this->NewWindow(*this->b_->device);
  ASSERT_NE(w, nullptr);
  ASSERT_EQ(this->BindOnB(w.get(), 0, 4096), WcStatus::kSuccess);
  const uint32_t key = w->rkey();
  ASSERT_EQ(this->WriteToB(0, 64, key, 'a'), WcStatus::kSuccess);
  Endpoint& b = *this->b_;
  ASSERT_TRUE(b.qp->PostSend(MakeLocalInvalidate(9, key)).ok());
  absl::StatusOr<WorkCompletion> inv = b.NextSend();
  ASSERT_TRUE(inv.ok()) << inv.status();
  ASSERT_EQ(inv->status, WcStatus::kSuccess) << inv->DebugString();
  EXPECT_EQ(inv->opcode, WcOpcode::kLocalInvalidate);
  EXPECT_EQ(this->WriteToB(64, 64, key, 'b'), WcStatus::kRemoteAccessError);
  EXPECT_TRUE(this->BHolds(64, 64, 0)) << "a write after the invalidation placed bytes";
}

TYPED_TEST_P(RnicWindowTest, ARemoteSendWithInvalidateEndsTheWindowBeforeItsReceive) {
  this->ConnectForWindows();
  Endpoint &a = *this->a_, &b = *this->b_;
  std::unique_ptr<MemoryWindow> w = this->NewWindow(*b.device);
  ASSERT_NE(w, nullptr);
  ASSERT_EQ(this->BindOnB(w.get(), 0, 4096), WcStatus::kSuccess);
  const uint32_t key = w->rkey();
  ASSERT_TRUE(b.qp->PostRecv(MakeRecv(40, b.mr->Sge(65536, 64))).ok());
  ASSERT_TRUE(a.qp->PostSend(MakeSendWithInvalidate(41, a.mr->Sge(0, 16), key)).ok());
  absl::StatusOr<WorkCompletion> sent = a.NextSend();
  ASSERT_TRUE(sent.ok()) << sent.status();
  ASSERT_EQ(sent->status, WcStatus::kSuccess) << sent->DebugString();
  absl::StatusOr<WorkCompletion> got = b.NextRecv();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->status, WcStatus::kSuccess);
  EXPECT_TRUE(got->has_invalidate);
  EXPECT_EQ(got->invalidated_rkey, key);
  EXPECT_FALSE(got->has_imm);
  EXPECT_EQ(got->byte_len, 16u);
  EXPECT_EQ(this->WriteToB(0, 64, key, 'c'), WcStatus::kRemoteAccessError);
}

TYPED_TEST_P(RnicWindowTest, ASendWithInvalidateOfAKeyNotBoundHereIsRefused) {
  this->ConnectForWindows();
  Endpoint &a = *this->a_, &b = *this->b_;
  ASSERT_TRUE(b.qp->PostRecv(MakeRecv(40, b.mr->Sge(65536, 64))).ok());
  // The region's own key is not a window.
  ASSERT_TRUE(a.qp->PostSend(MakeSendWithInvalidate(41, a.mr->Sge(0, 16), b.mr->rkey())).ok());
  absl::StatusOr<WorkCompletion> sent = a.NextSend();
  ASSERT_TRUE(sent.ok()) << sent.status();
  EXPECT_EQ(sent->status, WcStatus::kRemoteAccessError) << sent->DebugString();
  absl::StatusOr<WorkCompletion> got = b.NextRecv();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->status, WcStatus::kFlushed) << "the refused SEND consumed the receive";
}

TYPED_TEST_P(RnicWindowTest, KeysThatNameNothingLiveAreRefused) {
  // An allocated window never bound, one destroyed while bound, and a window whose region was
  // deregistered: none of their keys works.
  this->ConnectForWindows();
  Endpoint& b = *this->b_;
  std::unique_ptr<MemoryWindow> never = this->NewWindow(*b.device);
  ASSERT_NE(never, nullptr);
  EXPECT_EQ(never->rkey(), 0u);
  std::unique_ptr<MemoryWindow> gone = this->NewWindow(*b.device);
  ASSERT_EQ(this->BindOnB(gone.get(), 0, 4096), WcStatus::kSuccess);
  const uint32_t gone_key = gone->rkey();
  gone.reset();
  EXPECT_EQ(this->WriteToB(0, 8, gone_key, 'd'), WcStatus::kRemoteAccessError);
  EXPECT_TRUE(this->BHolds(0, 8, 0));
  never.reset();  // windows go before their device

  this->ConnectForWindows();
  Endpoint& b2 = *this->b_;
  std::vector<char> extra(8192, 0);
  absl::StatusOr<std::unique_ptr<MemoryRegion>> mr =
      b2.device->RegisterMemory(extra.data(), extra.size(), TestFixture::kWindowsOnly);
  ASSERT_TRUE(mr.ok()) << mr.status();
  std::unique_ptr<MemoryWindow> w = this->NewWindow(*b2.device);
  ASSERT_TRUE(
      b2.qp->PostSend(MakeBindWindow(1, w.get(), **mr, (*mr)->address(), 4096, kRemoteWrite)).ok());
  absl::StatusOr<WorkCompletion> bound = b2.NextSend();
  ASSERT_TRUE(bound.ok() && bound->status == WcStatus::kSuccess);
  const uint64_t addr = (*mr)->address();
  mr->reset();
  Endpoint& a = *this->a_;
  ASSERT_TRUE(a.qp->PostSend(MakeWrite(2, a.mr->Sge(0, 8), addr, w->rkey())).ok());
  absl::StatusOr<WorkCompletion> wc = a.NextSend();
  ASSERT_TRUE(wc.ok()) << wc.status();
  EXPECT_EQ(wc->status, WcStatus::kRemoteAccessError) << wc->DebugString();
  EXPECT_EQ(extra[0], 0);
}

TYPED_TEST_P(RnicWindowTest, ARebindGivesAFreshKeyAndRetiresTheOldOne) {
  this->ConnectForWindows();
  Endpoint& b = *this->b_;
  std::unique_ptr<MemoryWindow> w = this->NewWindow(*b.device);
  ASSERT_EQ(this->BindOnB(w.get(), 0, 4096), WcStatus::kSuccess);
  const uint32_t first = w->rkey();
  ASSERT_TRUE(b.qp->PostSend(MakeLocalInvalidate(3, first)).ok());
  ASSERT_EQ(b.NextSend()->status, WcStatus::kSuccess);
  ASSERT_EQ(this->BindOnB(w.get(), 4096, 4096), WcStatus::kSuccess);
  const uint32_t second = w->rkey();
  EXPECT_NE(second, first);
  ASSERT_EQ(this->WriteToB(4096, 64, second, 'e'), WcStatus::kSuccess);
  EXPECT_EQ(this->WriteToB(0, 64, first, 'f'), WcStatus::kRemoteAccessError);
  EXPECT_TRUE(this->BHolds(0, 64, 0));
}

TYPED_TEST_P(RnicWindowTest, BindsTheDeviceCannotDoFailWithABindError) {
  // A bound window bound again (type 2: invalidate first).
  this->ConnectForWindows();
  std::unique_ptr<MemoryWindow> w = this->NewWindow(*this->b_->device);
  ASSERT_EQ(this->BindOnB(w.get(), 0, 4096), WcStatus::kSuccess);
  EXPECT_EQ(this->BindOnB(w.get(), 0, 4096), WcStatus::kWindowBindError);
  EXPECT_EQ(this->b_->qp->state(), QpState::kError);
  w.reset();  // windows go before their device
  // A range past the region's end.
  this->ConnectForWindows();
  std::unique_ptr<MemoryWindow> w2 = this->NewWindow(*this->b_->device);
  EXPECT_EQ(this->BindOnB(w2.get(), TestFixture::kBufferBytes - 64, 128),
            WcStatus::kWindowBindError);
  w2.reset();
  // A region that lends no windows.
  this->Connect(absl::Seconds(5), kLocalWrite | kRemoteWrite);
  std::unique_ptr<MemoryWindow> w3 = this->NewWindow(*this->b_->device);
  EXPECT_EQ(this->BindOnB(w3.get(), 0, 64), WcStatus::kWindowBindError);
  w3.reset();
  // An invalidation of a key that is no window of this QP.
  this->ConnectForWindows();
  ASSERT_TRUE(this->b_->qp->PostSend(MakeLocalInvalidate(4, this->b_->mr->rkey())).ok());
  absl::StatusOr<WorkCompletion> wc = this->b_->NextSend();
  ASSERT_TRUE(wc.ok()) << wc.status();
  EXPECT_EQ(wc->status, WcStatus::kWindowBindError) << wc->DebugString();
}

TYPED_TEST_P(RnicWindowTest, MalformedBindsAreRejectedAtPost) {
  this->ConnectForWindows();
  Endpoint& b = *this->b_;
  std::unique_ptr<MemoryWindow> w = this->NewWindow(*b.device);
  const uint64_t base = b.mr->address();
  EXPECT_EQ(b.qp->PostSend(MakeBindWindow(1, nullptr, *b.mr, base, 64, kRemoteWrite)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b.qp->PostSend(MakeBindWindow(1, w.get(), *b.mr, base, 0, kRemoteWrite)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b.qp->PostSend(MakeBindWindow(1, w.get(), *b.mr, base, 64, kLocalWrite)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b.qp->PostSend(MakeBindWindow(1, w.get(), *b.mr, base, 64, 0)).code(),
            absl::StatusCode::kInvalidArgument);
  SendWorkRequest with_buffers = MakeLocalInvalidate(1, 5);
  with_buffers.sg_list[0] = b.mr->Sge(0, 8);
  with_buffers.num_sge = 1;
  EXPECT_EQ(b.qp->PostSend(with_buffers).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b.qp->state(), QpState::kReadyToSend) << "a refused post changes nothing";
  EXPECT_EQ(this->BindOnB(w.get(), 0, 64), WcStatus::kSuccess);
}

TYPED_TEST_P(RnicWindowTest, EveryBindDrawsAKeyNoLiveKeyHolds) {
  this->ConnectForWindows();
  Endpoint& b = *this->b_;
  std::set<uint32_t> keys = {b.mr->rkey(), this->a_->mr->rkey()};
  std::vector<std::unique_ptr<MemoryWindow>> windows;
  for (int i = 0; i < 64; ++i) {
    windows.push_back(this->NewWindow(*b.device));
    ASSERT_EQ(this->BindOnB(windows.back().get(), i * 64, 64), WcStatus::kSuccess);
    EXPECT_TRUE(keys.insert(windows.back()->rkey()).second) << "key reused while live";
  }
  // Each still works, each only for its own 64 bytes.
  for (int i = 0; i < 64; i += 9) {
    ASSERT_EQ(this->WriteToB(i * 64, 64, windows[i]->rkey(), static_cast<char>(i)),
              WcStatus::kSuccess);
  }
}

REGISTER_TYPED_TEST_SUITE_P(
    RnicWindowTest, ARegionWithoutRemoteRightsRefusesWritesThroughItsOwnKey,
    AWindowAdmitsExactlyItsRange, AReadOnlyWindowRefusesWritesAndServesReads,
    AWindowKeyWorksOnlyOnTheQpItIsBoundOn, ALocallyInvalidatedWindowRefusesWrites,
    ARemoteSendWithInvalidateEndsTheWindowBeforeItsReceive,
    ASendWithInvalidateOfAKeyNotBoundHereIsRefused, KeysThatNameNothingLiveAreRefused,
    ARebindGivesAFreshKeyAndRetiresTheOldOne, BindsTheDeviceCannotDoFailWithABindError,
    MalformedBindsAreRejectedAtPost, EveryBindDrawsAKeyNoLiveKeyHolds);

}  // namespace unloadkv::rnic

#endif  // UNLOADKV_TRANSPORT_CONFORMANCE_WINDOW_SUITE_H_
