// ClusterNode driven by hand on a manual clock (run_threads = false), as a simulation would
// drive it: claim, join by state transfer, and failover when the primary's lease runs out in
// virtual time, with no thread of the node's own and no real time passing for the map.
#include "server/cluster_node.h"

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/support/manual_clock.h"
#include "transport/backends/open_device.h"
#include "transport/base/logging.h"
#include "transport/base/mutex.h"
#include "transport/cluster/memory_cluster_map.h"
#include "transport/storage/memory_disk.h"

namespace unloadkv::server {
namespace {

using testing::ManualClock;

// A node without a KV service or listener: device, engine, replicas, membership. (Replication
// links need a listening server: cluster_test covers them.)
// With `disk`, the node is durable: every replica logs under /data/NAME/shard-N on it.
struct Node {
  // `logs`: the recovered log positions the node publishes (NodeInfo::logs), as given.
  Node(cluster::MemoryCoordinator* coordinator, const std::string& name, const Clock* clock,
       storage::Disk* disk = nullptr, std::map<uint32_t, std::pair<uint64_t, uint64_t>> logs = {})
      : map(coordinator, "t") {
    device = std::move(*backends::OpenDevice(backends::DeviceSpec()));
    engine = std::move(*engine::Engine::Create(device.get(), engine::EngineOptions()));
    engine->Start();
    shards = std::make_unique<ShardTable>(
        [this, disk, name](uint32_t shard) -> absl::StatusOr<std::shared_ptr<ShardReplica>> {
          auto r = ShardReplica::Create(engine.get(), shard, 4 << 20, false, &reaper, nullptr);
          if (!r.ok() || disk == nullptr) return r;
          absl::Status st =
              (*r)->RecoverAndLog(disk, absl::StrCat("/data/", name, "/shard-", shard),
                                  *FsyncPolicy::Parse("always"), RealClock::Get(), nullptr);
          if (!st.ok()) return st;
          return r;
        });
    ClusterNode::Options o;
    o.durable = disk != nullptr;
    o.self = {name, "127.0.0.1:1", "", std::move(logs)};
    o.lease_ttl = absl::Seconds(3);
    o.arena_bytes = 4 << 20;
    o.run_threads = false;
    node = std::make_unique<ClusterNode>(&map, o, shards.get(), engine.get(), clock);
  }
  ~Node() {
    node.reset();
    shards.reset();
    reaper.Drain();
    engine->Stop();
  }
  cluster::MemoryClusterMap map;
  Reaper reaper;
  std::unique_ptr<rnic::Device> device;
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<ShardTable> shards;
  std::unique_ptr<ClusterNode> node;
};

class ClusterNodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetMinLogLevel(LogLevel::kError);
    admin_ = std::make_unique<cluster::MemoryClusterMap>(&coordinator_, "t");
  }
  cluster::ShardInfo Shard() { return admin_->Read()->shard_list[0]; }
  // Starts `a` and `b`; `a` claims the shard and `b` becomes its backup, caught up and holding
  // the key "kept" (what replication leaves behind); `*s`: the shard as then written.
  void PrimaryAndABackupHoldingAKey(Node& a, Node& b, cluster::ShardInfo* s) {
    ASSERT_TRUE(a.node->Start().ok());
    ASSERT_TRUE(b.node->Start().ok());
    a.node->ControlTick();
    ASSERT_EQ(Shard().primary, "a");
    absl::StatusOr<std::shared_ptr<ShardReplica>> replica = b.shards->GetOrCreate(0);
    ASSERT_TRUE(replica.ok());
    KvStore& store = (*replica)->store();
    absl::StatusOr<std::vector<KvStore::Grant>> grant = store.GrantSlots(1, 8, 1);
    ASSERT_TRUE(grant.ok());
    ASSERT_TRUE(store.Put(1, "kept", (*grant)[0].id, 8).ok());
    *s = Shard();
    s->backups = {"b"};
    s->epoch += 1;
    ASSERT_TRUE(admin_->UpdateShard(*s, {}).ok());
    b.node->ControlTick();  // a live primary: b stays a backup
  }

