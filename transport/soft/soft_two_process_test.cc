// The soft RNIC between two real processes: placement, READ, SEND/RECV across the process
// boundary, and a peer killed with SIGKILL in the middle of a transfer.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "transport/base/logging.h"
#include "transport/rnic/wait.h"
#include "transport/soft/soft_device.h"

namespace unloadkv::soft {
namespace {

uint64_t Fnv1a(const char* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<uint8_t>(p[i])) * 1099511628211ull;
  return h;
}

// A soft_peer child process connected through pipes.
class Peer {
 public:
  bool Start() {
    int to_child[2], from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) return false;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(to_child[0], 0);
      dup2(from_child[1], 1);
      close(to_child[1]);
      close(from_child[0]);
      execl("transport/soft/soft_peer", "soft_peer", nullptr);
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    in_ = fdopen(from_child[0], "r");
    out_ = fdopen(to_child[1], "w");
    return pid_ > 0;
  }
  std::string ReadLine() {
    char line[2048];
    if (fgets(line, sizeof(line), in_) == nullptr) return "";
    std::string s(line);
    if (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }
  void WriteLine(const std::string& s) {
    fprintf(out_, "%s\n", s.c_str());
    fflush(out_);
  }
  void Kill() {
    if (pid_ > 0) kill(pid_, SIGKILL);
  }
  int Wait() {
    int status = 0;
    if (pid_ > 0) waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }
  ~Peer() {
    Kill();
    Wait();
    if (in_) fclose(in_);
    if (out_) fclose(out_);
  }

 private:
  pid_t pid_ = -1;
  FILE* in_ = nullptr;
  FILE* out_ = nullptr;
};

class TwoProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetMinLogLevel(LogLevel::kError);
    ASSERT_TRUE(peer_.Start());
    std::vector<std::string> parts = absl::StrSplit(peer_.ReadLine(), '|');
    ASSERT_EQ(parts.size(), 3u) << "peer did not start";
    auto attrs = rnic::DecodeQpAttributes(parts[0]);
    ASSERT_TRUE(attrs.ok()) << attrs.status();
    ASSERT_TRUE(absl::SimpleAtoi(parts[1], &peer_rkey_));
    ASSERT_TRUE(absl::SimpleAtoi(parts[2], &peer_addr_));
    auto dev = SoftDevice::Create({});  // caller-driven: progress happens as we poll
    ASSERT_TRUE(dev.ok());
    dev_ = std::move(*dev);
    buffer_.assign(64 << 20, 0);
    mr_ = *dev_->RegisterMemory(buffer_.data(), buffer_.size(),
                                rnic::kLocalWrite | rnic::kRemoteWrite | rnic::kRemoteRead);
    cq_ = *dev_->CreateCompletionQueue(64);
    rnic::QpConfig cfg;
    cfg.send_cq = cq_.get();
    cfg.recv_cq = cq_.get();
    qp_ = *dev_->CreateQueuePair(cfg);
    peer_.WriteLine(rnic::EncodeQpAttributes(qp_->local_attributes()));
    ASSERT_TRUE(qp_->Connect(*attrs).ok());
  }

  // SENDs `request` and returns the peer's reply. Completions of other requests that arrive
  // meanwhile are appended to `others`, in arrival order.
  std::string Ask(const std::string& request, std::vector<rnic::WorkCompletion>* others = nullptr) {
    constexpr size_t kRecvOff = 60 << 20, kSendOff = 61 << 20;
    EXPECT_TRUE(qp_->PostRecv(rnic::MakeRecv(100, mr_->Sge(kRecvOff, 4096))).ok());
    std::memcpy(&buffer_[kSendOff], request.data(), request.size());
    EXPECT_TRUE(qp_->PostSend(rnic::MakeSend(101, mr_->Sge(kSendOff, request.size()))).ok());
    std::string reply;
    bool got_reply = false, sent = false;
    while (!got_reply || !sent) {
      auto wc = rnic::WaitForCompletion(*dev_, *cq_, absl::Seconds(20));
      EXPECT_TRUE(wc.ok()) << wc.status();
      if (!wc.ok()) return "";
      EXPECT_EQ(wc->status, rnic::WcStatus::kSuccess) << wc->DebugString();
      if (wc->wr_id == 100) {
        reply.assign(&buffer_[kRecvOff], wc->byte_len);
        got_reply = true;
      } else if (wc->wr_id == 101) {
        sent = true;
      } else if (others != nullptr) {
        EXPECT_FALSE(sent) << "completion " << wc->wr_id << " after a later SEND's";
        others->push_back(*wc);
      }
    }
    return reply;
  }

  Peer peer_;
  uint32_t peer_rkey_ = 0;
  uint64_t peer_addr_ = 0;
  std::unique_ptr<SoftDevice> dev_;
  std::vector<char> buffer_;
  std::unique_ptr<rnic::MemoryRegion> mr_;
  std::unique_ptr<rnic::CompletionQueue> cq_;
  std::unique_ptr<rnic::QueuePair> qp_;
};

