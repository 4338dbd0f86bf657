// The RNIC conformance suite: RC semantics every backend must provide, written once.
//
// A backend instantiates it with a traits type B providing
//   static std::string Unavailable();   // "" when the backend can run here, else why not
//   static absl::StatusOr<std::unique_ptr<rnic::Device>> NewDevice();
// Devices must make progress on their own or when their CQs are polled (see rnic/device.h).
//
//   INSTANTIATE_TYPED_TEST_SUITE_P(Soft, RnicConformanceTest, SoftBackend);
#ifndef UNLOADKV_TRANSPORT_CONFORMANCE_CONFORMANCE_SUITE_H_
#define UNLOADKV_TRANSPORT_CONFORMANCE_CONFORMANCE_SUITE_H_

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "transport/rnic/device.h"
#include "transport/rnic/wait.h"

namespace unloadkv::rnic {

// One end of a connection under test: device, CQs, QP, and a registered buffer.
struct Endpoint {
  std::unique_ptr<Device> device;
  std::unique_ptr<CompletionQueue> send_cq, recv_cq;
  std::unique_ptr<QueuePair> qp;
  std::vector<char> buffer;
  std::unique_ptr<MemoryRegion> mr;

  absl::StatusOr<WorkCompletion> NextSend(absl::Duration t = absl::Seconds(10)) {
    return WaitForCompletion(*device, *send_cq, t);
  }
  absl::StatusOr<WorkCompletion> NextRecv(absl::Duration t = absl::Seconds(10)) {
    return WaitForCompletion(*device, *recv_cq, t);
  }
  // True when no completion shows up on `cq` within `t`.
  bool Quiet(CompletionQueue& cq, absl::Duration t) {
    return !WaitForCompletion(*device, cq, t).ok();
  }
};

// One device with several QPs, each with CQs of its own, and one registered buffer.
struct MultiEndpoint {
  std::unique_ptr<Device> device;
  std::vector<char> buffer;
  std::unique_ptr<MemoryRegion> mr;
  std::vector<std::unique_ptr<CompletionQueue>> send_cqs, recv_cqs;
  std::vector<std::unique_ptr<QueuePair>> qps;

  absl::StatusOr<WorkCompletion> NextSend(int q, absl::Duration t = absl::Seconds(10)) {
    return WaitForCompletion(*device, *send_cqs[q], t);
  }
  absl::StatusOr<WorkCompletion> NextRecv(int q, absl::Duration t = absl::Seconds(10)) {
    return WaitForCompletion(*device, *recv_cqs[q], t);
  }
};

template <typename B>
class RnicConformanceTest : public ::testing::Test {
 protected:
  static constexpr size_t kBufferBytes = 17 << 20;  // room for >= 16 MiB transfers

  void SetUp() override {
    std::string why = B::Unavailable();
    if (!why.empty()) GTEST_SKIP() << "backend unavailable: " << why;
  }

  // Builds a fresh connected pair; `rnr_timeout` applies to both QPs.
  void Connect(absl::Duration rnr_timeout = absl::Seconds(5),
               uint32_t b_access = kLocalWrite | kRemoteWrite | kRemoteRead) {
    a_ = std::make_unique<Endpoint>();
    b_ = std::make_unique<Endpoint>();
    Init(*a_, kLocalWrite | kRemoteWrite | kRemoteRead, rnr_timeout);
    Init(*b_, b_access, rnr_timeout);
    QpAttributes aa = a_->qp->local_attributes(), ba = b_->qp->local_attributes();
    ASSERT_TRUE(a_->qp->Connect(ba).ok());
    ASSERT_TRUE(b_->qp->Connect(aa).ok());
    ASSERT_EQ(a_->qp->state(), QpState::kReadyToSend);
  }

  void Init(Endpoint& e, uint32_t access, absl::Duration rnr_timeout) {
    absl::StatusOr<std::unique_ptr<Device>> dev = B::NewDevice();
    ASSERT_TRUE(dev.ok()) << dev.status();
    e.device = std::move(*dev);
    e.send_cq = *e.device->CreateCompletionQueue(256);
    e.recv_cq = *e.device->CreateCompletionQueue(256);
    QpConfig cfg;
    cfg.send_cq = e.send_cq.get();
    cfg.recv_cq = e.recv_cq.get();
    cfg.rnr_timeout = rnr_timeout;
    absl::StatusOr<std::unique_ptr<QueuePair>> qp = e.device->CreateQueuePair(cfg);
    ASSERT_TRUE(qp.ok()) << qp.status();
    e.qp = std::move(*qp);
    e.buffer.assign(kBufferBytes, 0);
    absl::StatusOr<std::unique_ptr<MemoryRegion>> mr =
        e.device->RegisterMemory(e.buffer.data(), e.buffer.size(), access);
    ASSERT_TRUE(mr.ok()) << mr.status();
    e.mr = std::move(*mr);
  }