  ManualClock clock_;
  cluster::MemoryCoordinator coordinator_{&clock_};
  std::unique_ptr<cluster::MemoryClusterMap> admin_;
};

TEST_F(ClusterNodeTest, AClaimAndALeaseLostAndRegainedInVirtualTime) {
  ASSERT_TRUE(admin_->Create(1, *cluster::InitialShards(1, {})).ok());
  Node a(&coordinator_, "a", &clock_), b(&coordinator_, "b", &clock_);
  ASSERT_TRUE(a.node->Start().ok());
  ASSERT_TRUE(b.node->Start().ok());
  EXPECT_TRUE(a.node->LeaseValid());

  a.node->ControlTick();  // claims the shard
  EXPECT_EQ(Shard().primary, "a");
  EXPECT_EQ(Shard().epoch, 1u);
  ASSERT_NE(a.shards->Get(0), nullptr);
  EXPECT_EQ(a.shards->Get(0)->role(), ShardReplica::Role::kPrimary);
  b.node->ControlTick();  // the shard has the one replica it wants: b stays out
  EXPECT_EQ(b.shards->Get(0), nullptr);

  // Virtual time passes; only b keeps its lease alive. a's validity ends at 0.8 TTL.
  for (int i = 0; i < 4; ++i) {
    clock_.Advance(absl::Seconds(1));
    b.node->LeaseTick();
  }
  EXPECT_FALSE(a.node->LeaseValid());
  EXPECT_TRUE(b.node->LeaseValid());
  coordinator_.ExpireLeases();
  EXPECT_FALSE(admin_->Read()->IsLive("a"));
  // Nobody else holds the shard (replication 1), so a keeps it; it registers again.
  a.node->LeaseTick();  // learns the lease is gone
  a.node->LeaseTick();  // registers again
  EXPECT_TRUE(admin_->Read()->IsLive("a"));
  // No local reads until the map confirmed what a still holds.
  EXPECT_FALSE(a.node->LeaseValid());
  a.node->ControlTick();
  EXPECT_TRUE(a.node->LeaseValid());
  EXPECT_EQ(Shard().primary, "a");
  EXPECT_EQ(a.shards->Get(0)->role(), ShardReplica::Role::kPrimary);
  a.node->Stop();
  b.node->Stop();
}

TEST_F(ClusterNodeTest, ABackupTakesOverWhenThePrimarysLeaseRunsOutInVirtualTime) {
  ASSERT_TRUE(admin_->Create(2, *cluster::InitialShards(1, {})).ok());
  Node a(&coordinator_, "a", &clock_), b(&coordinator_, "b", &clock_);
  ASSERT_TRUE(a.node->Start().ok());
  ASSERT_TRUE(b.node->Start().ok());
  a.node->ControlTick();
  ASSERT_EQ(Shard().primary, "a");
  // b as a backup that caught up (what state transfer leaves behind).
  ASSERT_TRUE(b.shards->GetOrCreate(0).ok());
  cluster::ShardInfo s = Shard();
  s.backups = {"b"};
  s.epoch += 1;
  ASSERT_TRUE(admin_->UpdateShard(s, {}).ok());

  // While a's lease lives, b does nothing.
  b.node->ControlTick();
  EXPECT_EQ(Shard().primary, "a");
  for (int i = 0; i < 4; ++i) {
    clock_.Advance(absl::Seconds(1));
    b.node->LeaseTick();
  }
  b.node->ControlTick();  // a's lease expired in virtual time: b takes over at once (rank 0)
  const cluster::ShardInfo now = Shard();
  EXPECT_EQ(now.primary, "b");
  EXPECT_EQ(now.epoch, s.epoch + 1);
  EXPECT_TRUE(now.backups.empty());
  EXPECT_EQ(b.shards->Get(0)->role(), ShardReplica::Role::kPrimary);
  EXPECT_EQ(b.shards->Get(0)->fence(), now.epoch);
  EXPECT_EQ(b.node->counters().failovers.load(), 1u);
  // The old primary comes back: it registers again, sees it lost the shard, drops its replica.
  a.node->LeaseTick();
  a.node->LeaseTick();
  a.node->ControlTick();
  EXPECT_EQ(a.shards->Get(0), nullptr);
  a.node->Stop();
  b.node->Stop();
}

