// The event-driven bootstrap acceptor: lines arriving in pieces, many sockets at once, and the
// ways a socket is given up on (deadline, cap, over-long line, early close), each answered
// with an error line and counted. Time is a fake clock, so deadlines need no waiting.
#include "transport/rpc/bootstrap_acceptor.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "transport/rpc/bootstrap.h"
#include "transport/rpc/handshake.h"

namespace unloadkv::rpc {
namespace {

class FakeClock : public Clock {
 public:
  absl::Time Now() const override {
    return absl::FromUnixSeconds(1000) + absl::Nanoseconds(offset_ns_.load());
  }
  void Advance(absl::Duration d) { offset_ns_ += absl::ToInt64Nanoseconds(d); }

 private:
  std::atomic<int64_t> offset_ns_{0};
};

class BootstrapAcceptorTest : public ::testing::Test {
 protected:
  void Start(size_t max_pending) {
    BootstrapAcceptor::Options o;
    o.max_pending = max_pending;
    o.line_deadline = absl::Seconds(2);
    o.clock = &clock_;
    auto a = BootstrapAcceptor::Listen("127.0.0.1:0", o);
    ASSERT_TRUE(a.ok()) << a.status();
    acceptor_ = std::move(*a);
  }
  ScopedFd Connect() {
    absl::StatusOr<ScopedFd> fd = Dial(acceptor_->address(), absl::Seconds(2));
    EXPECT_TRUE(fd.ok()) << fd.status();
    return std::move(*fd);
  }
  // Polls until `want` hellos completed or 2 s of real time passed.
  std::vector<BootstrapAcceptor::Hello> PollFor(size_t want) {
    std::vector<BootstrapAcceptor::Hello> got;
    const absl::Time deadline = absl::Now() + absl::Seconds(2);
    while (got.size() < want && absl::Now() < deadline) {
      for (auto& h : acceptor_->Poll(absl::Milliseconds(10))) got.push_back(std::move(h));
    }
    return got;
  }
  // The line the acceptor answered on `fd` after its challenge (empty if none within 2 s).
  static std::string AnswerOn(int fd) {
    absl::StatusOr<std::string> line = ReadLine(fd, kMaxBootstrapLine, absl::Seconds(2));
    if (line.ok() && DecodeChallenge(*line).ok()) {
      line = ReadLine(fd, kMaxBootstrapLine, absl::Seconds(2));
    }
    return line.ok() ? *line : "";
  }
  // The nonce of the challenge the acceptor sent on `fd` first.
  static std::string ChallengeOn(int fd) {
    absl::StatusOr<std::string> line = ReadLine(fd, kMaxBootstrapLine, absl::Seconds(2));
    absl::StatusOr<std::string> nonce = line.ok() ? DecodeChallenge(*line) : line.status();
    return nonce.ok() ? *nonce : "";
  }

