// Hostile peers against one kvserver with an auth file, as real processes on loopback
// (docs/security.md). Each attack is tried and must be refused with nothing changed: the keys,
// their values and the arena's usage are compared before and after, and the refusal is
// counted in /metrics.
//
//   * no credentials, a wrong secret, an unknown user;
//   * a replayed hello (a legitimate client's line sent again on a new connection);
//   * a client (and an admin) calling the node-to-node methods, and a node user calling them
//     on a single node;
//   * a client over its grant quota; an idle connection past its timeout; a host over its
//     connection cap;
//   * protected mode: no auth file and a non-loopback address refuse to start;
//   * SIGHUP reloads the users: an added one may connect, a removed one no longer.
#include <signal.h>
#include <sys/stat.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "proto/limits.h"
#include "proto/replication.pb.h"
#include "tests/kv/process_harness.h"
#include "tests/kv/raw_connection.h"
#include "tests/support/test_auth.h"
#include "transport/base/logging.h"
#include "transport/base/net.h"
#include "transport/rpc/bootstrap.h"
#include "transport/rpc/handshake.h"

namespace unloadkv {
namespace {

using testing::Output;
using testing::RawConnection;
using testing::RunBinary;
using testing::Sample;
using testing::Scrape;
using testing::ServerProcess;

// What an attack must not change: every key's value and the arena's usage.
struct Snapshot {
  std::vector<std::pair<std::string, std::string>> items;
  uint64_t arena_used = 0;
  uint64_t keys = 0;
  bool operator==(const Snapshot& o) const {
    return items == o.items && arena_used == o.arena_used && keys == o.keys;
  }
};

class SecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetMinLogLevel(LogLevel::kError);
    auth_ = testing::WriteTestAuthFile({"n1"});
  }

  // A kvserver with the auth file and /metrics; `extra` flags win.
  std::unique_ptr<ServerProcess> Start(std::vector<std::string> extra = {}) {
    std::vector<std::string> flags{"--auth_file=" + auth_, "--metrics=127.0.0.1:0"};
    flags.insert(flags.end(), extra.begin(), extra.end());
    auto s = std::make_unique<ServerProcess>(flags);
    EXPECT_FALSE(s->address().empty()) << "kvserver did not start";
    return s;
  }
  rpc::Credentials Creds(const std::string& user) {
    return rpc::Credentials{user, testing::SecretOf(auth_, user)};
  }
  std::unique_ptr<Client> Connect(const ServerProcess& s, const std::string& user) {
    ClientOptions o;
    o.server = s.address();
    o.auth_file = auth_;
    o.user = user;
    auto c = Client::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }
  // Keys written by a legitimate client, so that a wipe or an overwrite would show.
  void Populate(const ServerProcess& s) {
    auto c = Connect(s, testing::kTestClientUser);
    ASSERT_NE(c, nullptr);
    for (int i = 0; i < 50; ++i) {
      ASSERT_TRUE(c->Put(absl::StrCat("key", i), std::string(100 + i, 'a' + i % 26)).ok());
    }
  }
  Snapshot Take(const ServerProcess& s) {
    Snapshot snap;
    auto c = Connect(s, testing::kTestClientUser);
    if (c == nullptr) return snap;
    absl::StatusOr<ScanPage> page = c->Scan("", "", 1000);
    EXPECT_TRUE(page.ok()) << page.status();
    if (page.ok()) snap.items = page->items;
    absl::StatusOr<ServerStats> st = c->Stats();
    EXPECT_TRUE(st.ok()) << st.status();
    if (st.ok()) {
      snap.arena_used = st->arena_used_bytes;
      snap.keys = st->keys;
    }
    return snap;
  }

  std::string auth_;
};

