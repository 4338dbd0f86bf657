// soft_demo: two processes exchange RDMA operations over the soft RNIC on loopback.
// The parent is the initiator; a forked child is the target. Each step prints what it did and
// what the other side observed, so the RC semantics are visible:
//   WRITE (one-sided), READ back, SEND/RECV with immediate, WRITE_WITH_IMM, and a WRITE outside
//   the target's region that the target NIC refuses without touching memory.
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gflags/gflags.h"
#include "transport/base/logging.h"
#include "transport/rnic/wait.h"
#include "transport/soft/soft_device.h"

DEFINE_string(host, "127.0.0.1", "loopback address both soft devices listen on");

namespace unloadkv {
namespace {

constexpr size_t kBytes = 1 << 20;

void SendLine(int fd, const std::string& s) {
  std::string line = s + "\n";
  (void)!write(fd, line.data(), line.size());
}

std::string ReadLine(int fd) {
  std::string s;
  char c;
  while (read(fd, &c, 1) == 1 && c != '\n') s.push_back(c);
  return s;
}

struct Side {
  std::unique_ptr<soft::SoftDevice> dev;
  std::vector<char> buf;
  std::unique_ptr<rnic::MemoryRegion> mr;
  std::unique_ptr<rnic::CompletionQueue> cq;
  std::unique_ptr<rnic::QueuePair> qp;
};

// The target's NIC must keep working while its CPU blocks elsewhere (one-sided operations need
// no target code), so the target runs a progress thread; the initiator progresses its device
// as it waits for completions.
absl::Status Setup(int ctl, Side& s, bool progress_thread, uint32_t* peer_rkey,
                   uint64_t* peer_addr) {
  soft::SoftDevice::Options o;
  o.listen_host = FLAGS_host;
  o.progress_thread = progress_thread;
  auto dev = soft::SoftDevice::Create(o);
  if (!dev.ok()) return dev.status();
  s.dev = std::move(*dev);
  s.buf.assign(kBytes, 0);
  auto mr = s.dev->RegisterMemory(s.buf.data(), kBytes,
                                  rnic::kLocalWrite | rnic::kRemoteWrite | rnic::kRemoteRead);
  if (!mr.ok()) return mr.status();
  s.mr = std::move(*mr);
  s.cq = *s.dev->CreateCompletionQueue(64);
  rnic::QpConfig cfg;
  cfg.send_cq = s.cq.get();
  cfg.recv_cq = s.cq.get();
  auto qp = s.dev->CreateQueuePair(cfg);
  if (!qp.ok()) return qp.status();
  s.qp = std::move(*qp);
  SendLine(ctl, absl::StrCat(rnic::EncodeQpAttributes(s.qp->local_attributes()), "|", s.mr->rkey(),
                             "|", s.mr->address()));
  std::vector<std::string> parts = absl::StrSplit(ReadLine(ctl), '|');
  if (parts.size() != 3) return absl::InternalError("bootstrap: bad line from peer");
  auto remote = rnic::DecodeQpAttributes(parts[0]);
  if (!remote.ok()) return remote.status();
  if (!absl::SimpleAtoi(parts[1], peer_rkey) || !absl::SimpleAtoi(parts[2], peer_addr)) {
    return absl::InternalError("bootstrap: bad rkey/address from peer");
  }
  return s.qp->Connect(*remote);
}

rnic::WorkCompletion Next(Side& s) {
  auto wc = rnic::WaitForCompletion(*s.dev, *s.cq, absl::Seconds(10));
  if (!wc.ok()) {
    std::fprintf(stderr, "soft_demo: %s\n", wc.status().ToString().c_str());
    std::exit(1);
  }
  return *wc;
}

int Target(int ctl) {
  Side s;
  uint32_t rkey;
  uint64_t addr;
  if (auto st = Setup(ctl, s, /*progress_thread=*/true, &rkey, &addr); !st.ok()) {
    std::fprintf(stderr, "target: %s\n", st.ToString().c_str());
    return 1;
  }
  s.qp->PostRecv(rnic::MakeRecv(1, s.mr->Sge(4096, 256)));
  s.qp->PostRecv(rnic::MakeRecv(2, s.mr->Sge(8192, 256)));
  for (int i = 0; i < 2; ++i) {
    rnic::WorkCompletion wc = Next(s);
    if (wc.opcode == rnic::WcOpcode::kRecv) {
      std::printf(
          "  [target] RECV %u bytes, imm=%u: \"%.*s\"; the earlier WRITE already "
          "reads \"%s\"\n",
          wc.byte_len, wc.imm, static_cast<int>(wc.byte_len), s.buf.data() + 4096, s.buf.data());
    } else {
      std::printf("  [target] WRITE_WITH_IMM landed: %u bytes, imm=%u, memory now \"%s\"\n",
                  wc.byte_len, wc.imm, s.buf.data() + 65536);
    }
    std::fflush(stdout);
  }
  SendLine(ctl, "ok");
  ReadLine(ctl);  // wait for the initiator to finish the refused write
  bool untouched = true;
  for (size_t i = kBytes - 64; i < kBytes; ++i) untouched &= s.buf[i] == 0;
  std::printf("  [target] last 64 bytes of the region untouched: %s\n", untouched ? "yes" : "NO");
  return untouched ? 0 : 1;
}

int Initiator(int ctl) {
  Side s;
  uint32_t rkey;
  uint64_t addr;
  if (auto st = Setup(ctl, s, /*progress_thread=*/false, &rkey, &addr); !st.ok()) {
    std::fprintf(stderr, "initiator: %s\n", st.ToString().c_str());
    return 1;
  }
  std::printf("soft_demo: initiator %s <-> target (soft RNIC over TCP, two processes)\n",
              s.dev->address().c_str());
  std::strcpy(s.buf.data(), "hello, placed by a one-sided WRITE");
  s.qp->PostSend(rnic::MakeWrite(1, s.mr->Sge(0, 64), addr, rkey));
  std::printf("1. WRITE 64 bytes -> %s\n", rnic::WcStatusName(Next(s).status).data());
  s.qp->PostSend(rnic::MakeRead(2, s.mr->Sge(1024, 64), addr, rkey));
  std::printf("2. READ them back -> %s: \"%s\"\n", rnic::WcStatusName(Next(s).status).data(),
              s.buf.data() + 1024);
  std::strcpy(s.buf.data() + 2048, "a two-sided SEND");
  s.qp->PostSend(rnic::MakeSendWithImm(3, s.mr->Sge(2048, 17), 7));
  std::printf("3. SEND_WITH_IMM -> %s\n", rnic::WcStatusName(Next(s).status).data());
  std::fflush(stdout);
  std::strcpy(s.buf.data() + 3072, "written with an immediate");
  s.qp->PostSend(rnic::MakeWriteWithImm(4, s.mr->Sge(3072, 26), addr + 65536, rkey, 99));
  std::printf("4. WRITE_WITH_IMM -> %s\n", rnic::WcStatusName(Next(s).status).data());
  std::fflush(stdout);
  ReadLine(ctl);
  s.qp->PostSend(rnic::MakeWrite(5, s.mr->Sge(0, 128), addr + kBytes - 64, rkey));
  rnic::WorkCompletion bad = Next(s);
  std::printf(
      "5. WRITE of 128 bytes at 64 bytes before the region's end -> %s "
      "(the target NIC refused it)\n",
      rnic::WcStatusName(bad.status).data());
  std::fflush(stdout);
  SendLine(ctl, "done");
  return bad.status == rnic::WcStatus::kRemoteAccessError ? 0 : 1;
}

}  // namespace
}  // namespace unloadkv

int main(int argc, char** argv) {
  gflags::SetUsageMessage("two processes exchanging RDMA operations over the soft RNIC");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  unloadkv::SetMinLogLevel(unloadkv::LogLevel::kError);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // keep both processes' lines in order
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 1;
  pid_t child = fork();
  if (child == 0) {
    close(sv[0]);
    _exit(unloadkv::Target(sv[1]));
  }
  close(sv[1]);
  int rc = unloadkv::Initiator(sv[0]);
  int status = 0;
  waitpid(child, &status, 0);
  bool ok = rc == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  std::printf("soft_demo: %s\n", ok ? "all steps behaved as RDMA RC specifies" : "FAILED");
  return ok ? 0 : 1;
}
