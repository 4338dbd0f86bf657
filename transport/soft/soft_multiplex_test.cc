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

// The bytes of a header, as a device sends it.
std::string EncodeHeader(const FrameHeader& h) {
  std::string out(kMaxFrameHeaderSize, '\0');
  out.resize(EncodeFrameHeader(h, out.data()));
  return out;
}

// Reads one header from `fd` (waiting up to 5 s for its first byte).
absl::StatusOr<FrameHeader> RecvHeader(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, 5000) != 1) return absl::DeadlineExceededError("no frame within 5 s");
  char bytes[kMaxFrameHeaderSize];
  if (recv(fd, bytes, kFramePrefixSize, MSG_WAITALL) != static_cast<ssize_t>(kFramePrefixSize)) {
    return absl::UnavailableError("recv");
  }
  absl::StatusOr<size_t> size = DecodeFramePrefix(bytes);
  if (!size.ok()) return size.status();
  const size_t rest = *size - kFramePrefixSize;
  if (rest > 0 &&
      recv(fd, bytes + kFramePrefixSize, rest, MSG_WAITALL) != static_cast<ssize_t>(rest)) {
    return absl::UnavailableError("recv");
  }
  size_t used = 0;
  return DecodeFrameHeader(bytes, *size, 1 << 20, &used);
}

// Opens a raw TCP connection to `device` and says HELLO.
ScopedFd RawStream(const SoftDevice& device) {
  absl::StatusOr<sockaddr_in> sa = ParseHostPort(device.address());
  EXPECT_TRUE(sa.ok());
  ScopedFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  EXPECT_EQ(connect(fd.get(), reinterpret_cast<const sockaddr*>(&*sa), sizeof(*sa)), 0);
  FrameHeader hello;
  hello.type = FrameType::kHello;
  const std::string bytes = EncodeHeader(hello);
  EXPECT_EQ(send(fd.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(bytes.size()));
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
  std::string frame = EncodeHeader(w) + std::string(64, 'X');
  // A CONNECT for b's QP, which is connected already: refused with a DISCONNECT.
  FrameHeader c;
  c.type = FrameType::kConnect;
  c.qp = b.qps[0]->qp_num();
  c.src_qp = 77;
  frame += EncodeHeader(c);
  ASSERT_EQ(send(rogue.get(), frame.data(), frame.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(frame.size()));
  absl::StatusOr<FrameHeader> h = RecvHeader(rogue.get());  // the answer to the CONNECT
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

// Sends a CONNECT on `rogue` for QP `qp` claiming to be QP `src_qp` (first PSN `psn`) with
// connect token `token`, and returns the frame the device answers (within 5 s).
absl::StatusOr<FrameHeader> RogueConnect(int rogue, uint32_t qp, uint32_t src_qp, uint32_t psn,
                                         const std::string& token) {
  FrameHeader c;
  c.type = FrameType::kConnect;
  c.qp = qp;
  c.src_qp = src_qp;
  c.psn = psn;
  SetConnectToken(token, &c);
  const std::string bytes = EncodeHeader(c);
  if (send(rogue, bytes.data(), bytes.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(bytes.size())) {
    return absl::UnavailableError("send");
  }
  return RecvHeader(rogue);
}

// A stranger that saw the bootstrap exchange knows both QP numbers and PSNs, but not the token
// both ends derived from it (rpc/handshake.h): its CONNECT is refused whether it comes after the
// listening end's Connect or before it (then the Connect detaches it), and the real pair
// connects.
TEST(SoftMultiplexTest, AConnectWithoutThePairsTokenIsRefused) {
  SetMinLogLevel(LogLevel::kError);
  const std::string token = "0123456789abcdef";
  for (bool stranger_first : {false, true}) {
    SCOPED_TRACE(stranger_first ? "stranger before Connect" : "stranger after Connect");
    Side a, b;
    a.Init(1);
    b.Init(1);
    rnic::QpAttributes attrs_a = a.qps[0]->local_attributes();
    rnic::QpAttributes attrs_b = b.qps[0]->local_attributes();
    attrs_a.token = attrs_b.token = token;
    // The end with the larger (QP number, first PSN) listens for the other's CONNECT.
    const bool a_listens =
        std::make_pair(attrs_a.qp_num, attrs_a.psn) > std::make_pair(attrs_b.qp_num, attrs_b.psn);
    Side& listener = a_listens ? a : b;
    Side& dialer = a_listens ? b : a;
    const rnic::QpAttributes& to_listener = a_listens ? attrs_a : attrs_b;
    const rnic::QpAttributes& to_dialer = a_listens ? attrs_b : attrs_a;
    ScopedFd rogue = RawStream(*listener.device);
    if (!stranger_first) ASSERT_TRUE(listener.qps[0]->Connect(to_dialer).ok());
    // Without the token, and with a wrong one.
    for (const std::string& t : {std::string(), std::string("fedcba9876543210")}) {
      if (stranger_first && !t.empty()) break;  // one CONNECT attaches; Connect answers it
      if (stranger_first) {
        FrameHeader c;
        c.type = FrameType::kConnect;
        c.qp = to_listener.qp_num;
        c.src_qp = to_dialer.qp_num;
        c.psn = to_dialer.psn;
        const std::string bytes = EncodeHeader(c);
        ASSERT_EQ(send(rogue.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL),
                  static_cast<ssize_t>(bytes.size()));
        // The listening end's Connect finds it without the pair's token and sends it away.
        ASSERT_TRUE(listener.qps[0]->Connect(to_dialer).ok());
        absl::StatusOr<FrameHeader> h = RecvHeader(rogue.get());
        ASSERT_TRUE(h.ok()) << "the stranger was not sent away: " << h.status();
        EXPECT_EQ(h->type, FrameType::kDisconnect);
        EXPECT_EQ(h->qp, to_dialer.qp_num);
      } else {
        absl::StatusOr<FrameHeader> h =
            RogueConnect(rogue.get(), to_listener.qp_num, to_dialer.qp_num, to_dialer.psn, t);
        ASSERT_TRUE(h.ok()) << h.status();
        EXPECT_EQ(h->type, FrameType::kDisconnect);
      }
    }
    EXPECT_EQ(listener.qps[0]->state(), rnic::QpState::kReadyToSend);
    // The real peer connects and a message goes through.
    ASSERT_TRUE(dialer.qps[0]->Connect(to_listener).ok());
    ASSERT_TRUE(listener.qps[0]->PostRecv(rnic::MakeRecv(1, listener.mr->Sge(0, 64))).ok());
    ASSERT_TRUE(dialer.qps[0]->PostSend(rnic::MakeSend(1, dialer.mr->Sge(0, 8))).ok());
    absl::StatusOr<rnic::WorkCompletion> wc =
        rnic::WaitForCompletion(*listener.device, *listener.cq, absl::Seconds(5));
    ASSERT_TRUE(wc.ok()) << wc.status();
    EXPECT_EQ(wc->status, rnic::WcStatus::kSuccess);
  }
}

}  // namespace
}  // namespace unloadkv::soft
