// Hostile peers against a replicated cluster (a real etcd, kvserver processes with an auth
// file; docs/security.md). The node-to-node methods are tried by everyone who must not use
// them: a client, an admin, a peer without the node secret, a node that is not the shard's
// primary (at the map's epoch and at a future one), the primary's name for a shard the map
// does not place there, and a rogue node that joins without the cluster's node secret. Each is
// refused; the map, every node's epoch and every acknowledged key are the same afterwards,
// which a failover onto the attacked backup then proves (a wiped backup would lose them).
#include <signal.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "proto/replication.pb.h"
#include "tests/kv/process_harness.h"
#include "tests/kv/raw_connection.h"
#include "tests/support/etcd_process.h"
#include "tests/support/test_auth.h"
#include "transport/base/logging.h"
#include "transport/cluster/etcd_cluster_map.h"

namespace unloadkv {
namespace {

using cluster::ClusterView;
using cluster::ShardInfo;
using testing::RawConnection;
using testing::Sample;
using testing::Scrape;
using testing::ServerProcess;

constexpr int kKeys = 40;

class ClusterSecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetMinLogLevel(LogLevel::kError);
    auto etcd = testing::EtcdProcess::Start();
    if (!etcd.ok()) GTEST_SKIP() << etcd.status().message();
    etcd_ = std::move(*etcd);
    auth_ = testing::WriteTestAuthFile({"n1", "n2", "n3"});
    cluster_ = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    auto map = cluster::EtcdClusterMap::Open(etcd_->endpoint(), cluster_);
    ASSERT_TRUE(map.ok());
    map_ = std::move(*map);
  }
  void TearDown() override {
    for (auto& [name, n] : nodes_) {
      if (n->pid() > 0) n->Kill();
    }
  }

