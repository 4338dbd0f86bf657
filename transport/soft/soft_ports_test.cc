// A soft device's ports (SoftDevice::Options::ports): each its own listener, streams and
// progress; registrations, windows and QP numbers shared. The conformance suite runs on a
// second port too (soft_conformance_test.cc).
#include <cstring>
#include <memory>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "transport/base/logging.h"
#include "transport/rnic/wait.h"
#include "transport/soft/soft_device.h"

namespace unloadkv::soft {
namespace {

std::unique_ptr<SoftDevice> Open(int ports, bool progress_thread) {
  SetMinLogLevel(LogLevel::kError);
  SoftDevice::Options o;
  o.ports = ports;
  o.progress_thread = progress_thread;
  absl::StatusOr<std::unique_ptr<SoftDevice>> d = SoftDevice::Create(o);
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? std::move(*d) : nullptr;
}

// A QP on `initiator` connected to one on `target` (a port), each with a CQ of its own.
struct QpPair {
  QpPair(rnic::Device& initiator, rnic::Device& target) {
    icq = *initiator.CreateCompletionQueue(16);
    tcq = *target.CreateCompletionQueue(16);
    rnic::QpConfig icfg, tcfg;
    icfg.send_cq = icfg.recv_cq = icq.get();
    tcfg.send_cq = tcfg.recv_cq = tcq.get();
    iqp = *initiator.CreateQueuePair(icfg);
    tqp = *target.CreateQueuePair(tcfg);
    EXPECT_TRUE(iqp->Connect(tqp->local_attributes()).ok());
    EXPECT_TRUE(tqp->Connect(iqp->local_attributes()).ok());
  }
  std::unique_ptr<rnic::CompletionQueue> icq, tcq;
  std::unique_ptr<rnic::QueuePair> iqp, tqp;
};

TEST(SoftPortsTest, PortsOutOfRangeAreRefused) {
  for (int ports : {0, -1, kMaxPorts + 1}) {
    SoftDevice::Options o;
    o.ports = ports;
    absl::Status st = SoftDevice::Create(o).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << ports;
    EXPECT_NE(st.message().find("ports must be in 1.."), absl::string_view::npos) << st;
  }
}

TEST(SoftPortsTest, EachPortListensApartAndQpNumbersAreUniqueAcrossPorts) {
  std::unique_ptr<SoftDevice> d = Open(3, /*progress_thread=*/true);
  ASSERT_EQ(d->port_count(), 3);
  EXPECT_EQ(d->port(0), d.get());
  EXPECT_EQ(d->port(3), nullptr);
  EXPECT_EQ(d->port(-1), nullptr);
  std::set<std::string> addresses;
  std::set<uint32_t> qp_nums;
  std::vector<std::unique_ptr<rnic::CompletionQueue>> cqs;
  std::vector<std::unique_ptr<rnic::QueuePair>> qps;
  for (int i = 0; i < 3; ++i) {
    auto* port = static_cast<SoftDevice*>(d->port(i));
    addresses.insert(port->address());
    cqs.push_back(*port->CreateCompletionQueue(16));
    rnic::QpConfig cfg;
    cfg.send_cq = cqs.back().get();
    cfg.recv_cq = cfg.send_cq;
    for (int k = 0; k < 2; ++k) {
      qps.push_back(*port->CreateQueuePair(cfg));
      EXPECT_EQ(qps.back()->local_attributes().address, port->address());
      qp_nums.insert(qps.back()->qp_num());
    }
  }
  EXPECT_EQ(addresses.size(), 3u);
  EXPECT_EQ(qp_nums.size(), 6u) << "a window or frame naming a QP number would be ambiguous";
}

TEST(SoftPortsTest, AQpTakesItsCompletionQueuesAndSrqFromItsOwnPort) {
  std::unique_ptr<SoftDevice> d = Open(2, /*progress_thread=*/true);
  std::unique_ptr<rnic::CompletionQueue> cq0 = *d->CreateCompletionQueue(16);
  std::unique_ptr<rnic::CompletionQueue> cq1 = *d->port(1)->CreateCompletionQueue(16);
  rnic::QpConfig cfg;
  cfg.send_cq = cq0.get();
  cfg.recv_cq = cq0.get();
  absl::Status st = d->port(1)->CreateQueuePair(cfg).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("this device (port)"), absl::string_view::npos) << st;
  rnic::SrqConfig srq_cfg;
  std::unique_ptr<rnic::SharedReceiveQueue> srq0 = *d->CreateSharedReceiveQueue(srq_cfg);
  cfg.send_cq = cq1.get();
  cfg.recv_cq = cq1.get();
  cfg.srq = srq0.get();
  EXPECT_EQ(d->port(1)->CreateQueuePair(cfg).status().code(), absl::StatusCode::kInvalidArgument);
  cfg.srq = nullptr;
  EXPECT_TRUE(d->port(1)->CreateQueuePair(cfg).ok());
}

// A WRITE into port 1 of a caller-driven device, into memory registered through port 0, is
// placed by port 1's progress and by no other port's: each port owns its streams.
TEST(SoftPortsTest, APortsStreamsAreProgressedByThatPortAlone) {
  std::unique_ptr<SoftDevice> initiator = Open(1, /*progress_thread=*/true);
  std::unique_ptr<SoftDevice> target = Open(2, /*progress_thread=*/false);
  std::vector<char> src(4096, 'p'), dst(4096, 0);
  auto src_mr = *initiator->RegisterMemory(src.data(), src.size(), rnic::kLocalWrite);
  auto dst_mr =
      *target->RegisterMemory(dst.data(), dst.size(), rnic::kLocalWrite | rnic::kRemoteWrite);
  rnic::Device* port1 = target->port(1);
  QpPair pair(*initiator, *port1);
  ASSERT_TRUE(
      pair.iqp
          ->PostSend(rnic::MakeWrite(1, src_mr->Sge(0, 4096), dst_mr->address(), dst_mr->rkey()))
          .ok());
  // Port 0 progressing for a while places nothing: the stream is port 1's.
  for (int i = 0; i < 10; ++i) target->Progress(absl::Milliseconds(2));
  EXPECT_EQ(dst[0], 0) << "port 0 progressed port 1's stream";
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (dst[4095] != 'p' && absl::Now() < deadline) port1->Progress(absl::Milliseconds(5));
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), src.size()), 0);
  absl::StatusOr<rnic::WorkCompletion> done =
      rnic::WaitForCompletion(*initiator, *pair.icq, absl::Seconds(10));
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->status, rnic::WcStatus::kSuccess);
}

