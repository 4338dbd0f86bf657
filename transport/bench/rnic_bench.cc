// rnic_bench: soft RNIC WRITE and SEND latency and throughput between two processes over
// loopback, next to a plain TCP ping-pong and stream of the same sizes measured in the same run.
//
//   bazel run -c opt //transport/bench:rnic_bench -- --sizes=64,4096,1048576
//
// The process forks a server child before creating any device; the two talk over a socketpair
// for bootstrap and phase control, and over loopback TCP / the soft RNIC for the measurement.
// Both sides sleep in poll(2) while waiting (no busy-polling), for the TCP baseline and the
// soft RNIC alike, so the comparison is like for like.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gflags/gflags.h"
#include "transport/base/logging.h"
#include "transport/base/net.h"
#include "transport/rnic/wait.h"
#include "transport/soft/soft_device.h"

DEFINE_string(sizes, "64,256,1024,4096,16384,65536,262144,1048576",
              "message sizes in bytes, comma-separated");
DEFINE_int32(latency_iters, 2000, "round trips per size for latency");
DEFINE_int64(bandwidth_bytes, 256ll << 20, "bytes moved per size for throughput");
DEFINE_int32(bandwidth_max_ops, 100000, "cap on operations per size for throughput");
DEFINE_int32(window, 32, "operations in flight for throughput");

namespace unloadkv {
namespace {

constexpr size_t kBufferBytes = 64 << 20;

// ---------------------------------------------------------------- small helpers

// Control channel: newline-terminated text lines over the socketpair.
class Control {
 public:
  explicit Control(int fd) : fd_(fd) {}
  void Send(const std::string& line) { (void)SendAll(fd_, line + "\n"); }
  std::string Receive() {
    std::string line;
    char c;
    while (RecvAll(fd_, &c, 1).ok() && c != '\n') line.push_back(c);
    return line;
  }
  int fd() const { return fd_; }

 private:
  int fd_;
};

struct Endpoint {
  std::unique_ptr<soft::SoftDevice> dev;
  std::vector<char> buf;
  std::unique_ptr<rnic::MemoryRegion> mr;
  std::unique_ptr<rnic::CompletionQueue> scq, rcq;
  std::unique_ptr<rnic::QueuePair> qp;
  uint32_t peer_rkey = 0;
  uint64_t peer_addr = 0;