  // A target device whose `pairs` QPs all take their receives from one SRQ (srq_, recv CQ
  // srq_cq_, buffer srq_buffer_ registered as srq_mr_), each connected to its own initiator
  // endpoint in initiators_ (on one device of their own).
  void ConnectShared(int pairs, absl::Duration rnr_timeout, const SrqConfig& config) {
    absl::StatusOr<std::unique_ptr<Device>> dev = B::NewDevice();
    ASSERT_TRUE(dev.ok()) << dev.status();
    target_ = std::move(*dev);
    absl::StatusOr<std::unique_ptr<SharedReceiveQueue>> srq =
        target_->CreateSharedReceiveQueue(config);
    ASSERT_TRUE(srq.ok()) << srq.status();
    srq_ = std::move(*srq);
    srq_cq_ = *target_->CreateCompletionQueue(256);
    target_send_cq_ = *target_->CreateCompletionQueue(256);
    srq_buffer_.assign(1 << 20, 0);
    srq_mr_ = *target_->RegisterMemory(srq_buffer_.data(), srq_buffer_.size(),
                                       kLocalWrite | kRemoteWrite);
    for (int i = 0; i < pairs; ++i) {
      QpConfig cfg;
      cfg.send_cq = target_send_cq_.get();
      cfg.recv_cq = srq_cq_.get();
      cfg.rnr_timeout = rnr_timeout;
      cfg.srq = srq_.get();
      cfg.max_recv_wr = 0;  // ignored with an SRQ
      absl::StatusOr<std::unique_ptr<QueuePair>> qp = target_->CreateQueuePair(cfg);
      ASSERT_TRUE(qp.ok()) << qp.status();
      shared_qps_.push_back(std::move(*qp));
      auto e = std::make_unique<Endpoint>();
      Init(*e, kLocalWrite, rnr_timeout);
      ASSERT_TRUE(e->qp->Connect(shared_qps_.back()->local_attributes()).ok());
      ASSERT_TRUE(shared_qps_.back()->Connect(e->qp->local_attributes()).ok());
      initiators_.push_back(std::move(e));
    }
  }
  // Two devices, `pairs` QPs on each, QP i of one connected to QP i of the other (x_ and y_).
  void ConnectPairsBetweenTwoDevices(int pairs, absl::Duration rnr_timeout) {
    x_ = std::make_unique<MultiEndpoint>();
    y_ = std::make_unique<MultiEndpoint>();
    for (MultiEndpoint* e : {x_.get(), y_.get()}) {
      absl::StatusOr<std::unique_ptr<Device>> dev = B::NewDevice();
      ASSERT_TRUE(dev.ok()) << dev.status();
      e->device = std::move(*dev);
      e->buffer.assign(1 << 20, 0);
      absl::StatusOr<std::unique_ptr<MemoryRegion>> mr = e->device->RegisterMemory(
          e->buffer.data(), e->buffer.size(), kLocalWrite | kRemoteWrite | kRemoteRead);
      ASSERT_TRUE(mr.ok()) << mr.status();
      e->mr = std::move(*mr);
      for (int i = 0; i < pairs; ++i) {
        e->send_cqs.push_back(*e->device->CreateCompletionQueue(256));
        e->recv_cqs.push_back(*e->device->CreateCompletionQueue(256));
        QpConfig cfg;
        cfg.send_cq = e->send_cqs.back().get();
        cfg.recv_cq = e->recv_cqs.back().get();
        cfg.rnr_timeout = rnr_timeout;
        absl::StatusOr<std::unique_ptr<QueuePair>> qp = e->device->CreateQueuePair(cfg);
        ASSERT_TRUE(qp.ok()) << qp.status();
        e->qps.push_back(std::move(*qp));
      }
    }
    for (int i = 0; i < pairs; ++i) {
      ASSERT_TRUE(x_->qps[i]->Connect(y_->qps[i]->local_attributes()).ok());
      ASSERT_TRUE(y_->qps[i]->Connect(x_->qps[i]->local_attributes()).ok());
    }
  }

  // A receive of the SRQ: `bytes` at slot `k` (of that size) of srq_buffer_, wr_id `id`.
  RecvWorkRequest SharedRecv(uint64_t id, size_t k, uint32_t bytes = 64) {
    return MakeRecv(id, srq_mr_->Sge(k * bytes, bytes));
  }
  absl::StatusOr<WorkCompletion> NextShared(absl::Duration t = absl::Seconds(10)) {
    return WaitForCompletion(*target_, *srq_cq_, t);
  }

  static void Fill(Endpoint& e, size_t offset, size_t len, char seed) {
    for (size_t i = 0; i < len; ++i) e.buffer[offset + i] = static_cast<char>(seed + i * 7);
  }

  uint64_t BAddr(size_t offset) const { return b_->mr->address() + offset; }

