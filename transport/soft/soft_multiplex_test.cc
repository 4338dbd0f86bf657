// The soft RNIC carries every QP pair between two devices on the streams between those devices
// (docs/wire-soft.md): a client costs its server a constant number of sockets whatever its QP
// count, the streams close once their last QP is gone, and no stream can speak for a QP
// attached to another.
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "transport/base/logging.h"
#include "transport/base/net.h"
#include "transport/rnic/wait.h"
#include "transport/soft/frame.h"
#include "transport/soft/soft_device.h"

namespace unloadkv::soft {
namespace {

// Sockets this process holds open.
int OpenSockets() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  while (dirent* e = readdir(d)) {
    char link[64];
    const std::string path = std::string("/proc/self/fd/") + e->d_name;
    ssize_t len = readlink(path.c_str(), link, sizeof(link) - 1);
    if (len > 0 && std::string(link, len).rfind("socket:", 0) == 0) ++n;
  }
  closedir(d);
  return n;
}

struct Side {
  std::unique_ptr<SoftDevice> device;
  std::vector<char> buffer = std::vector<char>(1 << 16, 0);
  std::unique_ptr<rnic::MemoryRegion> mr;
  std::unique_ptr<rnic::CompletionQueue> cq;
  std::vector<std::unique_ptr<rnic::QueuePair>> qps;