// A region deregistered through one port stops working on every port.
TEST(SoftPortsTest, ADeregisteredRegionIsRefusedOnEveryPort) {
  std::unique_ptr<SoftDevice> initiator = Open(1, /*progress_thread=*/true);
  std::unique_ptr<SoftDevice> target = Open(2, /*progress_thread=*/true);
  std::vector<char> src(64, 'q'), dst(64, 0);
  auto src_mr = *initiator->RegisterMemory(src.data(), src.size(), rnic::kLocalWrite);
  auto dst_mr =
      *target->RegisterMemory(dst.data(), dst.size(), rnic::kLocalWrite | rnic::kRemoteWrite);
  const uint64_t addr = dst_mr->address();
  const uint32_t rkey = dst_mr->rkey();
  dst_mr.reset();
  QpPair pair(*initiator, *target->port(1));
  ASSERT_TRUE(pair.iqp->PostSend(rnic::MakeWrite(1, src_mr->Sge(0, 64), addr, rkey)).ok());
  absl::StatusOr<rnic::WorkCompletion> wc =
      rnic::WaitForCompletion(*initiator, *pair.icq, absl::Seconds(10));
  ASSERT_TRUE(wc.ok()) << wc.status();
  EXPECT_EQ(wc->status, rnic::WcStatus::kRemoteAccessError);
  EXPECT_EQ(dst[0], 0);
}

}  // namespace
}  // namespace unloadkv::soft