  std::unique_ptr<Endpoint> a_, b_;
  std::unique_ptr<MultiEndpoint> x_, y_;  // ConnectPairsBetweenTwoDevices
  // ConnectShared. Destroyed in reverse: QPs before the SRQ and CQs, then the device.
  std::unique_ptr<Device> target_;
  std::unique_ptr<SharedReceiveQueue> srq_;
  std::unique_ptr<CompletionQueue> srq_cq_, target_send_cq_;
  std::vector<char> srq_buffer_;
  std::unique_ptr<MemoryRegion> srq_mr_;
  std::vector<std::unique_ptr<QueuePair>> shared_qps_;
  std::vector<std::unique_ptr<Endpoint>> initiators_;
};

TYPED_TEST_SUITE_P(RnicConformanceTest);

TYPED_TEST_P(RnicConformanceTest, WriteIsVisibleAtTargetWhenItCompletes) {
  this->Connect();
  Endpoint &a = *this->a_, &b = *this->b_;
  for (int i = 0; i < 64; ++i) {
    size_t off = i * 4096;
    this->Fill(a, off, 1000, static_cast<char>(i));
    ASSERT_TRUE(
        a.qp->PostSend(MakeWrite(i, a.mr->Sge(off, 1000), this->BAddr(off), b.mr->rkey())).ok());
  }
  for (int i = 0; i < 64; ++i) {
    absl::StatusOr<WorkCompletion> wc = a.NextSend();
    ASSERT_TRUE(wc.ok()) << wc.status();
    ASSERT_EQ(wc->status, WcStatus::kSuccess) << wc->DebugString();
    ASSERT_EQ(wc->wr_id, static_cast<uint64_t>(i)) << "completions out of post order";
    size_t off = i * 4096;
    // The completion may only appear once the bytes are in the target's memory.
    ASSERT_EQ(std::memcmp(&a.buffer[off], &b.buffer[off], 1000), 0) << "write " << i;
  }
}

TYPED_TEST_P(RnicConformanceTest, MixedOperationsExecuteInPostOrder) {
  this->Connect();
  Endpoint &a = *this->a_, &b = *this->b_;
  uint64_t* src = reinterpret_cast<uint64_t*>(a.buffer.data());
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(b.qp->PostRecv(MakeRecv(100 + i, b.mr->Sge(8192 + i * 64, 64))).ok());
  // Interleave: WRITE v=1; READ back; SEND; WRITE v=2; WRITE_WITH_IMM; READ back; SEND.
  src[0] = 1;
  src[1] = 2;
  std::vector<SendWorkRequest> wrs = {
      MakeWrite(1, a.mr->Sge(0, 8), this->BAddr(0), b.mr->rkey()),
      MakeRead(2, a.mr->Sge(64, 8), this->BAddr(0), b.mr->rkey()),
      MakeSend(3, a.mr->Sge(0, 8)),
      MakeWrite(4, a.mr->Sge(8, 8), this->BAddr(0), b.mr->rkey()),
      MakeWriteWithImm(5, a.mr->Sge(8, 8), this->BAddr(16), b.mr->rkey(), 55),
      MakeRead(6, a.mr->Sge(72, 8), this->BAddr(0), b.mr->rkey()),
      MakeSend(7, a.mr->Sge(8, 8)),
  };
  ASSERT_TRUE(a.qp->PostSend(absl::MakeConstSpan(wrs)).ok());
  for (uint64_t id = 1; id <= 7; ++id) {
    absl::StatusOr<WorkCompletion> wc = a.NextSend();
    ASSERT_TRUE(wc.ok()) << wc.status();
    EXPECT_EQ(wc->status, WcStatus::kSuccess) << wc->DebugString();
    EXPECT_EQ(wc->wr_id, id);
  }
  const uint64_t* readback = reinterpret_cast<const uint64_t*>(a.buffer.data() + 64);
  EXPECT_EQ(readback[0], 1u) << "READ must observe the WRITE posted before it";
  EXPECT_EQ(readback[1], 2u) << "READ must observe the second WRITE, not the first";
  // Receives complete in order, and each SEND is delivered after the WRITEs before it.
  uint64_t expect_ids[] = {100, 101, 102};
  for (uint64_t id : expect_ids) {
    absl::StatusOr<WorkCompletion> wc = b.NextRecv();
    ASSERT_TRUE(wc.ok()) << wc.status();
    EXPECT_EQ(wc->wr_id, id);
    EXPECT_EQ(wc->status, WcStatus::kSuccess);
  }
  uint64_t v;
  std::memcpy(&v, &b.buffer[8192], 8);
  EXPECT_EQ(v, 1u);
  std::memcpy(&v, &b.buffer[8192 + 128], 8);
  EXPECT_EQ(v, 2u);
}

TYPED_TEST_P(RnicConformanceTest, ManyWritesToOneAddressLandInPostOrder) {
  this->Connect();
  Endpoint &a = *this->a_, &b = *this->b_;
  constexpr int kWrites = 2000;
  uint32_t* src = reinterpret_cast<uint32_t*>(a.buffer.data());
  for (int i = 0; i < kWrites; ++i) src[i] = i + 1;
  for (int i = 0; i < kWrites; ++i) {
    SendWorkRequest wr = MakeWrite(i, a.mr->Sge(i * 4, 4), this->BAddr(0), b.mr->rkey());
    wr.signaled = (i == kWrites - 1);
    ASSERT_TRUE(a.qp->PostSend(wr).ok());
    if (i % 500 == 499 && i != kWrites - 1) {
      // Keep the send queue bounded: fence with a signaled READ.
      ASSERT_TRUE(
          a.qp->PostSend(MakeRead(900000 + i, a.mr->Sge(1 << 20, 4), this->BAddr(0), b.mr->rkey()))
              .ok());
      absl::StatusOr<WorkCompletion> wc = a.NextSend();
      ASSERT_TRUE(wc.ok() && wc->status == WcStatus::kSuccess);
      uint32_t seen;
      std::memcpy(&seen, &a.buffer[1 << 20], 4);
      ASSERT_EQ(seen, static_cast<uint32_t>(i + 1));
    }
  }
  absl::StatusOr<WorkCompletion> wc = a.NextSend();
  ASSERT_TRUE(wc.ok()) << wc.status();
  EXPECT_EQ(wc->wr_id, static_cast<uint64_t>(kWrites - 1)) << "unsignaled writes completed";
  uint32_t last;
  std::memcpy(&last, &b.buffer[0], 4);
  EXPECT_EQ(last, static_cast<uint32_t>(kWrites));
}

TYPED_TEST_P(RnicConformanceTest, ImmediateAndByteLenAreDelivered) {
  this->Connect();
  Endpoint &a = *this->a_, &b = *this->b_;
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(b.qp->PostRecv(MakeRecv(i, b.mr->Sge(i * 4096, 4096))).ok());
  this->Fill(a, 0, 300, 'x');
  ASSERT_TRUE(a.qp->PostSend(MakeSendWithImm(1, a.mr->Sge(0, 100), 0xabcd1234)).ok());
  ASSERT_TRUE(
      a.qp->PostSend(MakeWriteWithImm(2, a.mr->Sge(0, 77), this->BAddr(1 << 20), b.mr->rkey(), 42))
          .ok());
  ASSERT_TRUE(a.qp->PostSend(MakeSend(3, a.mr->Sge(0, 300))).ok());
  absl::StatusOr<WorkCompletion> r1 = b.NextRecv(), r2 = b.NextRecv(), r3 = b.NextRecv();
  ASSERT_TRUE(r1.ok() && r2.ok() && r3.ok());
  EXPECT_EQ(r1->opcode, WcOpcode::kRecv);
  EXPECT_TRUE(r1->has_imm);
  EXPECT_EQ(r1->imm, 0xabcd1234u);
  EXPECT_EQ(r1->byte_len, 100u);
  EXPECT_EQ(std::memcmp(&b.buffer[0], &a.buffer[0], 100), 0);
  EXPECT_EQ(r2->opcode, WcOpcode::kRecvRdmaWithImm);
  EXPECT_TRUE(r2->has_imm);
  EXPECT_EQ(r2->imm, 42u);
  EXPECT_EQ(r2->byte_len, 77u);
  EXPECT_EQ(r2->wr_id, 1u) << "WRITE_WITH_IMM consumes the next receive";
  EXPECT_EQ(std::memcmp(&b.buffer[1 << 20], &a.buffer[0], 77), 0);
  EXPECT_FALSE(r3->has_imm);
  EXPECT_EQ(r3->byte_len, 300u);
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<WorkCompletion> wc = a.NextSend();
    ASSERT_TRUE(wc.ok() && wc->status == WcStatus::kSuccess);
  }
}

