// The bootstrap line exchange: a normal exchange, a refusal, and the bad-input paths (bad
// address, busy port, an over-long line, a silent peer).
#include "transport/rpc/bootstrap.h"

#include <thread>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace unloadkv::rpc {
namespace {

// Accepts one client, checks its hello, answers `answer`.
void ServeOnce(BootstrapListener* l, std::string answer, std::string* got) {
  absl::StatusOr<ScopedFd> fd = l->Accept(absl::Seconds(5));
  ASSERT_TRUE(fd.ok() && fd->valid());
  absl::StatusOr<std::string> line = ReadLine(fd->get(), kMaxBootstrapLine, absl::Seconds(5));
  ASSERT_TRUE(line.ok()) << line.status();
  *got = *line;
  ASSERT_TRUE(WriteAll(fd->get(), answer, absl::Seconds(5)).ok());
}

TEST(BootstrapTest, ExchangesOneLineEachWay) {
  auto l = BootstrapListener::Listen("127.0.0.1:0");
  ASSERT_TRUE(l.ok()) << l.status();
  std::string got;
  std::thread server(ServeOnce, l->get(), "ok server-info\n", &got);
  absl::StatusOr<std::string> r =
      ExchangeAsClient((*l)->address(), "client-info", absl::Seconds(5));
  server.join();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "server-info");
  EXPECT_EQ(got, "unloadkv/1 client-info");
}

TEST(BootstrapTest, RefusalCarriesTheServersMessage) {
  auto l = BootstrapListener::Listen("127.0.0.1:0");
  ASSERT_TRUE(l.ok());
  std::string got;
  std::thread server(ServeOnce, l->get(), "error too many connections\n", &got);
  absl::StatusOr<std::string> r = ExchangeAsClient((*l)->address(), "x", absl::Seconds(5));
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