TEST_F(SecurityTest, ConnectionsWithoutTheRightSecretAreRefusedAndChangeNothing) {
  auto s = Start();
  Populate(*s);
  const Snapshot before = Take(*s);
  // No credentials at all: the SDK, kvclient and a raw peer.
  ClientOptions none;
  none.server = s->address();
  absl::Status st = Client::Connect(none).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnauthenticated) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "authentication required")) << st;
  Output cli = testing::Cli(*s, {"get", "key1"});
  EXPECT_EQ(cli.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(cli.err, "authentication required")) << cli.err;
  // A wrong secret, and an unknown user: the same answer, so names cannot be probed.
  const rpc::Credentials wrong{testing::kTestClientUser, "not-the-right-secret-at-all"};
  const rpc::Credentials stranger{"mallory", testing::SecretOf(auth_, testing::kTestClientUser)};
  for (const rpc::Credentials* c : {&wrong, &stranger}) {
    absl::Status refused = RawConnection::Open(s->address(), c).status();
    EXPECT_EQ(refused.code(), absl::StatusCode::kUnauthenticated) << refused;
    EXPECT_TRUE(absl::StrContains(refused.message(), "unknown user or wrong secret")) << refused;
  }
  EXPECT_EQ(Take(*s), before);
  const std::string m = Scrape(s->metrics_address());
  EXPECT_GE(Sample(m, "unloadkv_connections_refused_total{reason=\"auth\"}"), 4) << m;
}

TEST_F(SecurityTest, AReplayedHelloIsRefused) {
  auto s = Start();
  // A legitimate client's hello, as an eavesdropper on the bootstrap connection saw it.
  const rpc::Credentials app = Creds(testing::kTestClientUser);
  std::string recorded;
  absl::StatusOr<std::string> first = rpc::ExchangeOverTcp(
      s->address(),
      [&](absl::string_view challenge) -> absl::StatusOr<std::string> {
        rpc::ClientHandshake h(&app, "transport=soft address=127.0.0.1:1 qp_num=1 psn=1");
        absl::StatusOr<std::string> line = h.HelloFor(challenge);
        if (line.ok()) recorded = *line;
        return line;
      },
      absl::Seconds(5));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(absl::StartsWith(*first, "error ") || absl::StartsWith(*first, "ok ")) << *first;
  EXPECT_FALSE(absl::StrContains(*first, "authentication failed")) << *first;
  // Sent again on a new connection (a new challenge): refused.
  absl::StatusOr<std::string> replay = rpc::ExchangeOverTcp(
      s->address(), [&](absl::string_view) { return absl::StatusOr<std::string>(recorded); },
      absl::Seconds(5));
  ASSERT_TRUE(replay.ok()) << replay.status();
  EXPECT_TRUE(absl::StartsWith(*replay, "error UNAUTHENTICATED authentication failed")) << *replay;
}