TYPED_TEST_P(RnicConformanceTest, EachAccessErrorWritesNothingAndFailsTheConnection) {
  struct Case {
    const char* name;
    uint32_t b_access;
    bool read;
    int64_t offset;  // relative to B's region start
    uint32_t length;
    bool bad_rkey;
  } cases[] = {
      {"unknown rkey", kLocalWrite | kRemoteWrite | kRemoteRead, false, 0, 64, true},
      {"no remote write", kLocalWrite | kRemoteRead, false, 0, 64, false},
      {"past the end", kLocalWrite | kRemoteWrite, false, int64_t{this->kBufferBytes} - 32, 64,
       false},
      {"before the start", kLocalWrite | kRemoteWrite, false, -8, 64, false},
      {"read without remote read", kLocalWrite | kRemoteWrite, true, 0, 64, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    this->Connect(absl::Seconds(5), c.b_access);
    Endpoint &a = *this->a_, &b = *this->b_;
    ASSERT_TRUE(b.qp->PostRecv(MakeRecv(7, b.mr->Sge(0, 64))).ok());
    this->Fill(a, 0, 64, 'E');
    std::vector<char> before = b.buffer;
    uint64_t addr = b.mr->address() + c.offset;
    uint32_t rkey = c.bad_rkey ? b.mr->rkey() ^ 0x5a5a : b.mr->rkey();
    SendWorkRequest wr = c.read ? MakeRead(1, a.mr->Sge(4096, c.length), addr, rkey)
                                : MakeWrite(1, a.mr->Sge(0, c.length), addr, rkey);
    ASSERT_TRUE(a.qp->PostSend(wr).ok());
    absl::StatusOr<WorkCompletion> wc = a.NextSend();
    ASSERT_TRUE(wc.ok()) << wc.status();
    EXPECT_EQ(wc->status, WcStatus::kRemoteAccessError) << wc->DebugString();
    EXPECT_TRUE(b.buffer == before) << "a refused request changed target memory";
    // Both ends are now in error: later work is flushed, the target's receive too.
    EXPECT_EQ(a.qp->state(), QpState::kError);
    ASSERT_TRUE(a.qp->PostSend(MakeSend(2, a.mr->Sge(0, 8))).ok());
    wc = a.NextSend();
    ASSERT_TRUE(wc.ok());
    EXPECT_EQ(wc->status, WcStatus::kFlushed);
    wc = b.NextRecv();
    ASSERT_TRUE(wc.ok()) << wc.status();
    EXPECT_EQ(wc->status, WcStatus::kFlushed);
  }
}

TYPED_TEST_P(RnicConformanceTest, BadLocalKeyIsALocalProtectionError) {
  this->Connect();
  Endpoint &a = *this->a_, &b = *this->b_;
  ScatterGatherEntry sge = a.mr->Sge(0, 64);
  sge.lkey ^= 0x777;
  std::vector<char> before = b.buffer;
  ASSERT_TRUE(a.qp->PostSend(MakeWrite(1, sge, this->BAddr(0), b.mr->rkey())).ok());
  absl::StatusOr<WorkCompletion> wc = a.NextSend();
  ASSERT_TRUE(wc.ok());
  EXPECT_EQ(wc->status, WcStatus::kLocalProtectionError);
  EXPECT_EQ(a.qp->state(), QpState::kError);
  EXPECT_TRUE(b.buffer == before);
  // An SGE running past its region is a protection error too.
  this->Connect();
  Endpoint& a2 = *this->a_;
  ASSERT_TRUE(a2.qp->PostSend(MakeSend(1, a2.mr->Sge(this->kBufferBytes - 8, 64))).ok());
  wc = a2.NextSend();
  ASSERT_TRUE(wc.ok());
  EXPECT_EQ(wc->status, WcStatus::kLocalProtectionError);
}

TYPED_TEST_P(RnicConformanceTest, ZeroLengthTransfersComplete) {
  this->Connect();
  Endpoint &a = *this->a_, &b = *this->b_;
  ASSERT_TRUE(b.qp->PostRecv(MakeRecv(1, b.mr->Sge(0, 64))).ok());
  ASSERT_TRUE(a.qp->PostSend(MakeWrite(1, a.mr->Sge(0, 0), this->BAddr(0), b.mr->rkey())).ok());
  ASSERT_TRUE(a.qp->PostSend(MakeRead(2, a.mr->Sge(0, 0), this->BAddr(0), b.mr->rkey())).ok());
  ASSERT_TRUE(a.qp->PostSend(MakeSend(3, a.mr->Sge(0, 0))).ok());
  for (uint64_t id = 1; id <= 3; ++id) {
    absl::StatusOr<WorkCompletion> wc = a.NextSend();
    ASSERT_TRUE(wc.ok()) << wc.status();
    EXPECT_EQ(wc->status, WcStatus::kSuccess) << wc->DebugString();
    EXPECT_EQ(wc->wr_id, id);
  }
  absl::StatusOr<WorkCompletion> r = b.NextRecv();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->byte_len, 0u);
}