  FakeClock clock_;
  std::unique_ptr<BootstrapAcceptor> acceptor_;
};

TEST_F(BootstrapAcceptorTest, CompletesLinesSentInPiecesAndReportsTheirAddresses) {
  Start(8);
  ScopedFd a = Connect(), b = Connect();
  ASSERT_TRUE(WriteAll(a.get(), "unloadkv/1 par", absl::Seconds(1)).ok());
  for (int i = 0; i < 10; ++i) {
    EXPECT_TRUE(acceptor_->Poll(absl::Milliseconds(10)).empty()) << "a partial line completed";
  }
  ASSERT_TRUE(WriteAll(b.get(), "second\n", absl::Seconds(1)).ok());
  ASSERT_TRUE(WriteAll(a.get(), "tial\n", absl::Seconds(1)).ok());
  std::vector<BootstrapAcceptor::Hello> got = PollFor(2);
  ASSERT_EQ(got.size(), 2u);
  std::vector<std::string> lines = {got[0].line, got[1].line};
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines[0], "second");
  EXPECT_EQ(lines[1], "unloadkv/1 partial");
  EXPECT_EQ(got[0].peer_host, "127.0.0.1");
  EXPECT_EQ(got[0].local_host, "127.0.0.1");
  EXPECT_EQ(acceptor_->pending(), 0u);
  // Each connection was challenged with a nonce of its own, which its Hello carries.
  const std::string ca = ChallengeOn(a.get()), cb = ChallengeOn(b.get());
  EXPECT_EQ(ca.size(), kNonceHexDigits);
  EXPECT_NE(ca, cb);
  const BootstrapAcceptor::Hello& ha = got[0].line == "second" ? got[1] : got[0];
  const BootstrapAcceptor::Hello& hb = got[0].line == "second" ? got[0] : got[1];
  EXPECT_EQ(ha.challenge, ca);
  EXPECT_EQ(hb.challenge, cb);
  ASSERT_TRUE(AnswerNow(got[0].fd.get(), "ok - fine").ok());
}

TEST_F(BootstrapAcceptorTest, ALateLineIsAnsweredAndDroppedAtItsDeadline) {
  Start(8);
  ScopedFd silent = Connect();
  ScopedFd slow = Connect();
  ASSERT_TRUE(WriteAll(slow.get(), "unloadkv/1 x", absl::Seconds(1)).ok());
  for (int i = 0; i < 20 && acceptor_->pending() < 2; ++i) acceptor_->Poll(absl::Milliseconds(10));
  ASSERT_EQ(acceptor_->pending(), 2u);
  clock_.Advance(absl::Milliseconds(1999));
  acceptor_->Poll(absl::ZeroDuration());
  EXPECT_EQ(acceptor_->pending(), 2u);
  clock_.Advance(absl::Milliseconds(1));
  acceptor_->Poll(absl::ZeroDuration());
  EXPECT_EQ(acceptor_->pending(), 0u);
  EXPECT_EQ(acceptor_->counters().timed_out, 2u);
  EXPECT_TRUE(absl::StartsWith(AnswerOn(silent.get()), "error bootstrap: no complete hello"));
  EXPECT_TRUE(absl::StartsWith(AnswerOn(slow.get()), "error bootstrap: no complete hello"));
}

TEST_F(BootstrapAcceptorTest, AtTheCapTheOldestSilentSocketIsClosedToMakeRoom) {
  Start(3);
  std::vector<ScopedFd> fds;
  fds.push_back(Connect());
  ASSERT_TRUE(WriteAll(fds[0].get(), "unloadkv/1 on its way", absl::Seconds(1)).ok());
  for (int i = 0; i < 50 && acceptor_->pending() < 1; ++i) acceptor_->Poll(absl::Milliseconds(10));
  for (int i = 1; i < 3; ++i) fds.push_back(Connect());
  for (int i = 0; i < 50 && acceptor_->pending() < 3; ++i) acceptor_->Poll(absl::Milliseconds(10));
  ASSERT_EQ(acceptor_->pending(), 3u);
  ScopedFd newest = Connect();
  for (int i = 0; i < 50 && acceptor_->counters().evicted == 0; ++i) {
    acceptor_->Poll(absl::Milliseconds(10));
  }
  EXPECT_EQ(acceptor_->counters().evicted, 1u);
  EXPECT_EQ(acceptor_->pending(), 3u);
  // fds[0] sent part of a line: the oldest silent one, fds[1], made room.
  EXPECT_TRUE(absl::StrContains(AnswerOn(fds[1].get()), "server busy"));
  ASSERT_TRUE(WriteAll(fds[0].get(), "\n", absl::Seconds(1)).ok());
  std::vector<BootstrapAcceptor::Hello> first = PollFor(1);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].line, "unloadkv/1 on its way");
  // The newest still gets through.
  ASSERT_TRUE(WriteAll(newest.get(), "hello\n", absl::Seconds(1)).ok());
  std::vector<BootstrapAcceptor::Hello> got = PollFor(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].line, "hello");
}

TEST_F(BootstrapAcceptorTest, OverlongLinesAndEarlyClosesAreGivenUp) {
  Start(8);
  ScopedFd longer = Connect();
  ScopedFd closer = Connect();
  ASSERT_TRUE(
      WriteAll(longer.get(), std::string(kMaxBootstrapLine + 10, 'x'), absl::Seconds(1)).ok());
  closer = ScopedFd();
  for (int i = 0; i < 100; ++i) {
    acceptor_->Poll(absl::Milliseconds(10));
    if (acceptor_->counters().too_long == 1 && acceptor_->counters().closed == 1) break;
  }
  EXPECT_EQ(acceptor_->counters().too_long, 1u);
  EXPECT_EQ(acceptor_->counters().closed, 1u);
  EXPECT_EQ(acceptor_->pending(), 0u);
  EXPECT_TRUE(absl::StrContains(AnswerOn(longer.get()), "line longer than"));
}

}  // namespace
}  // namespace unloadkv::rpc