  void StartNode(const std::string& name, const std::string& auth_file,
                 std::vector<std::string> extra = {}) {
    std::vector<std::string> flags{
        "--etcd=" + etcd_->endpoint(), "--cluster=" + cluster_, "--node=" + name,
        "--auth_file=" + auth_file,    "--lease_ttl_s=2",       "--metrics=127.0.0.1:0"};
    flags.insert(flags.end(), extra.begin(), extra.end());
    nodes_[name] = std::make_unique<ServerProcess>(flags, /*capture_stderr=*/true);
    ASSERT_FALSE(nodes_[name]->address().empty()) << name << " did not start";
  }
  ShardInfo Shard() {
    absl::StatusOr<ClusterView> v = map_->Read();
    return v.ok() && !v->shard_list.empty() ? v->shard_list[0] : ShardInfo{};
  }
  // Until the shard has a live primary, `backups` backups and nobody joining (bounded).
  bool WaitServing(size_t backups) {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (absl::Now() < deadline) {
      absl::StatusOr<ClusterView> v = map_->Read();
      if (v.ok() && !v->shard_list.empty()) {
        const ShardInfo& s = v->shard_list[0];
        if (v->IsLive(s.primary) && s.backups.size() == backups && s.joining.empty()) return true;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return false;
  }
  std::unique_ptr<Client> ClusterClient() {
    ClientOptions o;
    o.etcd = etcd_->endpoint();
    o.cluster = cluster_;
    o.auth_file = auth_;
    o.user = testing::kTestClientUser;
    o.failover_timeout = absl::Seconds(20);
    auto c = Client::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }
  void Populate() {
    auto c = ClusterClient();
    ASSERT_NE(c, nullptr);
    for (int i = 0; i < kKeys; ++i) {
      ASSERT_TRUE(c->Put(absl::StrCat("key", i), absl::StrCat("value", i)).ok());
    }
  }
  void ExpectEveryKey() {
    auto c = ClusterClient();
    ASSERT_NE(c, nullptr);
    for (int i = 0; i < kKeys; ++i) {
      absl::StatusOr<std::string> v = c->Get(absl::StrCat("key", i));
      ASSERT_TRUE(v.ok()) << "key" << i << ": " << v.status();
      EXPECT_EQ(*v, absl::StrCat("value", i));
    }
  }
  rpc::Credentials Creds(const std::string& user) {
    return rpc::Credentials{user, testing::SecretOf(auth_, user)};
  }
  double Metric(const std::string& node, const std::string& series) {
    return Sample(Scrape(nodes_.at(node)->metrics_address()), series);
  }
  // Waits (bounded) until `node`'s stderr holds `text`.
  bool AwaitLog(const std::string& node, const std::string& text) {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (absl::Now() < deadline) {
      if (absl::StrContains(nodes_.at(node)->stderr_text(), text)) return true;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return false;
  }

  std::unique_ptr<testing::EtcdProcess> etcd_;
  std::string auth_;
  std::string cluster_;
  std::unique_ptr<cluster::EtcdClusterMap> map_;
  std::map<std::string, std::unique_ptr<ServerProcess>> nodes_;
};

proto::AttachRequest Attach(uint32_t shard, uint64_t epoch) {
  proto::AttachRequest a;
  a.set_shard(shard);
  a.set_epoch(epoch);
  a.set_primary("whoever");
  a.set_arena_bytes(32 << 20);
  return a;
}

proto::ReplicateRequest DeleteRecord(uint32_t shard, uint64_t epoch, const std::string& key) {
  proto::ReplicateRequest r;
  r.set_shard(shard);
  r.set_epoch(epoch);
  proto::ReplicationRecord* rec = r.add_records();
  rec->set_op(proto::ReplicationRecord::DELETE);
  rec->set_seq(1);
  rec->set_key(key);
  return r;
}

// Memory protection across shards: a node that holds two shards' arenas admits a client's
// writes into one shard only through that client's own grants there, on both paths: its own
// window key of the other shard, or another client's key of this one, write nothing.
TEST_F(ClusterSecurityTest, AGrantOfOneShardWritesNothingIntoAnotherShardsArena) {
  ASSERT_TRUE(map_->Create(1, *cluster::InitialShards(2, {})).ok());
  StartNode("n1", auth_);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  auto both_served = [&] {
    absl::StatusOr<ClusterView> v = map_->Read();
    if (!v.ok() || v->shard_list.size() != 2) return false;
    for (const ShardInfo& s : v->shard_list) {
      if (!v->IsLive(s.primary)) return false;
    }
    return true;
  };
  while (!both_served() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
  ASSERT_TRUE(both_served());
  const rpc::Credentials creds = Creds(testing::kTestClientUser);
  auto victim = RawConnection::Open(nodes_.at("n1")->address(), &creds);
  ASSERT_TRUE(victim.ok()) << victim.status();
  absl::StatusOr<proto::SlotGrant> theirs = (*victim)->Grant(128, /*shard=*/1);
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  ASSERT_TRUE((*victim)->WriteValue(*theirs, "shard-one-value").ok());
  for (engine::Path path : {engine::Path::kOffload, engine::Path::kUnload}) {
    SCOPED_TRACE(engine::PathName(path));
    for (bool own_key : {true, false}) {
      auto attacker = RawConnection::Open(nodes_.at("n1")->address(), &creds, path);
      ASSERT_TRUE(attacker.ok()) << attacker.status();
      absl::StatusOr<proto::SlotGrant> mine = (*attacker)->Grant(128, /*shard=*/0);
      ASSERT_TRUE(mine.ok()) << mine.status();
      const uint32_t key = own_key ? mine->rkey() : theirs->rkey();
      absl::StatusOr<engine::WriteResult> r = (*attacker)->WriteRaw(theirs->addr(), key, "EVIL");
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->status, rnic::WcStatus::kRemoteAccessError) << rnic::WcStatusName(r->status);
      EXPECT_EQ(r->path, path);
    }
  }
  // The victim's slot still holds its bytes: published, they read back.
  const std::string key = "\xc0victim";  // shard 1 of 2: keys from byte 0x80 on
  // A PUT naming the grant as one of shard 0 (a client whose map is older than a split) is
  // refused and spends nothing: the grant then publishes under its own shard.
  const absl::Status wrong = (*victim)->Put(key, theirs->grant_id(), 15, 0, /*shard=*/0);
  EXPECT_EQ(wrong.code(), absl::StatusCode::kAborted) << wrong;
  EXPECT_NE(wrong.message().find("the key is in shard 1, not in shard 0"), std::string::npos)
      << wrong;
  ASSERT_TRUE((*victim)->Put(key, theirs->grant_id(), 15, 0, /*shard=*/1).ok());
  proto::GetRequest get;
  get.set_key(key);
  absl::StatusOr<std::string> raw = (*victim)->Call(proto::GET, get);
  ASSERT_TRUE(raw.ok()) << raw.status();
  proto::GetResponse resp;
  ASSERT_TRUE(resp.ParseFromString(*raw));
  EXPECT_EQ(resp.value(), "shard-one-value");
}

TEST_F(ClusterSecurityTest, NodeRequestsAreServedOnlyFromTheMapsPrimary) {
  ASSERT_TRUE(map_->Create(3, *cluster::InitialShards(1, {})).ok());
  for (const char* n : {"n1", "n2", "n3"}) StartNode(n, auth_);
  ASSERT_TRUE(WaitServing(2));
  Populate();
  const ShardInfo before = Shard();
  const std::string primary = before.primary;
  const std::string victim = before.backups[0];  // takes over first when the primary dies
  const std::string other = before.backups[1];
  std::map<std::string, double> epochs;
  for (const auto& [name, n] : nodes_) {
    epochs[name] = Metric(name, "unloadkv_shard_epoch{shard=\"0\"}");
  }
  const std::string address = nodes_.at(victim)->address();
  const uint64_t epoch = before.epoch;
  // The primary's arena usage: a backup mirrors its layout, so the attacked backup must show
  // the same once it is primary. Read once the populating client is gone (its unused grants
  // count until the server reaps its connection).
  const absl::Time reaped = absl::Now() + absl::Seconds(10);
  while (Metric(primary, "unloadkv_connections") != 0 && absl::Now() < reaped) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(Metric(primary, "unloadkv_connections"), 0);
  const double arena_used = Metric(primary, "unloadkv_arena_used_bytes");
  ASSERT_GT(arena_used, 0);

  // Users that are not nodes.
  for (const char* user : {testing::kTestClientUser, testing::kTestAdminUser}) {
    const rpc::Credentials c = Creds(user);
    auto raw = RawConnection::Open(address, &c);
    ASSERT_TRUE(raw.ok()) << raw.status();
    for (uint64_t e : {epoch, epoch + 1}) {
      absl::Status a = (*raw)->Call(proto::REPLICA_ATTACH, Attach(0, e)).status();
      EXPECT_EQ(a.code(), absl::StatusCode::kPermissionDenied) << user << ": " << a;
      absl::Status r = (*raw)->Call(proto::REPLICATE, DeleteRecord(0, e, "key1")).status();
      EXPECT_EQ(r.code(), absl::StatusCode::kPermissionDenied) << user << ": " << r;
    }
  }
  // Peers that do not hold a node secret: refused before any request.
  const rpc::Credentials forged{other, "a-secret-guessed-by-the-attacker"};
  EXPECT_FALSE(RawConnection::Open(address, &forged).ok());
  EXPECT_FALSE(RawConnection::Open(address, nullptr).ok());
  // A node that is not the shard's primary, at the map's epoch and at a future one.
  {
    const rpc::Credentials c = Creds(other);
    auto raw = RawConnection::Open(address, &c);
    ASSERT_TRUE(raw.ok()) << raw.status();
    for (uint64_t e : {epoch, epoch + 1, epoch + 100}) {
      absl::Status a = (*raw)->Call(proto::REPLICA_ATTACH, Attach(0, e)).status();
      EXPECT_EQ(a.code(), absl::StatusCode::kPermissionDenied) << a;
      EXPECT_TRUE(absl::StrContains(a.message(), "is not shard 0's primary")) << a;
      absl::Status r = (*raw)->Call(proto::REPLICATE, DeleteRecord(0, e, "key1")).status();
      EXPECT_EQ(r.code(), absl::StatusCode::kPermissionDenied) << r;
    }
  }
  // The primary's own name, on a connection of its own: a future epoch, a shard the map does
  // not have (which would map a new arena), and records outside the link it attached on.
  {
    const rpc::Credentials c = Creds(primary);
    auto raw = RawConnection::Open(address, &c);
    ASSERT_TRUE(raw.ok()) << raw.status();
    absl::Status future = (*raw)->Call(proto::REPLICA_ATTACH, Attach(0, epoch + 1)).status();
    EXPECT_EQ(future.code(), absl::StatusCode::kPermissionDenied) << future;
    absl::Status unplaced = (*raw)->Call(proto::REPLICA_ATTACH, Attach(99, epoch)).status();
    EXPECT_EQ(unplaced.code(), absl::StatusCode::kPermissionDenied) << unplaced;
    EXPECT_TRUE(absl::StrContains(unplaced.message(), "not in the cluster map")) << unplaced;
    absl::Status stray = (*raw)->Call(proto::REPLICATE, DeleteRecord(0, epoch, "key1")).status();
    EXPECT_EQ(stray.code(), absl::StatusCode::kAborted) << stray;
  }

  // A cluster client without the secret is told so at once, not after retrying for its
  // failover timeout (the retries would end UNAVAILABLE).
  {
    ClientOptions o;
    o.etcd = etcd_->endpoint();
    o.cluster = cluster_;
    auto c = Client::Connect(o);
    ASSERT_TRUE(c.ok()) << c.status();
    absl::Status put = (*c)->Put("intruder", "x");
    EXPECT_EQ(put.code(), absl::StatusCode::kUnauthenticated) << put;
    EXPECT_TRUE(absl::StrContains(put.message(), "authentication required")) << put;
  }

  // Nothing changed: the map, the epochs, no replica of shard 99 anywhere.
  const ShardInfo after = Shard();
  EXPECT_EQ(after.epoch, before.epoch);
  EXPECT_EQ(after.primary, before.primary);
  EXPECT_EQ(after.backups, before.backups);
  EXPECT_EQ(after.joining, before.joining);
  for (const auto& [name, n] : nodes_) {
    EXPECT_EQ(Metric(name, "unloadkv_shard_epoch{shard=\"0\"}"), epochs[name]) << name;
    EXPECT_EQ(Metric(name, "unloadkv_shard_epoch{shard=\"99\"}"), -1) << name;
  }
  const std::string m = Scrape(nodes_.at(victim)->metrics_address());
  EXPECT_EQ(Sample(m, "unloadkv_requests_denied_total{method=\"replica_attach\",reason=\"role\"}"),
            4)
      << m;
  EXPECT_EQ(
      Sample(m, "unloadkv_requests_denied_total{method=\"replica_attach\",reason=\"not_primary\"}"),
      4)
      << m;
  EXPECT_EQ(
      Sample(m, "unloadkv_requests_denied_total{method=\"replica_attach\",reason=\"not_placed\"}"),
      1)
      << m;
  EXPECT_GE(Sample(m, "unloadkv_connections_refused_total{reason=\"auth\"}"), 2) << m;
  EXPECT_TRUE(absl::StrContains(nodes_.at(victim)->stderr_text(), "denied REPLICA_ATTACH from"));
  // The attacked backup still holds everything: the primary dies, it takes over and serves.
  nodes_.at(primary)->Kill();
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (Shard().primary != victim && absl::Now() < deadline)
    absl::SleepFor(absl::Milliseconds(20));
  ASSERT_EQ(Shard().primary, victim);
  ExpectEveryKey();
  const absl::Time gauges = absl::Now() + absl::Seconds(5);
  while (Metric(victim, "unloadkv_arena_used_bytes") != arena_used && absl::Now() < gauges) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(Metric(victim, "unloadkv_arena_used_bytes"), arena_used);
}

TEST_F(ClusterSecurityTest, ARogueNodeWithoutTheNodeSecretGetsNoState) {
  ASSERT_TRUE(map_->Create(2, *cluster::InitialShards(1, {})).ok());
  StartNode("n1", auth_);
  ASSERT_TRUE(WaitServing(0));
  Populate();
  // The rogue made its own users: itself, and n1 under a secret it guessed.
  const std::string rogue_auth = testing::WriteTestAuthFile({"rogue", "n1"}, "rogue_auth");
  StartNode("rogue", rogue_auth);
  // It may join the map (etcd here has no authentication: docs/security.md says to turn it
  // on), but the primary will not hand it the shard: the rogue cannot prove n1's secret.
  ASSERT_TRUE(AwaitLog("n1", "attaching rogue")) << nodes_.at("n1")->stderr_text();
  // The stock kvserver refuses n1's hello (it does not know n1's secret); a rogue that
  // answered anyway could not prove the secret back: the primary refuses either way.
  const std::string log = nodes_.at("n1")->stderr_text();
  EXPECT_TRUE(absl::StrContains(log, "authentication failed for user \"n1\"") ||
              absl::StrContains(log, "did not prove"))
      << log;
  EXPECT_LE(Metric("n1", "unloadkv_catchup_bytes_total"), 0);
  EXPECT_EQ(Metric("rogue", "unloadkv_shard_epoch{shard=\"0\"}"), -1);
  EXPECT_EQ(Shard().backups, std::vector<std::string>{});
  // Once the rogue is gone, a real node joins and receives the state.
  nodes_.at("rogue")->Stop();
  StartNode("n2", auth_);
  ASSERT_TRUE(WaitServing(1)) << nodes_.at("n1")->stderr_text();
  EXPECT_GT(Metric("n1", "unloadkv_catchup_bytes_total"), 0);
  ExpectEveryKey();
}

}  // namespace
}  // namespace unloadkv