TYPED_TEST_P(RnicConformanceTest, SixteenMebibyteTransfersArriveIntact) {
  this->Connect();
  Endpoint &a = *this->a_, &b = *this->b_;
  const uint32_t kLen = (16 << 20) + 13;
  this->Fill(a, 0, kLen, 3);
  ASSERT_TRUE(a.qp->PostSend(MakeWrite(1, a.mr->Sge(0, kLen), this->BAddr(0), b.mr->rkey())).ok());
  absl::StatusOr<WorkCompletion> wc = a.NextSend(absl::Seconds(30));
  ASSERT_TRUE(wc.ok() && wc->status == WcStatus::kSuccess);
  ASSERT_EQ(std::memcmp(a.buffer.data(), b.buffer.data(), kLen), 0);
  // READ it back into another part of A, and SEND it into a receive on B.
  std::fill(a.buffer.begin(), a.buffer.end(), 0);
  ASSERT_TRUE(a.qp->PostSend(MakeRead(2, a.mr->Sge(0, kLen), this->BAddr(0), b.mr->rkey())).ok());
  wc = a.NextSend(absl::Seconds(30));
  ASSERT_TRUE(wc.ok() && wc->status == WcStatus::kSuccess);
  EXPECT_EQ(wc->byte_len, kLen);
  ASSERT_EQ(std::memcmp(a.buffer.data(), b.buffer.data(), kLen), 0);
  std::fill(b.buffer.begin(), b.buffer.end(), 0);
  ASSERT_TRUE(b.qp->PostRecv(MakeRecv(9, b.mr->Sge(0, kLen))).ok());
  ASSERT_TRUE(a.qp->PostSend(MakeSend(3, a.mr->Sge(0, kLen))).ok());
  wc = b.NextRecv(absl::Seconds(30));
  ASSERT_TRUE(wc.ok() && wc->status == WcStatus::kSuccess);
  EXPECT_EQ(wc->byte_len, kLen);
  ASSERT_EQ(std::memcmp(a.buffer.data(), b.buffer.data(), kLen), 0);
}

TYPED_TEST_P(RnicConformanceTest, ReceiveTooSmallFailsBothSides) {
  this->Connect();
  Endpoint &a = *this->a_, &b = *this->b_;
  ASSERT_TRUE(b.qp->PostRecv(MakeRecv(1, b.mr->Sge(0, 64))).ok());
  std::vector<char> before = b.buffer;
  this->Fill(a, 0, 100, 'q');
  ASSERT_TRUE(a.qp->PostSend(MakeSend(1, a.mr->Sge(0, 100))).ok());
  absl::StatusOr<WorkCompletion> s = a.NextSend(), r = b.NextRecv();
  ASSERT_TRUE(s.ok() && r.ok());
  EXPECT_EQ(s->status, WcStatus::kRemoteInvalidRequest);
  EXPECT_EQ(r->status, WcStatus::kLocalLengthError);
  EXPECT_TRUE(b.buffer == before);
}

TYPED_TEST_P(RnicConformanceTest, SendWithNoReceivePostedFailsAfterRnrTimeout) {
  this->Connect(absl::Milliseconds(100));
  Endpoint& a = *this->a_;
  ASSERT_TRUE(a.qp->PostSend(MakeSend(1, a.mr->Sge(0, 10))).ok());
  absl::StatusOr<WorkCompletion> s = a.NextSend();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->status, WcStatus::kRnrRetryExceeded);
}

TYPED_TEST_P(RnicConformanceTest, SendWaitsForAReceivePostedLate) {
  this->Connect(absl::Seconds(10));
  Endpoint &a = *this->a_, &b = *this->b_;
  ASSERT_TRUE(a.qp->PostSend(MakeSendWithImm(1, a.mr->Sge(0, 10), 9)).ok());
  EXPECT_TRUE(a.Quiet(*a.send_cq, absl::Milliseconds(100))) << "SEND completed without a receive";
  ASSERT_TRUE(b.qp->PostRecv(MakeRecv(5, b.mr->Sge(0, 64))).ok());
  absl::StatusOr<WorkCompletion> s = a.NextSend(), r = b.NextRecv();
  ASSERT_TRUE(s.ok() && r.ok());
  EXPECT_EQ(s->status, WcStatus::kSuccess);
  EXPECT_EQ(r->imm, 9u);
}

TYPED_TEST_P(RnicConformanceTest, CloseFlushesPostedWork) {
  this->Connect();
  Endpoint &a = *this->a_, &b = *this->b_;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(b.qp->PostRecv(MakeRecv(i, b.mr->Sge(0, 64))).ok());
  b.qp->SetError();
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<WorkCompletion> r = b.NextRecv();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, WcStatus::kFlushed);
    EXPECT_EQ(r->wr_id, static_cast<uint64_t>(i));
  }
  // The peer notices: its requests fail rather than hang.
  ASSERT_TRUE(a.qp->PostSend(MakeWrite(1, a.mr->Sge(0, 8), this->BAddr(0), b.mr->rkey())).ok());
  absl::StatusOr<WorkCompletion> s = a.NextSend();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_NE(s->status, WcStatus::kSuccess);
  EXPECT_EQ(a.qp->state(), QpState::kError);
}

TYPED_TEST_P(RnicConformanceTest, VanishedPeerTurnsOutstandingWorkIntoErrors) {
  // A SEND with no receive posted (and a long RNR timeout) holds every later request of the
  // QP behind it, so all of them are still outstanding when the peer disappears.
  this->Connect(absl::Seconds(60));
  Endpoint &a = *this->a_, &b = *this->b_;
  constexpr int kRequests = 8;
  ASSERT_TRUE(a.qp->PostSend(MakeSend(0, a.mr->Sge(0, 8))).ok());
  for (int i = 1; i < kRequests; ++i) {
    ASSERT_TRUE(
        a.qp->PostSend(MakeWrite(i, a.mr->Sge(0, 2 << 20), this->BAddr(0), b.mr->rkey())).ok());
  }
  EXPECT_TRUE(a.Quiet(*a.send_cq, absl::Milliseconds(50))) << "the SEND completed unreceived";
  // The peer disappears with all of that in flight.
  b.qp.reset();
  b.mr.reset();
  b.send_cq.reset();
  b.recv_cq.reset();
  b.device.reset();
  for (int i = 0; i < kRequests; ++i) {
    absl::StatusOr<WorkCompletion> s = a.NextSend();
    ASSERT_TRUE(s.ok()) << "hang: " << s.status();
    EXPECT_EQ(s->wr_id, static_cast<uint64_t>(i));
    // The oldest request reports the lost peer; the rest are flushed.
    EXPECT_EQ(s->status, i == 0 ? WcStatus::kRetryExceeded : WcStatus::kFlushed)
        << s->DebugString();
  }
  EXPECT_EQ(a.qp->state(), QpState::kError);
}