  void Init(int qps_wanted) {
    SoftDevice::Options o;
    o.progress_thread = true;
    absl::StatusOr<std::unique_ptr<SoftDevice>> d = SoftDevice::Create(o);
    ASSERT_TRUE(d.ok()) << d.status();
    device = std::move(*d);
    mr = *device->RegisterMemory(buffer.data(), buffer.size(),
                                 rnic::kLocalWrite | rnic::kRemoteWrite);
    cq = *device->CreateCompletionQueue(4096);
    for (int i = 0; i < qps_wanted; ++i) {
      rnic::QpConfig cfg;
      cfg.send_cq = cq.get();
      cfg.recv_cq = cq.get();
      qps.push_back(*device->CreateQueuePair(cfg));
    }
  }
};

// Connects QP i of `a` with QP i of `b` and sends one message on each pair, a to b.
void ConnectAndSend(Side& a, Side& b) {
  for (size_t i = 0; i < a.qps.size(); ++i) {
    ASSERT_TRUE(a.qps[i]->Connect(b.qps[i]->local_attributes()).ok());
    ASSERT_TRUE(b.qps[i]->Connect(a.qps[i]->local_attributes()).ok());
    ASSERT_TRUE(b.qps[i]->PostRecv(rnic::MakeRecv(i, b.mr->Sge(i * 64, 64))).ok());
    ASSERT_TRUE(a.qps[i]->PostSend(rnic::MakeSend(i, a.mr->Sge(i * 64, 8))).ok());
  }
  for (size_t i = 0; i < 2 * a.qps.size(); ++i) {  // a's send and b's receive, per pair
    absl::StatusOr<rnic::WorkCompletion> wc = rnic::WaitForCompletion(
        i % 2 == 0 ? *b.device : *a.device, i % 2 == 0 ? *b.cq : *a.cq, absl::Seconds(10));
    ASSERT_TRUE(wc.ok()) << wc.status();
    ASSERT_EQ(wc->status, rnic::WcStatus::kSuccess) << wc->DebugString();
  }
}

TEST(SoftMultiplexTest, ManyQpPairsBetweenTwoDevicesShareAtMostTwoStreams) {
  SetMinLogLevel(LogLevel::kError);
  constexpr int kPairs = 64;
  Side a, b;
  a.Init(kPairs);
  b.Init(kPairs);
  const int before = OpenSockets();
  ASSERT_GT(before, 0);
  ConnectAndSend(a, b);
  // Each stream is two sockets in this process (its two ends); one per QP pair would be 128.
  const int streams_sockets = OpenSockets() - before;
  EXPECT_GE(streams_sockets, 2);
  EXPECT_LE(streams_sockets, 4) << kPairs << " QP pairs took " << streams_sockets << " sockets";
  // Once every QP is gone, so are the streams.
  a.qps.clear();
  b.qps.clear();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (OpenSockets() > before && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ(OpenSockets(), before) << "streams outlived their QPs";
}

// Opens a raw TCP connection to `device` and says HELLO.
ScopedFd RawStream(const SoftDevice& device) {
  absl::StatusOr<sockaddr_in> sa = ParseHostPort(device.address());
  EXPECT_TRUE(sa.ok());
  ScopedFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  EXPECT_EQ(connect(fd.get(), reinterpret_cast<const sockaddr*>(&*sa), sizeof(*sa)), 0);
  FrameHeader hello;
  hello.type = FrameType::kHello;
  char bytes[kFrameHeaderSize];
  EncodeFrameHeader(hello, bytes);
  EXPECT_EQ(send(fd.get(), bytes, sizeof(bytes), MSG_NOSIGNAL),
            static_cast<ssize_t>(sizeof(bytes)));
  return fd;
}

TEST(SoftMultiplexTest, AStreamCannotSpeakForAQpAttachedToAnother) {
  SetMinLogLevel(LogLevel::kError);
  Side a, b;
  a.Init(1);
  b.Init(1);
  ConnectAndSend(a, b);
  const std::vector<char> before = b.buffer;
  ScopedFd rogue = RawStream(*b.device);
  // A WRITE naming b's QP and its real peer, with a good rkey: dropped, it is not their stream.
  FrameHeader w;
  w.type = FrameType::kWrite;
  w.qp = b.qps[0]->qp_num();
  w.src_qp = a.qps[0]->qp_num();
  w.remote_addr = b.mr->address() + 1024;
  w.rkey = b.mr->rkey();
  w.payload_len = 64;
  std::string frame(kFrameHeaderSize, '\0');
  EncodeFrameHeader(w, frame.data());
  frame += std::string(64, 'X');
  // A CONNECT for b's QP, which is connected already: refused with a DISCONNECT.
  FrameHeader c;
  c.type = FrameType::kConnect;
  c.qp = b.qps[0]->qp_num();
  c.src_qp = 77;
  std::string connect(kFrameHeaderSize, '\0');
  EncodeFrameHeader(c, connect.data());
  frame += connect;
  ASSERT_EQ(send(rogue.get(), frame.data(), frame.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(frame.size()));
  pollfd p{rogue.get(), POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 5000), 1) << "no answer to the CONNECT";
  char reply[kFrameHeaderSize];
  ASSERT_EQ(recv(rogue.get(), reply, sizeof(reply), MSG_WAITALL),
            static_cast<ssize_t>(sizeof(reply)));
  absl::StatusOr<FrameHeader> h = DecodeFrameHeader(reply, 1 << 20);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->type, FrameType::kDisconnect);
  EXPECT_EQ(h->qp, 77u);
  EXPECT_EQ(h->src_qp, b.qps[0]->qp_num());
  EXPECT_TRUE(b.buffer == before) << "a stranger's WRITE reached a QP's memory";
  // The real pair is untouched.
  EXPECT_EQ(b.qps[0]->state(), rnic::QpState::kReadyToSend);
  ASSERT_TRUE(b.qps[0]->PostRecv(rnic::MakeRecv(9, b.mr->Sge(0, 64))).ok());
  ASSERT_TRUE(a.qps[0]->PostSend(rnic::MakeSend(9, a.mr->Sge(0, 8))).ok());
  absl::StatusOr<rnic::WorkCompletion> wc =
      rnic::WaitForCompletion(*b.device, *b.cq, absl::Seconds(5));
  ASSERT_TRUE(wc.ok()) << wc.status();
  EXPECT_EQ(wc->status, rnic::WcStatus::kSuccess);
}

}  // namespace
}  // namespace unloadkv::soft