TEST_F(TwoProcessTest, WritesReadsAndSendsCrossTheProcessBoundary) {
  EXPECT_EQ(Ask("echo hello"), "hello");
  const size_t kLen = 3 << 20;
  for (size_t i = 0; i < kLen; ++i) buffer_[i] = static_cast<char>(i * 31 + 7);
  ASSERT_TRUE(
      qp_->PostSend(rnic::MakeWrite(1, mr_->Sge(0, kLen), peer_addr_ + 4096, peer_rkey_)).ok());
  // No wait for the WRITE's completion: the SEND after it must see the bytes in place.
  std::vector<rnic::WorkCompletion> others;
  EXPECT_EQ(Ask(absl::StrCat("sum 4096 ", kLen), &others),
            absl::StrCat(Fnv1a(buffer_.data(), kLen)));
  ASSERT_EQ(others.size(), 1u);
  EXPECT_EQ(others[0].wr_id, 1u);
  absl::StatusOr<rnic::WorkCompletion> wc;
  // READ it back.
  ASSERT_TRUE(
      qp_->PostSend(rnic::MakeRead(2, mr_->Sge(8 << 20, kLen), peer_addr_ + 4096, peer_rkey_))
          .ok());
  wc = rnic::WaitForCompletion(*dev_, *cq_, absl::Seconds(20));
  ASSERT_TRUE(wc.ok() && wc->status == rnic::WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(&buffer_[8 << 20], buffer_.data(), kLen), 0);
  // Out-of-bounds WRITE into the other process is refused there.
  ASSERT_TRUE(
      qp_->PostSend(rnic::MakeWrite(3, mr_->Sge(0, 64), peer_addr_ + (64 << 20) - 32, peer_rkey_))
          .ok());
  wc = rnic::WaitForCompletion(*dev_, *cq_, absl::Seconds(20));
  ASSERT_TRUE(wc.ok());
  EXPECT_EQ(wc->status, rnic::WcStatus::kRemoteAccessError);
}

TEST_F(TwoProcessTest, PeerKilledMidTransferFailsOutstandingWorkWithoutHanging) {
  // The paused peer's NIC stops, so none of the 64 MiB of writes can be acknowledged.
  EXPECT_EQ(Ask("pause"), "paused");
  constexpr int kWrites = 16;
  for (int i = 0; i < kWrites; ++i) {
    ASSERT_TRUE(
        qp_->PostSend(rnic::MakeWrite(i, mr_->Sge(0, 4 << 20), peer_addr_, peer_rkey_)).ok());
  }
  peer_.Kill();
  for (int i = 0; i < kWrites; ++i) {
    auto wc = rnic::WaitForCompletion(*dev_, *cq_, absl::Seconds(20));
    ASSERT_TRUE(wc.ok()) << "hang after peer death: " << wc.status();
    EXPECT_EQ(wc->wr_id, static_cast<uint64_t>(i));
    EXPECT_EQ(wc->status, i == 0 ? rnic::WcStatus::kRetryExceeded : rnic::WcStatus::kFlushed)
        << wc->DebugString();
  }
  EXPECT_EQ(qp_->state(), rnic::QpState::kError);
  int status = peer_.Wait();
  EXPECT_TRUE(WIFSIGNALED(status));
}

}  // namespace
}  // namespace unloadkv::soft
