// The soft RNIC's connection set-up against peers that never finish it: Connect never blocks,
// a dial nobody answers fails the QP within kConnectTimeout, and an inbound stream that never
// says HELLO is closed after kHelloTimeout (and costs no read buffer meanwhile).
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "transport/base/logging.h"
#include "transport/base/net.h"
#include "transport/base/test_listeners.h"
#include "transport/rnic/wait.h"
#include "transport/soft/soft_device.h"
#include "transport/soft/test_endpoint.h"

namespace unloadkv::soft {
namespace {

// `progress_thread`: the device progresses on its own (else only when its owner drives it).
// `defer_acks`, `hold_acks`: SoftDevice::Options::defer_acks, hold_acks_until_wait.
struct Endpoint : TestEndpoint {
  void Init(bool progress_thread = false, bool defer_acks = false, bool hold_acks = false) {
    SoftDevice::Options o;
    o.progress_thread = progress_thread;
    o.defer_acks = defer_acks;
    o.hold_acks_until_wait = hold_acks;
    TestEndpoint::Init(o);
  }
};

TEST(SoftHandshakeTest, ConnectToAPeerThatNeverAnswersFailsTheQpNotTheCaller) {
  testing::BlackHole hole;
  {
    // The kernel really drops the SYNs: a dial to it hangs.
    absl::StatusOr<sockaddr_in> sa = ParseHostPort(hole.address);
    ASSERT_TRUE(sa.ok());
    ScopedFd probe(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    EXPECT_NE(connect(probe.get(), reinterpret_cast<const sockaddr*>(&*sa), sizeof(*sa)), 0);
    pollfd p{probe.get(), POLLOUT, 0};
    ASSERT_EQ(poll(&p, 1, 300), 0) << "the kernel answered a SYN on a full accept queue";
  }
  Endpoint e;
  e.Init();
  rnic::QpAttributes remote{"soft", hole.address, 7, 0};
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(e.qp()->Connect(remote).ok());
  EXPECT_LT(absl::Now() - t0, absl::Milliseconds(100)) << "Connect waited for the dial";
  rnic::SendWorkRequest wr;
  wr.wr_id = 42;
  wr.opcode = rnic::Opcode::kSend;
  rnic::ScatterGatherEntry sge{reinterpret_cast<uint64_t>(e.buffer.data()), 16, e.mr->lkey()};
  wr.sg_list[0] = sge;
  wr.num_sge = 1;
  ASSERT_TRUE(e.qp()->PostSend({&wr, 1}).ok());
  absl::StatusOr<rnic::WorkCompletion> wc =
      rnic::WaitForCompletion(*e.device, *e.cq, kConnectTimeout + absl::Seconds(5));
  ASSERT_TRUE(wc.ok()) << wc.status();
  EXPECT_EQ(wc->wr_id, 42u);
  EXPECT_EQ(wc->status, rnic::WcStatus::kRetryExceeded);
  EXPECT_GE(absl::Now() - t0, kConnectTimeout - absl::Milliseconds(50));
  EXPECT_EQ(e.qp()->state(), rnic::QpState::kError);
}

TEST(SoftHandshakeTest, ConnectToAClosedPortFailsTheFirstRequest) {
  std::string closed_port;
  {
    testing::MuteListener gone;
    closed_port = gone.address;
  }  // nothing listens there now
  Endpoint e;
  e.Init();
  ASSERT_TRUE(e.qp()->Connect({"soft", closed_port, 7, 0}).ok());
  rnic::SendWorkRequest wr;
  wr.wr_id = 9;
  wr.opcode = rnic::Opcode::kSend;
  ASSERT_TRUE(e.qp()->PostSend({&wr, 1}).ok());
  absl::StatusOr<rnic::WorkCompletion> wc =
      rnic::WaitForCompletion(*e.device, *e.cq, absl::Seconds(5));
  ASSERT_TRUE(wc.ok()) << wc.status();
  // Retry exceeded when the refusal is noticed after the post; flushed when the QP had already
  // gone to the error state before it.
  EXPECT_TRUE(wc->status == rnic::WcStatus::kRetryExceeded ||
              wc->status == rnic::WcStatus::kFlushed)
      << rnic::WcStatusName(wc->status);
  EXPECT_EQ(e.qp()->state(), rnic::QpState::kError);
}

// A peer that opens streams to the device's port and says nothing: each is closed after
// kHelloTimeout, and connections between real QPs keep working meanwhile.
TEST(SoftHandshakeTest, SilentInboundStreamsAreClosedAndDoNotBlockRealOnes) {
  Endpoint a, b;
  // Only b's owner drives b below; a progresses on its own, so the QP pair connects whichever
  // end dials (docs/wire-soft.md).
  a.Init(/*progress_thread=*/true);
  b.Init();
  const absl::Time t0 = absl::Now();
  std::vector<ScopedFd> silent;
  for (int i = 0; i < 20; ++i) {
    absl::StatusOr<sockaddr_in> sa = ParseHostPort(b.device->address());
    ASSERT_TRUE(sa.ok());
    ScopedFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    ASSERT_EQ(connect(fd.get(), reinterpret_cast<const sockaddr*>(&*sa), sizeof(*sa)), 0);
    silent.push_back(std::move(fd));
  }
  ASSERT_TRUE(a.qp()->Connect(b.qp()->local_attributes()).ok());
  ASSERT_TRUE(b.qp()->Connect(a.qp()->local_attributes()).ok());
  rnic::RecvWorkRequest r;
  r.wr_id = 1;
  rnic::ScatterGatherEntry rs{reinterpret_cast<uint64_t>(b.buffer.data()), 64, b.mr->lkey()};
  r.sg_list[0] = rs;
  r.num_sge = 1;
  ASSERT_TRUE(b.qp()->PostRecv({&r, 1}).ok());
  rnic::SendWorkRequest wr;
  wr.wr_id = 2;
  wr.opcode = rnic::Opcode::kSend;
  ASSERT_TRUE(a.qp()->PostSend({&wr, 1}).ok());
  absl::StatusOr<rnic::WorkCompletion> got =
      rnic::WaitForCompletion(*b.device, *b.cq, absl::Seconds(5));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->status, rnic::WcStatus::kSuccess);
  // Every silent stream sees EOF once its HELLO deadline passed (b's owner drives it).
  const absl::Time deadline = absl::Now() + kHelloTimeout + absl::Seconds(5);
  size_t closed = 0;
  while (closed < silent.size() && absl::Now() < deadline) {
    b.device->Progress(absl::Milliseconds(20));
    for (ScopedFd& fd : silent) {
      if (!fd.valid()) continue;
      pollfd p{fd.get(), POLLIN, 0};
      if (poll(&p, 1, 0) != 1) continue;
      char c;
      EXPECT_EQ(recv(fd.get(), &c, 1, 0), 0);
      fd = ScopedFd();
      ++closed;
    }
  }
  EXPECT_EQ(closed, silent.size()) << "silent streams were never closed";
  EXPECT_GE(absl::Now() - t0, kHelloTimeout - absl::Milliseconds(50));
}

// With defer_acks, an ACK the requester asked for waits for the responder's next request on the
// stream (which carries it) or for FlushDeferred, never for more than that.
TEST(SoftHandshakeTest, DeferredAcksLeaveWithTheAnswerOrOnFlush) {
  Endpoint a, b;
  a.Init(/*progress_thread=*/true);
  b.Init(/*progress_thread=*/false, /*defer_acks=*/true);
  ASSERT_TRUE(a.qp()->Connect(b.qp()->local_attributes()).ok());
  ASSERT_TRUE(b.qp()->Connect(a.qp()->local_attributes()).ok());
  ASSERT_TRUE(b.qp()->PostRecv(rnic::MakeRecv(1, b.Sge(0))).ok());
  ASSERT_TRUE(b.qp()->PostRecv(rnic::MakeRecv(2, b.Sge(64))).ok());
  ASSERT_TRUE(a.qp()->PostRecv(rnic::MakeRecv(3, a.Sge(0))).ok());
  // A signaled SEND asks for an immediate ACK; b holds it back.
  ASSERT_TRUE(a.qp()->PostSend(rnic::MakeSend(10, a.Sge(128))).ok());
  absl::StatusOr<rnic::WorkCompletion> got =
      rnic::WaitForCompletion(*b.device, *b.cq, absl::Seconds(5));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->wr_id, 1u);
  rnic::WorkCompletion wc;
  absl::SleepFor(absl::Milliseconds(100));  // a's progress thread would have read an ACK
  EXPECT_EQ(a.cq->Poll({&wc, 1}), 0) << "the ACK left before FlushDeferred";
  b.device->FlushDeferred();
  got = rnic::WaitForCompletion(*a.device, *a.cq, absl::Seconds(5));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->wr_id, 10u);
  EXPECT_EQ(got->status, rnic::WcStatus::kSuccess);
  // Again, and b answers: the answer carries the ACK, no flush needed.
  ASSERT_TRUE(a.qp()->PostSend(rnic::MakeSend(11, a.Sge(128))).ok());
  got = rnic::WaitForCompletion(*b.device, *b.cq, absl::Seconds(5));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->wr_id, 2u);
  rnic::SendWorkRequest answer = rnic::MakeSend(20, b.Sge(128));
  answer.signaled = false;
  ASSERT_TRUE(b.qp()->PostSend({&answer, 1}).ok());
  std::vector<uint64_t> ids;
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (ids.size() < 2 && absl::Now() < deadline) {
    if (a.cq->Poll({&wc, 1}) == 1) {
      EXPECT_EQ(wc.status, rnic::WcStatus::kSuccess);
      ids.push_back(wc.wr_id);
    } else {
      absl::SleepFor(absl::Milliseconds(1));
    }
  }
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<uint64_t>{3, 11}));
}