// Every lease lapses at once (etcd, or all the nodes, starved for longer than the TTL): the
// replicas stay, and the first node back takes over with the data instead of finding none
// left and serving the shard empty.
TEST_F(ClusterNodeTest, WhenEveryLeaseLapsesAtOnceTheFirstBackupBackTakesOverWithTheData) {
  ASSERT_TRUE(admin_->Create(2, *cluster::InitialShards(1, {})).ok());
  Node a(&coordinator_, "a", &clock_), b(&coordinator_, "b", &clock_);
  cluster::ShardInfo s;
  ASSERT_NO_FATAL_FAILURE(PrimaryAndABackupHoldingAKey(a, b, &s));

  clock_.Advance(absl::Seconds(4));  // nobody kept a lease alive
  coordinator_.ExpireLeases();
  a.node->LeaseTick();  // both learn their leases are gone
  b.node->LeaseTick();
  EXPECT_FALSE(a.node->LeaseValid());
  EXPECT_FALSE(b.node->LeaseValid());
  ASSERT_NE(a.shards->Get(0), nullptr);
  ASSERT_NE(b.shards->Get(0), nullptr);

  b.node->LeaseTick();  // b registers again first
  EXPECT_FALSE(b.node->LeaseValid());
  b.node->ControlTick();  // still named backup at its epoch, the primary gone: takes over
  const cluster::ShardInfo now = Shard();
  EXPECT_EQ(now.primary, "b");
  EXPECT_EQ(now.epoch, s.epoch + 1);
  EXPECT_TRUE(b.node->LeaseValid());
  ASSERT_NE(b.shards->Get(0), nullptr);
  EXPECT_EQ(b.shards->Get(0)->role(), ShardReplica::Role::kPrimary);
  EXPECT_TRUE(b.shards->Get(0)->store().Get("kept").ok());

  a.node->LeaseTick();  // a registers again: no longer named, it drops its replica and joins
  a.node->ControlTick();
  EXPECT_EQ(a.shards->Get(0), nullptr);
  EXPECT_EQ(Shard().primary, "b");
  EXPECT_EQ(Shard().joining, std::vector<std::string>{"a"});
  a.node->Stop();
  b.node->Stop();
}

// A take-over whose map write applied but whose answer was lost (etcd paused past the node's
// deadline answers the queued request when it resumes: found by cluster_fault_test's
// EtcdPausedMidHandOver): the node raised its fence and stayed a backup, and the map names it
// primary at that epoch. It must serve with the data it holds. (It used to resign as "named
// primary without a serving replica" and drop its replica, the shard's only current one.)
TEST_F(ClusterNodeTest, ATakeOverWhoseAnswerWasLostServesWhenTheMapShowsItApplied) {
  ASSERT_TRUE(admin_->Create(2, *cluster::InitialShards(1, {})).ok());
  Node a(&coordinator_, "a", &clock_), b(&coordinator_, "b", &clock_);
  cluster::ShardInfo s;
  ASSERT_NO_FATAL_FAILURE(PrimaryAndABackupHoldingAKey(a, b, &s));

  for (int i = 0; i < 4; ++i) {  // a's lease runs out; b keeps its own
    clock_.Advance(absl::Seconds(1));
    b.node->LeaseTick();
  }
  b.map.set_answers_lost(true);
  b.node->ControlTick();  // takes over: applied, but b hears UNAVAILABLE
  b.map.set_answers_lost(false);
  ASSERT_EQ(Shard().primary, "b");
  ASSERT_EQ(Shard().epoch, s.epoch + 1);
  EXPECT_EQ(b.shards->Get(0)->role(), ShardReplica::Role::kBackup);
  EXPECT_EQ(b.shards->Get(0)->fence(), s.epoch + 1);

  b.node->ControlTick();  // the map shows the take-over applied: b serves, with its data
  EXPECT_EQ(Shard().primary, "b");
  EXPECT_EQ(Shard().epoch, s.epoch + 1);
  ASSERT_NE(b.shards->Get(0), nullptr);
  EXPECT_EQ(b.shards->Get(0)->role(), ShardReplica::Role::kPrimary);
  EXPECT_TRUE(b.shards->Get(0)->store().Get("kept").ok());
  a.node->Stop();
  b.node->Stop();
}