TYPED_TEST_P(RnicConformanceTest, MalformedRequestsAreRejectedAtPost) {
  this->Connect();
  Endpoint& a = *this->a_;
  SendWorkRequest wr = MakeSend(1, a.mr->Sge(0, 8));
  wr.num_sge = kMaxSge + 1;
  EXPECT_EQ(a.qp->PostSend(wr).code(), absl::StatusCode::kInvalidArgument);
  wr.num_sge = 1;
  wr.opcode = static_cast<Opcode>(99);
  EXPECT_EQ(a.qp->PostSend(wr).code(), absl::StatusCode::kInvalidArgument);
  RecvWorkRequest rwr = MakeRecv(1, a.mr->Sge(0, 8));
  rwr.num_sge = -1;
  EXPECT_EQ(a.qp->PostRecv(rwr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a.qp->state(), QpState::kReadyToSend) << "a rejected post must change nothing";
  // An unconnected QP refuses sends.
  Endpoint fresh;
  this->Init(fresh, kLocalWrite, absl::Seconds(1));
  EXPECT_EQ(fresh.qp->PostSend(MakeSend(1, fresh.mr->Sge(0, 8))).code(),
            absl::StatusCode::kFailedPrecondition);
  QpAttributes wrong = a.qp->local_attributes();
  wrong.transport = "carrier-pigeon";
  EXPECT_EQ(fresh.qp->Connect(wrong).code(), absl::StatusCode::kInvalidArgument);
}

TYPED_TEST_P(RnicConformanceTest, SharedReceiveQueueFeedsItsQpsOldestReceiveFirst) {
  this->ConnectShared(2, absl::Seconds(5), SrqConfig{});
  constexpr int kSends = 6;
  for (int k = 0; k < kSends; ++k) {
    ASSERT_TRUE(this->srq_->PostRecv(this->SharedRecv(100 + k, k)).ok());
  }
  // A QP attached to an SRQ takes no receives of its own.
  EXPECT_EQ(this->shared_qps_[0]->PostRecv(this->SharedRecv(1, 60)).code(),
            absl::StatusCode::kFailedPrecondition);
  // Alternate the two connections, one SEND at a time: receive k takes SEND k, whichever QP
  // it arrived on, and its completion names that QP.
  for (int k = 0; k < kSends; ++k) {
    Endpoint& from = *this->initiators_[k % 2];
    std::memset(from.buffer.data(), 'a' + k, 40);
    ASSERT_TRUE(from.qp->PostSend(MakeSendWithImm(k, from.mr->Sge(0, 40), k)).ok());
    absl::StatusOr<WorkCompletion> r = this->NextShared();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, WcStatus::kSuccess) << r->DebugString();
    EXPECT_EQ(r->wr_id, 100u + k);
    EXPECT_EQ(r->imm, static_cast<uint32_t>(k));
    EXPECT_EQ(r->byte_len, 40u);
    EXPECT_EQ(r->qp_num, this->shared_qps_[k % 2]->qp_num());
    EXPECT_EQ(this->srq_buffer_[k * 64], 'a' + k);
    EXPECT_EQ(this->srq_buffer_[k * 64 + 39], 'a' + k);
    absl::StatusOr<WorkCompletion> s = from.NextSend();
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->status, WcStatus::kSuccess);
  }
}

TYPED_TEST_P(RnicConformanceTest, ConcurrentSendsOnTwoQpsTakeDistinctSharedReceives) {
  // Large SENDs from two connections at once arrive interleaved in pieces: each must still land
  // whole in a receive of its own.
  this->ConnectShared(2, absl::Seconds(5), SrqConfig{});
  constexpr uint32_t kBytes = 128 << 10;
  constexpr int kPerQp = 3;
  for (int k = 0; k < 2 * kPerQp; ++k) {
    ASSERT_TRUE(this->srq_->PostRecv(this->SharedRecv(k, k, kBytes)).ok());
  }
  for (int q = 0; q < 2; ++q) {
    Endpoint& from = *this->initiators_[q];
    for (int i = 0; i < kPerQp; ++i) {
      std::memset(from.buffer.data() + i * kBytes, 'A' + q * kPerQp + i, kBytes);
    }
  }
  for (int i = 0; i < kPerQp; ++i) {
    for (int q = 0; q < 2; ++q) {
      Endpoint& from = *this->initiators_[q];
      ASSERT_TRUE(from.qp->PostSend(MakeSend(i, from.mr->Sge(i * kBytes, kBytes))).ok());
    }
  }
  std::vector<bool> seen(2 * kPerQp, false);
  for (int n = 0; n < 2 * kPerQp; ++n) {
    absl::StatusOr<WorkCompletion> r = this->NextShared();
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->status, WcStatus::kSuccess) << r->DebugString();
    ASSERT_LT(r->wr_id, seen.size());
    seen[r->wr_id] = true;
    const char* got = this->srq_buffer_.data() + r->wr_id * kBytes;
    const char first = got[0];
    EXPECT_GE(first, 'A');
    EXPECT_LT(first, 'A' + 2 * kPerQp);
    EXPECT_EQ(std::string(got, kBytes), std::string(kBytes, first))
        << "receive " << r->wr_id << " holds bytes of two SENDs";
  }
  for (int q = 0; q < 2; ++q) {
    for (int i = 0; i < kPerQp; ++i) {
      absl::StatusOr<WorkCompletion> s = this->initiators_[q]->NextSend();
      ASSERT_TRUE(s.ok()) << s.status();
      EXPECT_EQ(s->status, WcStatus::kSuccess);
    }
  }
}