// With hold_acks_until_wait, an ACK the requester asked for stays held through FlushDeferred
// and Progress calls that do not wait: it leaves with the responder's next request, before a
// Progress that may wait, or, for an owner that only busy-polls, at the delayed ACK's deadline.
TEST(SoftHandshakeTest, HeldAcksLeaveWithTheNextRequestOrBeforeAWait) {
  Endpoint a, b;
  a.Init(/*progress_thread=*/true);
  b.Init(/*progress_thread=*/false, /*defer_acks=*/false, /*hold_acks=*/true);
  ASSERT_TRUE(a.qp()->Connect(b.qp()->local_attributes()).ok());
  ASSERT_TRUE(b.qp()->Connect(a.qp()->local_attributes()).ok());
  for (uint64_t id : {1, 2, 3}) {
    ASSERT_TRUE(b.qp()->PostRecv(rnic::MakeRecv(id, b.Sge(64 * id))).ok());
  }
  ASSERT_TRUE(a.qp()->PostRecv(rnic::MakeRecv(9, a.Sge(0))).ok());
  auto a_completion = [&](absl::Duration within) -> std::optional<rnic::WorkCompletion> {
    rnic::WorkCompletion wc;
    for (const absl::Time end = absl::Now() + within; absl::Now() < end;) {
      if (a.cq->Poll({&wc, 1}) == 1) return wc;
      absl::SleepFor(absl::Milliseconds(1));
    }
    return std::nullopt;
  };
  // 1. Held through FlushDeferred and a Progress that does not wait; the next request carries it.
  ASSERT_TRUE(a.qp()->PostSend(rnic::MakeSend(10, a.Sge(128))).ok());
  absl::StatusOr<rnic::WorkCompletion> got =
      rnic::WaitForCompletion(*b.device, *b.cq, absl::Seconds(5));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->wr_id, 1u);
  b.device->FlushDeferred();
  b.device->Progress(absl::ZeroDuration());
  EXPECT_FALSE(a_completion(absl::Milliseconds(100)).has_value()) << "the ACK left alone";
  rnic::SendWorkRequest request = rnic::MakeSend(20, b.Sge(512));
  request.signaled = false;
  ASSERT_TRUE(b.qp()->PostSend({&request, 1}).ok());
  std::vector<uint64_t> ids;
  for (int i = 0; i < 2; ++i) {
    std::optional<rnic::WorkCompletion> wc = a_completion(absl::Seconds(5));
    ASSERT_TRUE(wc.has_value());
    EXPECT_EQ(wc->status, rnic::WcStatus::kSuccess);
    ids.push_back(wc->wr_id);
  }
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<uint64_t>{9, 10}));
  // 2. A Progress that may wait sends it first.
  ASSERT_TRUE(a.qp()->PostSend(rnic::MakeSend(11, a.Sge(128))).ok());
  got = rnic::WaitForCompletion(*b.device, *b.cq, absl::Seconds(5));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->wr_id, 2u);
  EXPECT_FALSE(a_completion(absl::Milliseconds(20)).has_value());
  b.device->Progress(absl::Milliseconds(1));
  std::optional<rnic::WorkCompletion> wc = a_completion(absl::Seconds(5));
  ASSERT_TRUE(wc.has_value());
  EXPECT_EQ(wc->wr_id, 11u);
  // 3. An owner that only busy-polls: the delayed ACK's deadline.
  ASSERT_TRUE(a.qp()->PostSend(rnic::MakeSend(12, a.Sge(128))).ok());
  got = rnic::WaitForCompletion(*b.device, *b.cq, absl::Seconds(5));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->wr_id, 3u);
  const absl::Time t0 = absl::Now();
  wc.reset();
  while (!wc.has_value() && absl::Now() - t0 < absl::Seconds(5)) {
    b.device->Progress(absl::ZeroDuration());
    rnic::WorkCompletion c;
    if (a.cq->Poll({&c, 1}) == 1) wc = c;
  }
  ASSERT_TRUE(wc.has_value()) << "the held ACK never left";
  EXPECT_EQ(wc->wr_id, 12u);
}

}  // namespace
}  // namespace unloadkv::soft