  // Sleeps until the device has network work, then does it.
  void WaitAndProgress() { dev->Progress(absl::Seconds(1)); }
  // Blocks until one completion is on `cq`.
  rnic::WorkCompletion Next(rnic::CompletionQueue& cq) {
    rnic::WorkCompletion wc;
    while (cq.Poll({&wc, 1}) == 0) WaitAndProgress();
    if (wc.status != rnic::WcStatus::kSuccess) {
      std::fprintf(stderr, "rnic_bench: %s\n", wc.DebugString().c_str());
      std::exit(2);
    }
    return wc;
  }
};

Endpoint MakeEndpoint(Control& ctl) {
  Endpoint e;
  auto dev = soft::SoftDevice::Create({});
  if (!dev.ok()) {
    std::fprintf(stderr, "rnic_bench: %s\n", dev.status().ToString().c_str());
    std::exit(2);
  }
  e.dev = std::move(*dev);
  e.buf.assign(kBufferBytes, 0);
  e.mr = *e.dev->RegisterMemory(e.buf.data(), e.buf.size(),
                                rnic::kLocalWrite | rnic::kRemoteWrite | rnic::kRemoteRead);
  e.scq = *e.dev->CreateCompletionQueue(4096);
  e.rcq = *e.dev->CreateCompletionQueue(4096);
  rnic::QpConfig cfg;
  cfg.send_cq = e.scq.get();
  cfg.recv_cq = e.rcq.get();
  cfg.max_send_wr = 4096;
  cfg.max_recv_wr = 4096;
  cfg.rnr_timeout = absl::InfiniteDuration();
  e.qp = *e.dev->CreateQueuePair(cfg);
  ctl.Send(absl::StrCat(rnic::EncodeQpAttributes(e.qp->local_attributes()), "|", e.mr->rkey(), "|",
                        e.mr->address()));
  std::vector<std::string> parts = absl::StrSplit(ctl.Receive(), '|');
  auto remote = rnic::DecodeQpAttributes(parts.at(0));
  if (!remote.ok() || !absl::SimpleAtoi(parts.at(1), &e.peer_rkey) ||
      !absl::SimpleAtoi(parts.at(2), &e.peer_addr) || !e.qp->Connect(*remote).ok()) {
    std::fprintf(stderr, "rnic_bench: bootstrap failed\n");
    std::exit(2);
  }
  return e;
}

int Listen(uint16_t* port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
  listen(fd, 1);
  socklen_t len = sizeof(sa);
  getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  *port = ntohs(sa.sin_port);
  return fd;
}

int Dial(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sa.sin_port = htons(port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) return -1;
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

// Marker written in the last byte of every latency message; never 0.
char Marker(int i) { return static_cast<char>(1 + i % 250); }

// ---------------------------------------------------------------- server (child process)

void Serve(Control& ctl) {
  uint16_t port;
  int lfd = Listen(&port);
  ctl.Send(absl::StrCat(port));
  int tcp = accept(lfd, nullptr, nullptr);
  int one = 1;
  setsockopt(tcp, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  Endpoint e = MakeEndpoint(ctl);
  std::vector<char> scratch(kBufferBytes);
  for (;;) {
    std::vector<std::string> cmd = absl::StrSplit(ctl.Receive(), ' ');
    if (cmd.empty() || cmd[0] == "quit" || cmd[0].empty()) break;
    size_t size = std::stoull(cmd.at(1));
    int64_t n = std::stoll(cmd.at(2));
    if (cmd[0] == "tcp_lat") {
      for (int64_t i = 0; i < n; ++i) {
        (void)RecvAll(tcp, scratch.data(), size);
        (void)SendAll(tcp, absl::string_view(scratch.data(), size));
      }
    } else if (cmd[0] == "tcp_bw") {
      int64_t total = n * static_cast<int64_t>(size);
      while (total > 0) {
        ssize_t k = recv(tcp, scratch.data(), std::min<int64_t>(total, scratch.size()), 0);
        if (k <= 0) break;
        total -= k;
      }
      char ack = 1;
      (void)SendAll(tcp, absl::string_view(&ack, 1));
    } else if (cmd[0] == "write_lat") {
      // Mirror each incoming WRITE back once its last byte shows up.
      for (int64_t i = 0; i < n; ++i) {
        volatile char* last = &e.buf[size - 1];
        while (*last != Marker(i)) e.WaitAndProgress();
        rnic::SendWorkRequest wr = rnic::MakeWrite(i, e.mr->Sge(0, size), e.peer_addr, e.peer_rkey);
        wr.signaled = (i % 64 == 63);
        e.qp->PostSend(wr);
        if (wr.signaled) e.Next(*e.scq);
      }
    } else if (cmd[0] == "send_lat") {
      for (int k = 0; k < 4; ++k) e.qp->PostRecv(rnic::MakeRecv(k, e.mr->Sge(0, size)));
      for (int64_t i = 0; i < n; ++i) {
        e.Next(*e.rcq);
        if (i + 4 < n) e.qp->PostRecv(rnic::MakeRecv(i, e.mr->Sge(0, size)));
        rnic::SendWorkRequest wr = rnic::MakeSend(i, e.mr->Sge(size, size));
        wr.signaled = (i % 64 == 63);
        e.qp->PostSend(wr);
        if (wr.signaled) e.Next(*e.scq);
      }
      ctl.Send("done");
    } else if (cmd[0] == "write_bw") {
      // One-sided: the server only needs its NIC to run until the client says done.
      ctl.Send("ready");
      for (;;) {
        pollfd p[2] = {{e.dev->event_fd(), POLLIN, 0}, {ctl.fd(), POLLIN, 0}};
        ::poll(p, 2, 1000);
        e.dev->Progress(absl::ZeroDuration());
        if (p[1].revents & POLLIN) break;
      }
      ctl.Receive();
    } else if (cmd[0] == "send_bw") {
      int posted = static_cast<int>(std::min<int64_t>(n, std::stoll(cmd.at(3))));
      size_t slots = std::max<size_t>(1, std::min<size_t>(posted, kBufferBytes / size));
      for (int k = 0; k < posted; ++k) {
        e.qp->PostRecv(rnic::MakeRecv(k, e.mr->Sge((k % slots) * size, size)));
      }
      ctl.Send("ready");
      for (int64_t i = 0; i < n; ++i) {
        rnic::WorkCompletion wc = e.Next(*e.rcq);
        if (i + posted < n) {
          e.qp->PostRecv(rnic::MakeRecv(wc.wr_id, e.mr->Sge((wc.wr_id % slots) * size, size)));
        }
      }
      ctl.Send("done");
    }
  }
  close(tcp);
  close(lfd);
}

// ---------------------------------------------------------------- client (parent process)

struct Latency {
  double p50_us = 0, p99_us = 0;
};

Latency Summarize(std::vector<double>& us) {
  std::sort(us.begin(), us.end());
  Latency l;
  l.p50_us = us[us.size() / 2];
  l.p99_us = us[std::min(us.size() - 1, us.size() * 99 / 100)];
  return l;
}

double NowUs() { return absl::ToDoubleMicroseconds(absl::Now() - absl::UnixEpoch()); }

struct Row {
  size_t size;
  Latency tcp, write, send;
  double tcp_gbps, write_gbps, write_ops, send_gbps, send_ops;
};

// Longer than our usual 80 lines on purpose: the measurements run in one fixed order, each
// announced to the peer process, which follows the same script; one function keeps the two
// scripts comparable side by side.
Row Measure(Control& ctl, int tcp, Endpoint& e, size_t size) {
  Row r{};
  r.size = size;
  const int iters = FLAGS_latency_iters;
  std::vector<char> scratch(size);
  std::vector<double> us;
  us.reserve(iters);

  // TCP ping-pong.
  ctl.Send(absl::StrCat("tcp_lat ", size, " ", iters));
  for (int i = 0; i < iters; ++i) {
    double t0 = NowUs();
    (void)SendAll(tcp, absl::string_view(scratch.data(), size));
    (void)RecvAll(tcp, scratch.data(), size);
    us.push_back(NowUs() - t0);
  }
  r.tcp = Summarize(us);

  // Soft WRITE ping-pong (perftest ib_write_lat style: each side waits for the other's bytes).
  us.clear();
  std::fill(e.buf.begin(), e.buf.begin() + size, 0);
  ctl.Send(absl::StrCat("write_lat ", size, " ", iters));
  for (int i = 0; i < iters; ++i) {
    e.buf[size - 1 + (1 << 20)] = Marker(i);
    double t0 = NowUs();
    rnic::SendWorkRequest wr =
        rnic::MakeWrite(i, e.mr->Sge(1 << 20, size), e.peer_addr, e.peer_rkey);
    wr.signaled = (i % 64 == 63);
    e.qp->PostSend(wr);
    volatile char* last = &e.buf[size - 1];
    while (*last != Marker(i)) e.WaitAndProgress();
    us.push_back(NowUs() - t0);
    if (wr.signaled) e.Next(*e.scq);
  }
  r.write = Summarize(us);

  // Soft SEND ping-pong (perftest ib_send_lat style).
  us.clear();
  for (int k = 0; k < 4; ++k) e.qp->PostRecv(rnic::MakeRecv(k, e.mr->Sge(0, size)));
  ctl.Send(absl::StrCat("send_lat ", size, " ", iters));
  for (int i = 0; i < iters; ++i) {
    double t0 = NowUs();
    rnic::SendWorkRequest wr = rnic::MakeSend(i, e.mr->Sge(1 << 20, size));
    wr.signaled = (i % 64 == 63);
    e.qp->PostSend(wr);
    e.Next(*e.rcq);
    us.push_back(NowUs() - t0);
    if (i + 4 < iters) e.qp->PostRecv(rnic::MakeRecv(i, e.mr->Sge(0, size)));
    if (wr.signaled) e.Next(*e.scq);
  }
  ctl.Receive();
  r.send = Summarize(us);

  const int64_t ops = std::max<int64_t>(
      16, std::min<int64_t>(FLAGS_bandwidth_max_ops, FLAGS_bandwidth_bytes / size));
  const int window = std::min<int64_t>(FLAGS_window, std::max<size_t>(1, (32u << 20) / size));

  // TCP stream.
  ctl.Send(absl::StrCat("tcp_bw ", size, " ", ops));
  std::vector<char> big(size);
  double t0 = NowUs();
  for (int64_t i = 0; i < ops; ++i) (void)SendAll(tcp, absl::string_view(big.data(), size));
  char ack;
  (void)RecvAll(tcp, &ack, 1);
  double secs = (NowUs() - t0) / 1e6;
  r.tcp_gbps = ops * static_cast<double>(size) / secs / 1e9;

  // Soft WRITE stream: `window` writes in flight, each completion refills.
  ctl.Send(absl::StrCat("write_bw ", size, " ", ops));
  ctl.Receive();
  t0 = NowUs();
  int64_t posted = 0, done = 0;
  size_t slots = std::max<size_t>(1, (kBufferBytes / 2) / size);
  auto post_write = [&](int64_t i) {
    e.qp->PostSend(rnic::MakeWrite(i, e.mr->Sge((i % slots) * size, size),
                                   e.peer_addr + (i % slots) * size, e.peer_rkey));
  };
  while (posted < std::min<int64_t>(window, ops)) post_write(posted++);
  while (done < ops) {
    e.Next(*e.scq);
    ++done;
    if (posted < ops) post_write(posted++);
  }
  secs = (NowUs() - t0) / 1e6;
  ctl.Send("done");
  r.write_ops = ops / secs;
  r.write_gbps = r.write_ops * size / 1e9;

  // Soft SEND stream.
  ctl.Send(absl::StrCat("send_bw ", size, " ", ops, " ", window * 2));
  ctl.Receive();
  t0 = NowUs();
  posted = done = 0;
  auto post_send = [&](int64_t i) {
    e.qp->PostSend(rnic::MakeSend(i, e.mr->Sge((i % slots) * size, size)));
  };
  while (posted < std::min<int64_t>(window, ops)) post_send(posted++);
  while (done < ops) {
    e.Next(*e.scq);
    ++done;
    if (posted < ops) post_send(posted++);
  }
  ctl.Receive();
  secs = (NowUs() - t0) / 1e6;
  r.send_ops = ops / secs;
  r.send_gbps = r.send_ops * size / 1e9;
  return r;
}

std::string HumanSize(size_t s) {
  if (s >= (1 << 20) && s % (1 << 20) == 0) return absl::StrCat(s >> 20, "MiB");
  if (s >= 1024 && s % 1024 == 0) return absl::StrCat(s >> 10, "KiB");
  return absl::StrCat(s, "B");
}

int Run() {
  std::vector<size_t> sizes;
  for (absl::string_view s : absl::StrSplit(FLAGS_sizes, ',', absl::SkipEmpty())) {
    uint64_t v;
    if (!absl::SimpleAtoi(s, &v) || v == 0 || v > (16u << 20)) {
      std::fprintf(stderr, "rnic_bench: --sizes entry '%.*s' must be 1..16777216\n",
                   static_cast<int>(s.size()), s.data());
      return 1;
    }
    sizes.push_back(v);
  }
  if (FLAGS_latency_iters < 10 || FLAGS_window < 1 || FLAGS_bandwidth_bytes < 1) {
    std::fprintf(stderr, "rnic_bench: --latency_iters >= 10, --window >= 1 required\n");
    return 1;
  }
  int sv[2];
  socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
  pid_t child = fork();
  if (child == 0) {
    close(sv[0]);
    Control ctl(sv[1]);
    Serve(ctl);
    _exit(0);
  }
  close(sv[1]);
  Control ctl(sv[0]);
  int tcp = Dial(static_cast<uint16_t>(std::stoi(ctl.Receive())));
  Endpoint e = MakeEndpoint(ctl);

  std::printf("rnic_bench: soft RNIC vs plain TCP, two processes over loopback (measured)\n");
  std::printf(
      "latency: %d round trips per size; throughput: up to %lld bytes per size, "
      "%d in flight\n\n",
      FLAGS_latency_iters, static_cast<long long>(FLAGS_bandwidth_bytes), FLAGS_window);
  std::printf("%-7s | %-17s | %-17s %-6s | %-17s %-6s\n", "size", "tcp rtt p50/p99 us",
              "write rtt p50/p99", "x tcp", "send rtt p50/p99", "x tcp");
  std::vector<Row> rows;
  for (size_t size : sizes) {
    std::fprintf(stderr, "  measuring %s ...\n", HumanSize(size).c_str());
    Row r = Measure(ctl, tcp, e, size);
    rows.push_back(r);
    std::printf("%-7s | %7.1f / %-7.1f | %7.1f / %-7.1f %5.2fx | %7.1f / %-7.1f %5.2fx\n",
                HumanSize(size).c_str(), r.tcp.p50_us, r.tcp.p99_us, r.write.p50_us, r.write.p99_us,
                r.write.p50_us / r.tcp.p50_us, r.send.p50_us, r.send.p99_us,
                r.send.p50_us / r.tcp.p50_us);
    std::fflush(stdout);
  }
  std::printf("\n%-7s | %-9s | %-9s %-10s %-6s | %-9s %-10s %-6s\n", "size", "tcp GB/s",
              "write GB/s", "ops/s", "x tcp", "send GB/s", "ops/s", "x tcp");
  for (const Row& r : rows) {
    std::printf("%-7s | %9.3f | %9.3f %10.0f %5.2fx | %9.3f %10.0f %5.2fx\n",
                HumanSize(r.size).c_str(), r.tcp_gbps, r.write_gbps, r.write_ops,
                r.write_gbps / r.tcp_gbps, r.send_gbps, r.send_ops, r.send_gbps / r.tcp_gbps);
  }
  ctl.Send("quit");
  int status;
  waitpid(child, &status, 0);
  close(tcp);
  return 0;
}

}  // namespace
}  // namespace unloadkv

int main(int argc, char** argv) {
  gflags::SetUsageMessage("soft RNIC vs TCP latency and throughput; see docs/benchmarks.md");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  unloadkv::SetMinLogLevel(unloadkv::LogLevel::kError);
  return unloadkv::Run();
}