TEST_F(SecurityTest, OnlyNodesMayReplicateAndASingleNodeTakesNoReplication) {
  auto s = Start();
  Populate(*s);
  const Snapshot before = Take(*s);
  proto::AttachRequest attach;
  attach.set_shard(0);
  attach.set_epoch(1000);
  attach.set_primary("evil");
  attach.set_arena_bytes(32 << 20);
  proto::ReplicateRequest replicate;
  replicate.set_shard(0);
  replicate.set_epoch(1000);
  proto::ReplicationRecord* r = replicate.add_records();
  r->set_op(proto::ReplicationRecord::DELETE);
  r->set_seq(1);
  r->set_key("key1");
  for (const std::string& user : {std::string(testing::kTestClientUser),
                                  std::string(testing::kTestAdminUser), std::string("n1")}) {
    const rpc::Credentials c = Creds(user);
    auto raw = RawConnection::Open(s->address(), &c);
    ASSERT_TRUE(raw.ok()) << raw.status();
    for (uint32_t shard : {0u, 7u}) {  // the node's shard, and one it does not hold
      attach.set_shard(shard);
      replicate.set_shard(shard);
      absl::Status a = (*raw)->Call(proto::REPLICA_ATTACH, attach).status();
      absl::Status p = (*raw)->Call(proto::REPLICATE, replicate).status();
      for (const absl::Status& st : {a, p}) {
        EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied) << user << ": " << st;
        EXPECT_TRUE(absl::StrContains(st.message(), user == "n1" ? "single node" : "needs node"))
            << st;
      }
    }
  }
  EXPECT_EQ(Take(*s), before);
  const std::string m = Scrape(s->metrics_address());
  EXPECT_EQ(Sample(m, "unloadkv_requests_denied_total{method=\"replica_attach\",reason=\"role\"}"),
            4)
      << m;
  EXPECT_EQ(Sample(m, "unloadkv_requests_denied_total{method=\"replicate\",reason=\"no_cluster\"}"),
            2)
      << m;
  // A node user is no client either.
  const rpc::Credentials node = Creds("n1");
  auto raw = RawConnection::Open(s->address(), &node);
  ASSERT_TRUE(raw.ok());
  EXPECT_EQ((*raw)->Grant(100).status().code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(SecurityTest, AConnectionCannotReserveMoreThanItsGrantQuota) {
  // 1 MiB of a 32 MiB arena per connection: 16 slots of 64 KiB.
  auto s = Start({"--max_grant_bytes_per_connection=1048576"});
  Populate(*s);
  const rpc::Credentials app = Creds(testing::kTestClientUser);
  auto raw = RawConnection::Open(s->address(), &app);
  ASSERT_TRUE(raw.ok()) << raw.status();
  int granted = 0;
  absl::Status refused;
  for (int i = 0; i < 100 && refused.ok(); ++i) {
    absl::StatusOr<proto::SlotGrant> g = (*raw)->Grant(proto::kMaxValueBytes);
    if (g.ok()) {
      ++granted;
    } else {
      refused = g.status();
    }
  }
  EXPECT_EQ(granted, 16);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "--max_grant_bytes_per_connection=1048576"))
      << refused;
  // Another connection still gets its own.
  auto other = RawConnection::Open(s->address(), &app);
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE((*other)->Grant(proto::kMaxValueBytes).ok());
  const std::string m = Scrape(s->metrics_address());
  EXPECT_EQ(Sample(m, "unloadkv_grants_refused_total{reason=\"connection_quota\"}"), 1) << m;
  // When the connection ends, its grants go back to the arena.
  const Snapshot before = Take(*s);
  raw->reset();  // its grants go back to the arena when the server reaps it
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (Take(*s).arena_used >= before.arena_used && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(Take(*s).arena_used, before.arena_used - 16 * proto::kMaxValueBytes);
}

TEST_F(SecurityTest, AnIdleConnectionIsClosedAfterItsTimeoutAndItsGrantsReturned) {
  auto s = Start({"--idle_timeout_s=1"});
  const Snapshot empty = Take(*s);
  const rpc::Credentials app = Creds(testing::kTestClientUser);
  auto idle = RawConnection::Open(s->address(), &app);
  ASSERT_TRUE(idle.ok());
  ASSERT_TRUE((*idle)->Grant(1000).ok());  // holds a slot, then goes quiet
  const absl::Time quiet_since = absl::Now();
  auto busy = RawConnection::Open(s->address(), &app);
  ASSERT_TRUE(busy.ok());
  // The busy one keeps talking; the idle one is closed within a few polls past 1 s.
  absl::Status idle_call;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    ASSERT_TRUE((*busy)->Call(proto::PING, proto::PingRequest()).ok());
    const std::string m = Scrape(s->metrics_address());
    if (Sample(m, "unloadkv_connections_closed_idle_total") >= 1) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_GE(absl::Now() - quiet_since, absl::Seconds(1));
  EXPECT_FALSE((*idle)->Call(proto::PING, proto::PingRequest()).ok());
  EXPECT_TRUE((*busy)->Call(proto::PING, proto::PingRequest()).ok());
  busy->reset();
  EXPECT_EQ(Sample(Scrape(s->metrics_address()), "unloadkv_connections_closed_idle_total"), 1);
  // Its grant went back to the arena.
  EXPECT_EQ(Take(*s).arena_used, empty.arena_used);
}