TYPED_TEST_P(RnicConformanceTest, EmptySharedReceiveQueueIsRnrAndAFailedQpLeavesItsReceives) {
  this->ConnectShared(2, absl::Milliseconds(300), SrqConfig{});
  Endpoint &one = *this->initiators_[0], &two = *this->initiators_[1];
  // Nothing posted: the SEND waits, and a receive posted in time lets it through.
  ASSERT_TRUE(one.qp->PostSend(MakeSend(1, one.mr->Sge(0, 8))).ok());
  EXPECT_TRUE(one.Quiet(*one.send_cq, absl::Milliseconds(50))) << "SEND completed unreceived";
  ASSERT_TRUE(this->srq_->PostRecv(this->SharedRecv(7, 0)).ok());
  absl::StatusOr<WorkCompletion> r = this->NextShared();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->wr_id, 7u);
  ASSERT_TRUE(one.NextSend().ok());
  // A QP failing flushes none of the SRQ's receives: the other QP still gets them.
  ASSERT_TRUE(this->srq_->PostRecv(this->SharedRecv(8, 1)).ok());
  this->shared_qps_[0]->SetError();
  ASSERT_TRUE(two.qp->PostSend(MakeSend(3, two.mr->Sge(0, 8))).ok());
  for (;;) {  // the failed QP may report flushed work of its own first; none is the SRQ's
    r = this->NextShared();
    ASSERT_TRUE(r.ok()) << r.status();
    if (r->qp_num == this->shared_qps_[1]->qp_num()) break;
    EXPECT_NE(r->wr_id, 8u) << "the failed QP flushed a receive of the SRQ";
  }
  EXPECT_EQ(r->wr_id, 8u);
  EXPECT_EQ(r->status, WcStatus::kSuccess);
  absl::StatusOr<WorkCompletion> s = two.NextSend();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->status, WcStatus::kSuccess);
  // Nothing posted for longer than the RNR timeout: the sender fails.
  ASSERT_TRUE(two.qp->PostSend(MakeSend(4, two.mr->Sge(0, 8))).ok());
  s = two.NextSend();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->status, WcStatus::kRnrRetryExceeded);
}

TYPED_TEST_P(RnicConformanceTest, SharedReceiveQueueLimitEventFiresOnceBelowTheWatermark) {
  SrqConfig config;
  config.limit = 3;
  this->ConnectShared(1, absl::Seconds(5), config);
  Endpoint& from = *this->initiators_[0];
  for (int k = 0; k < 4; ++k) ASSERT_TRUE(this->srq_->PostRecv(this->SharedRecv(k, k)).ok());
  auto send = [&](uint64_t id) {
    ASSERT_TRUE(from.qp->PostSend(MakeSend(id, from.mr->Sge(0, 8))).ok());
    absl::StatusOr<WorkCompletion> r = this->NextShared();
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(from.NextSend().ok());
  };
  EXPECT_FALSE(this->srq_->TakeLimitEvent()) << "an event before any receive was taken";
  send(1);  // 3 left: not below the limit
  EXPECT_FALSE(this->srq_->TakeLimitEvent());
  send(2);  // 2 left
  EXPECT_TRUE(this->srq_->TakeLimitEvent());
  EXPECT_FALSE(this->srq_->TakeLimitEvent()) << "one event reported twice";
  send(3);  // 1 left, but the limit disarmed itself
  EXPECT_FALSE(this->srq_->TakeLimitEvent());
  ASSERT_TRUE(this->srq_->ArmLimit(2).ok());
  EXPECT_FALSE(this->srq_->TakeLimitEvent()) << "arming alone is no event";
  send(4);  // 0 left
  EXPECT_TRUE(this->srq_->TakeLimitEvent());
  EXPECT_EQ(this->srq_->ArmLimit(SrqConfig{}.max_wr + 1).code(),
            absl::StatusCode::kInvalidArgument);
}