// Puts `key` = `value` through primary `r` (replicated and logged); waits (bounded, real time:
// the log has a thread of its own) for the commit.
absl::Status Put(ShardReplica& r, const std::string& key, const std::string& value) {
  auto grant = r.store().GrantSlots(1, static_cast<uint32_t>(value.size()), 1);
  if (!grant.ok()) return grant.status();
  std::memcpy(reinterpret_cast<char*>(r.arena_addr() + (*grant)[0].slot.offset), value.data(),
              value.size());
  auto m = r.store().PreparePut(1, key, (*grant)[0].id, static_cast<uint32_t>(value.size()));
  if (!m.ok()) return m.status();
  Mutex mu;
  bool done = false;
  absl::Status result;
  r.Submit(*m, [&](absl::StatusOr<uint64_t> v) {
    MutexLock l(&mu);
    result = v.status();
    done = true;
  });
  for (int i = 0; i < 5000; ++i) {
    {
      MutexLock l(&mu);
      if (done) return result;
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
  return absl::DeadlineExceededError("no commit in 5 s");
}

// A durable node restarted (every process gone, the map kept) and still named its shard's
// primary recovers the shard from its log and takes it back at epoch + 1, with its data. A
// durable shard whose only replica comes back without its data is not claimed empty by
// anyone until an operator gives its data up (kvclient cluster force-empty).
TEST_F(ClusterNodeTest, ADurableShardComesBackWithItsDataOrWaitsForIt) {
  ASSERT_TRUE(admin_->Create(1, *cluster::InitialShards(1, {})).ok());
  storage::MemoryDisk disk_a, disk_b;
  {
    Node a(&coordinator_, "a", &clock_, &disk_a);
    ASSERT_TRUE(a.node->Start().ok());
    a.node->ControlTick();  // claims
    ASSERT_EQ(Shard().primary, "a");
    EXPECT_TRUE(Shard().durable);
    ASSERT_TRUE(Put(*a.shards->Get(0), "k", "logged").ok());
    // The process dies: its lease runs out; the map still names it.
    clock_.Advance(absl::Seconds(4));
    coordinator_.ExpireLeases();
  }
  disk_a.Crash();  // every acknowledged write was synced
  Node a(&coordinator_, "a", &clock_, &disk_a);
  // What kvserver does at start-up: a replica for each shard directory, kept when whole.
  absl::StatusOr<std::shared_ptr<ShardReplica>> recovered = a.shards->GetOrCreate(0);
  ASSERT_TRUE(recovered.ok()) << recovered.status();
  EXPECT_TRUE((*recovered)->recovered());
  ASSERT_TRUE(a.node->Start().ok());
  a.node->ControlTick();
  EXPECT_EQ(Shard().primary, "a");
  EXPECT_EQ(Shard().epoch, 2u);
  ASSERT_EQ(a.shards->Get(0)->role(), ShardReplica::Role::kPrimary);
  absl::StatusOr<KvStore::Value> v = a.shards->Get(0)->store().Get("k");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->bytes, "logged");
  ASSERT_TRUE(Put(*a.shards->Get(0), "k2", "after").ok());  // seqs go on after the log's
  a.node->Stop();

  // Its data dir lost: a restarted a resigns; nobody claims the shard empty.
  Node a_without(&coordinator_, "a", &clock_, &disk_b);
  Node b(&coordinator_, "b", &clock_, &disk_b);
  ASSERT_TRUE(a_without.node->Start().ok());
  ASSERT_TRUE(b.node->Start().ok());
  a_without.node->ControlTick();
  EXPECT_TRUE(Shard().primary.empty());
  EXPECT_TRUE(Shard().durable);
  b.node->ControlTick();
  a_without.node->ControlTick();
  EXPECT_TRUE(Shard().primary.empty()) << "a durable shard was claimed empty";
  EXPECT_EQ(b.shards->Get(0), nullptr);
  // The operator gives its data up (what `kvclient cluster force-empty` writes): claimed.
  cluster::ShardInfo forced = Shard();
  forced.epoch += 1;
  forced.durable = false;
  ASSERT_TRUE(admin_->UpdateShard(forced, {}).ok());
  b.node->ControlTick();
  EXPECT_EQ(Shard().primary, "b");
  EXPECT_TRUE(Shard().durable);
  a_without.node->Stop();
  b.node->Stop();
}

// A restarted primary takes its shard back only if no named backup's recovered log is newer
// (epoch and seq decide): here the backup published a newer one, so the primary resigns and
// that backup takes over. A backup that restarted with an older log would wait for it.
TEST_F(ClusterNodeTest, ARestartedPrimaryYieldsToABackupWhoseLogIsNewer) {
  ASSERT_TRUE(admin_->Create(2, *cluster::InitialShards(1, {})).ok());
  storage::MemoryDisk disk_a, disk_b;
  {
    Node a(&coordinator_, "a", &clock_, &disk_a);
    ASSERT_TRUE(a.node->Start().ok());
    a.node->ControlTick();                               // claims at epoch 1
    ASSERT_TRUE(Put(*a.shards->Get(0), "k", "v").ok());  // its log ends at (1, 1)
    clock_.Advance(absl::Seconds(4));
    coordinator_.ExpireLeases();
  }
  cluster::ShardInfo s = Shard();
  s.backups = {"b"};  // b was its backup, and its log went further (published below)
  s.epoch += 1;
  ASSERT_TRUE(admin_->UpdateShard(s, {}).ok());
  Node a(&coordinator_, "a", &clock_, &disk_a);
  ASSERT_TRUE(a.shards->GetOrCreate(0).ok());
  ASSERT_TRUE(a.shards->Get(0)->recovered());
  EXPECT_EQ(a.shards->Get(0)->recovered_position(), (std::pair<uint64_t, uint64_t>{1, 1}));
  Node b(&coordinator_, "b", &clock_, &disk_b, {{0, {1, 5}}});
  ASSERT_TRUE(b.shards->GetOrCreate(0).ok());  // recovered (empty here; its position as given)
  ASSERT_TRUE(a.node->Start().ok());
  a.node->ControlTick();  // b is not back yet: a waits (at most two TTLs)
  EXPECT_EQ(Shard().primary, "a");
  EXPECT_EQ(Shard().epoch, s.epoch);
  ASSERT_TRUE(b.node->Start().ok());
  a.node->ControlTick();  // b's log is newer: a resigns
  EXPECT_TRUE(Shard().primary.empty());
  b.node->ControlTick();  // b takes over
  EXPECT_EQ(Shard().primary, "b");
  EXPECT_EQ(b.shards->Get(0)->role(), ShardReplica::Role::kPrimary);
  a.node->Stop();
  b.node->Stop();
}

}  // namespace
}  // namespace unloadkv::server