TEST_F(SecurityTest, AHostOverItsConnectionCapIsRefused) {
  auto s = Start({"--max_connections_per_host=2"});
  const rpc::Credentials app = Creds(testing::kTestClientUser);
  auto a = RawConnection::Open(s->address(), &app);
  auto b = RawConnection::Open(s->address(), &app);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*a)->Call(proto::PING, proto::PingRequest()).ok());
  ASSERT_TRUE((*b)->Call(proto::PING, proto::PingRequest()).ok());
  absl::Status third = RawConnection::Open(s->address(), &app).status();
  EXPECT_EQ(third.code(), absl::StatusCode::kResourceExhausted) << third;
  EXPECT_TRUE(absl::StrContains(third.message(), "--max_connections_per_host=2")) << third;
  EXPECT_EQ(Sample(Scrape(s->metrics_address()),
                   "unloadkv_connections_refused_total{reason=\"host_limit\"}"),
            1);
}

TEST_F(SecurityTest, ProtectedModeRefusesToServeBeyondLoopbackWithoutUsers) {
  Output refused = RunBinary("server/kvserver", {"--listen=0.0.0.0:0", "--metrics="});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(refused.err, "protected mode")) << refused.err;
  EXPECT_TRUE(absl::StrContains(refused.err, "--auth_file")) << refused.err;
  // With users, or explicitly --insecure, it serves (here on any address).
  ServerProcess with_users({"--listen=0.0.0.0:0", "--auth_file=" + auth_});
  EXPECT_FALSE(with_users.address().empty());
  ServerProcess insecure({"--listen=0.0.0.0:0", "--insecure"});
  EXPECT_FALSE(insecure.address().empty());
  // A cluster node needs users too (before it contacts etcd).
  Output cluster = RunBinary("server/kvserver",
                             {"--etcd=127.0.0.1:1", "--cluster=c", "--node=n1", "--metrics="});
  EXPECT_EQ(cluster.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(cluster.err, "cluster mode needs --auth_file")) << cluster.err;
  // A secret file others may read is refused, naming the fix.
  const std::string open_file = auth_ + ".open";
  { std::ofstream(open_file) << "app client 0123456789abcdef0123\n"; }
  chmod(open_file.c_str(), 0644);
  Output world_readable = RunBinary("server/kvserver", {"--auth_file=" + open_file, "--metrics="});
  EXPECT_EQ(world_readable.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(world_readable.err, "chmod 600")) << world_readable.err;
}

TEST_F(SecurityTest, SighupReloadsTheUsers) {
  auto s = std::make_unique<ServerProcess>(
      std::vector<std::string>{"--auth_file=" + auth_, "--metrics="}, /*capture_stderr=*/true);
  ASSERT_FALSE(s->address().empty());
  const rpc::Credentials app = Creds(testing::kTestClientUser);
  ASSERT_TRUE(RawConnection::Open(s->address(), &app).ok());
  // The operator replaces the file: "app" is gone, "newapp" is in.
  const std::string newapp_secret(40, 'n');
  {
    std::ofstream f(auth_, std::ios::trunc);
    f << "newapp client " << newapp_secret << "\n";
  }
  ASSERT_EQ(kill(s->pid(), SIGHUP), 0);
  const rpc::Credentials newapp{"newapp", newapp_secret};
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!RawConnection::Open(s->address(), &newapp).ok() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(RawConnection::Open(s->address(), &newapp).ok());
  EXPECT_FALSE(RawConnection::Open(s->address(), &app).ok());
  // A broken file keeps the users in force, and says so.
  { std::ofstream(auth_, std::ios::trunc) << "broken\n"; }
  ASSERT_EQ(kill(s->pid(), SIGHUP), 0);
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (!absl::StrContains(s->stderr_text(), "kept the previous users") && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(absl::StrContains(s->stderr_text(), "line 1: expected \"NAME ROLE SECRET\""))
      << s->stderr_text();
  EXPECT_TRUE(RawConnection::Open(s->address(), &newapp).ok());
}

}  // namespace
}  // namespace unloadkv
