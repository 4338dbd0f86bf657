// The bootstrap exchange over TCP: an authenticated exchange, a wrong secret, a refusal, and
// the bad-input paths (bad address, busy port, an over-long line, a silent peer).
#include "transport/rpc/bootstrap.h"

#include <thread>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace unloadkv::rpc {
namespace {

// Accepts one client, challenges it, checks its hello against `table` (nullable) and answers
// with `server_info`, or with `refusal` when that is set.
void ServeOnce(BootstrapListener* l, const AuthTable* table, std::string server_info,
               std::string refusal, std::string* got_info) {
  absl::StatusOr<ScopedFd> fd = l->Accept(absl::Seconds(5));
  ASSERT_TRUE(fd.ok() && fd->valid());
  const std::string challenge = NewNonce();
  ASSERT_TRUE(WriteAll(fd->get(), EncodeChallenge(challenge) + "\n", absl::Seconds(5)).ok());
  absl::StatusOr<std::string> line = ReadLine(fd->get(), kMaxBootstrapLine, absl::Seconds(5));
  ASSERT_TRUE(line.ok()) << line.status();
  ServerHandshake hs(challenge);
  absl::Status st = hs.Verify(*line, table);
  *got_info = hs.client_info();
  AnswerLine refused;
  refused.code = st.code();
  refused.text = std::string(st.message());
  const std::string answer = !refusal.empty() ? "error " + refusal
                             : st.ok()        ? hs.Accept(server_info)
                                              : EncodeAnswer(refused);
  ASSERT_TRUE(WriteAll(fd->get(), answer + "\n", absl::Seconds(5)).ok());
}

TEST(BootstrapTest, AuthenticatedExchangeOverTcp) {
  auto l = BootstrapListener::Listen("127.0.0.1:0");
  ASSERT_TRUE(l.ok()) << l.status();
  const AuthTable table = *AuthTable::Parse("app client 0123456789abcdef0123", "t");
  const Credentials creds{"app", "0123456789abcdef0123"};
  std::string got;
  std::thread server(ServeOnce, l->get(), &table, "server-info", "", &got);
  absl::StatusOr<Session> s =
      Bootstrap(nullptr, (*l)->address(), &creds, "client-info", absl::Seconds(5));
  server.join();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->remote_info, "server-info");
  EXPECT_EQ(s->token.size(), kStreamTokenBytes);
  EXPECT_EQ(got, "client-info");
}

TEST(BootstrapTest, AWrongSecretIsRefusedWithTheServersMessage) {
  auto l = BootstrapListener::Listen("127.0.0.1:0");
  ASSERT_TRUE(l.ok());
  const AuthTable table = *AuthTable::Parse("app client 0123456789abcdef0123", "t");
  const Credentials wrong{"app", "not-the-secret-at-all"};
  std::string got;
  std::thread server(ServeOnce, l->get(), &table, "server-info", "", &got);
  absl::StatusOr<Session> s = Bootstrap(nullptr, (*l)->address(), &wrong, "x", absl::Seconds(5));
  server.join();
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(absl::StrContains(s.status().message(), "authentication failed")) << s.status();
}

TEST(BootstrapTest, RefusalCarriesTheServersMessage) {
  auto l = BootstrapListener::Listen("127.0.0.1:0");
  ASSERT_TRUE(l.ok());
  std::string got;
  std::thread server(ServeOnce, l->get(), nullptr, "", "too many connections", &got);
  absl::StatusOr<Session> r = Bootstrap(nullptr, (*l)->address(), nullptr, "x", absl::Seconds(5));
  server.join();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "too many connections"));
}

TEST(BootstrapTest, BadAddressesAndBusyPortAreClearErrors) {
  EXPECT_EQ(BootstrapListener::Listen("nohost:1").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BootstrapListener::Listen("127.0.0.1").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BootstrapListener::Listen("127.0.0.1:70000").status().code(),
            absl::StatusCode::kInvalidArgument);
  auto l = BootstrapListener::Listen("127.0.0.1:0");
  ASSERT_TRUE(l.ok());
  absl::Status busy = BootstrapListener::Listen((*l)->address()).status();
  EXPECT_TRUE(absl::StrContains(busy.message(), "port in use")) << busy;
  EXPECT_EQ(Dial("127.0.0.1:0", absl::Seconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(BootstrapTest, OverlongLineAndSilentPeerAreRefused) {
  auto l = BootstrapListener::Listen("127.0.0.1:0");
  ASSERT_TRUE(l.ok());
  absl::StatusOr<ScopedFd> c = Dial((*l)->address(), absl::Seconds(5));
  ASSERT_TRUE(c.ok());
  absl::StatusOr<ScopedFd> s = (*l)->Accept(absl::Seconds(5));
  ASSERT_TRUE(s.ok() && s->valid());
  // Silent: nothing written yet.
  EXPECT_EQ(ReadLine(s->get(), 64, absl::Milliseconds(50)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(WriteAll(c->get(), std::string(100, 'a') + "\n", absl::Seconds(1)).ok());
  EXPECT_EQ(ReadLine(s->get(), 64, absl::Seconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Nothing pending: Accept returns an invalid fd after the wait, not an error.
  absl::StatusOr<ScopedFd> none = (*l)->Accept(absl::Milliseconds(10));
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->valid());
}

}  // namespace
}  // namespace unloadkv::rpc