TYPED_TEST_P(RnicConformanceTest, SharedReceiveQueueRefusesBadConfigsAndPosts) {
  SrqConfig small;
  small.max_wr = 2;
  this->ConnectShared(1, absl::Seconds(5), small);
  Device& dev = *this->target_;
  SrqConfig bad;
  bad.max_wr = 0;
  EXPECT_EQ(dev.CreateSharedReceiveQueue(bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad.max_wr = dev.limits().max_qp_wr + 1;
  EXPECT_EQ(dev.CreateSharedReceiveQueue(bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad.max_wr = 8;
  bad.limit = 9;
  EXPECT_EQ(dev.CreateSharedReceiveQueue(bad).status().code(), absl::StatusCode::kInvalidArgument);
  // Without an SRQ, a QP needs room for receives of its own.
  QpConfig no_room;
  no_room.send_cq = this->target_send_cq_.get();
  no_room.recv_cq = this->srq_cq_.get();
  no_room.max_recv_wr = 0;
  EXPECT_EQ(dev.CreateQueuePair(no_room).status().code(), absl::StatusCode::kInvalidArgument);
  RecvWorkRequest malformed = this->SharedRecv(1, 0);
  malformed.num_sge = kMaxSge + 1;
  EXPECT_EQ(this->srq_->PostRecv(malformed).code(), absl::StatusCode::kInvalidArgument);
  if (dev.transport() != "verbs") {  // verbs finds a bad lkey only when a QP takes the receive
    RecvWorkRequest unregistered = this->SharedRecv(1, 0);
    unregistered.sg_list[0].lkey ^= 0x5a5a;
    EXPECT_EQ(this->srq_->PostRecv(unregistered).code(), absl::StatusCode::kInvalidArgument);
  }
  ASSERT_TRUE(this->srq_->PostRecv(this->SharedRecv(1, 0)).ok());
  ASSERT_TRUE(this->srq_->PostRecv(this->SharedRecv(2, 1)).ok());
  EXPECT_EQ(this->srq_->PostRecv(this->SharedRecv(3, 2)).code(),
            absl::StatusCode::kResourceExhausted);
  // None of the refused posts took a receive: the two good ones serve two SENDs, in order.
  Endpoint& from = *this->initiators_[0];
  for (uint64_t id = 1; id <= 2; ++id) {
    ASSERT_TRUE(from.qp->PostSend(MakeSend(id, from.mr->Sge(0, 8))).ok());
    absl::StatusOr<WorkCompletion> r = this->NextShared();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->wr_id, id);
    EXPECT_EQ(r->status, WcStatus::kSuccess);
  }
}

TYPED_TEST_P(RnicConformanceTest, QpPairsBetweenTheSameDevicesWaitAndFailAlone) {
  // Three pairs between the same two devices (the soft RNIC carries them on one stream).
  this->ConnectPairsBetweenTwoDevices(3, absl::Seconds(10));
  MultiEndpoint &x = *this->x_, &y = *this->y_;
  const uint64_t y_base = y.mr->address();
  // Pair 0 waits for a receive (RNR)...
  ASSERT_TRUE(x.qps[0]->PostSend(MakeSend(1, x.mr->Sge(0, 16))).ok());
  // ...while pair 1 writes, reads back and is answered, and pair 2 is refused.
  auto pair1_round = [&](char seed) {
    for (int i = 0; i < 32; ++i) {
      std::memset(&x.buffer[4096 + i * 64], seed + i, 64);
      SendWorkRequest wr =
          MakeWrite(100 + i, x.mr->Sge(4096 + i * 64, 64), y_base + 4096 + i * 64, y.mr->rkey());
      wr.signaled = i == 31;
      ASSERT_TRUE(x.qps[1]->PostSend(wr).ok());
    }
    ASSERT_TRUE(
        x.qps[1]
            ->PostSend(MakeRead(200, x.mr->Sge(65536, 64), y_base + 4096 + 31 * 64, y.mr->rkey()))
            .ok());
    ASSERT_TRUE(x.qps[1]->PostRecv(MakeRecv(300, x.mr->Sge(131072, 64))).ok());
    ASSERT_TRUE(y.qps[1]->PostSend(MakeSend(301, y.mr->Sge(4096, 8))).ok());
    for (uint64_t id : {131u, 200u}) {
      absl::StatusOr<WorkCompletion> wc = x.NextSend(1);
      ASSERT_TRUE(wc.ok()) << wc.status();
      ASSERT_EQ(wc->status, WcStatus::kSuccess) << wc->DebugString();
      EXPECT_EQ(wc->wr_id, id);
    }
    EXPECT_EQ(std::memcmp(&x.buffer[65536], &x.buffer[4096 + 31 * 64], 64), 0);
    EXPECT_EQ(std::memcmp(&y.buffer[4096], &x.buffer[4096], 32 * 64), 0);
    absl::StatusOr<WorkCompletion> r = x.NextRecv(1);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, WcStatus::kSuccess);
    absl::StatusOr<WorkCompletion> s = y.NextSend(1);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->status, WcStatus::kSuccess);
  };
  pair1_round('a');
  ASSERT_TRUE(y.qps[2]->PostRecv(MakeRecv(400, y.mr->Sge(8192, 64))).ok());
  ASSERT_TRUE(
      x.qps[2]->PostSend(MakeWrite(401, x.mr->Sge(0, 64), y_base, y.mr->rkey() ^ 0x5a5a)).ok());
  absl::StatusOr<WorkCompletion> refused = x.NextSend(2);
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_EQ(refused->status, WcStatus::kRemoteAccessError);
  absl::StatusOr<WorkCompletion> flushed = y.NextRecv(2);
  ASSERT_TRUE(flushed.ok()) << flushed.status();
  EXPECT_EQ(flushed->status, WcStatus::kFlushed);
  pair1_round('k');  // the refusal failed pair 2 only
  // Pair 0 is still waiting, and goes on once its receive is posted.
  EXPECT_EQ(x.qps[0]->state(), QpState::kReadyToSend);
  WorkCompletion none;
  EXPECT_EQ(x.send_cqs[0]->Poll({&none, 1}), 0) << "the SEND completed unreceived";
  ASSERT_TRUE(y.qps[0]->PostRecv(MakeRecv(500, y.mr->Sge(16384, 64))).ok());
  absl::StatusOr<WorkCompletion> got = y.NextRecv(0);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->status, WcStatus::kSuccess);
  EXPECT_EQ(got->byte_len, 16u);
  absl::StatusOr<WorkCompletion> sent = x.NextSend(0);
  ASSERT_TRUE(sent.ok()) << sent.status();
  EXPECT_EQ(sent->status, WcStatus::kSuccess);
  // One end of pair 0 going away fails its peer's next request, and nothing else.
  y.qps[0]->SetError();
  ASSERT_TRUE(x.qps[0]->PostSend(MakeWrite(600, x.mr->Sge(0, 8), y_base, y.mr->rkey())).ok());
  absl::StatusOr<WorkCompletion> lost = x.NextSend(0);
  ASSERT_TRUE(lost.ok()) << lost.status();
  EXPECT_NE(lost->status, WcStatus::kSuccess);
  pair1_round('u');
}

REGISTER_TYPED_TEST_SUITE_P(
    RnicConformanceTest, WriteIsVisibleAtTargetWhenItCompletes, MixedOperationsExecuteInPostOrder,
    ManyWritesToOneAddressLandInPostOrder, ImmediateAndByteLenAreDelivered,
    EachAccessErrorWritesNothingAndFailsTheConnection, BadLocalKeyIsALocalProtectionError,
    ZeroLengthTransfersComplete, SixteenMebibyteTransfersArriveIntact,
    ReceiveTooSmallFailsBothSides, SendWithNoReceivePostedFailsAfterRnrTimeout,
    SendWaitsForAReceivePostedLate, CloseFlushesPostedWork,
    VanishedPeerTurnsOutstandingWorkIntoErrors, MalformedRequestsAreRejectedAtPost,
    SharedReceiveQueueFeedsItsQpsOldestReceiveFirst,
    ConcurrentSendsOnTwoQpsTakeDistinctSharedReceives,
    EmptySharedReceiveQueueIsRnrAndAFailedQpLeavesItsReceives,
    SharedReceiveQueueLimitEventFiresOnceBelowTheWatermark,
    SharedReceiveQueueRefusesBadConfigsAndPosts, QpPairsBetweenTheSameDevicesWaitAndFailAlone);

}  // namespace unloadkv::rnic

#endif  // UNLOADKV_TRANSPORT_CONFORMANCE_CONFORMANCE_SUITE_H_
