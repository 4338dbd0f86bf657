// The placer against an in-memory map on a manual clock: it acts only with the policy on and
// only as the one placer, splits a shard its primary measured too large, spreads roles onto a
// new node, trims a group left too large, and undoes a change that does not finish in time.
#include "server/placer.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "tests/support/manual_clock.h"
#include "transport/cluster/memory_cluster_map.h"

namespace unloadkv::server {
namespace {

using cluster::ClusterView;
using cluster::ShardInfo;

class PlacerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::vector<ShardInfo>> shards = cluster::InitialShards(2, {});
    ASSERT_TRUE(shards.ok());
    ASSERT_TRUE(map_.Create(1, *shards).ok());
    lease_ = *map_.GrantLease(absl::Seconds(60));
    for (const char* n : {"n1", "n2"}) {
      ASSERT_TRUE(map_.RegisterNode(cluster::NodeInfo{n, "127.0.0.1:1", ""}, lease_).ok());
    }
    // n1 serves both shards, n2 serves nothing.
    for (const ShardInfo& s : Read().shard_list) {
      ShardInfo next = s;
      next.primary = "n1";
      next.epoch = 1;
      ASSERT_TRUE(map_.UpdateShard(next, {}).ok());
    }
  }

  ClusterView Read() {
    absl::StatusOr<ClusterView> v = map_.Read();
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? *v : ClusterView{};
  }
  void SetPolicy(bool on, uint64_t max_bytes) {
    ASSERT_TRUE(map_.SetPolicy(cluster::PlacementPolicy{on, max_bytes}, Read()).ok());
  }
  std::unique_ptr<Placer> MakePlacer(const std::string& node) {
    Placer::Options o;
    o.node = node;
    o.interval = absl::Seconds(1);
    o.timeout = absl::Seconds(30);
    return std::make_unique<Placer>(&map_, o, &clock_);
  }
  void Tick(Placer& p) { p.Tick(Read(), lease_); }

  testing::ManualClock clock_;
  cluster::MemoryCoordinator coordinator_{&clock_};
  cluster::MemoryClusterMap map_{&coordinator_, "c1"};
  cluster::LeaseId lease_ = 0;
};

TEST_F(PlacerTest, DoesNothingWithThePolicyOff) {
  std::unique_ptr<Placer> p = MakePlacer("n1");
  Tick(*p);
  EXPECT_FALSE(p->leading());
  ClusterView v = Read();
  EXPECT_EQ(v.placer, "");
  for (const ShardInfo& s : v.shard_list) EXPECT_TRUE(s.joining.empty());
}

TEST_F(PlacerTest, OnePlacerAtATimeSpreadsRolesOntoTheEmptyNode) {
  SetPolicy(true, 0);
  std::unique_ptr<Placer> p1 = MakePlacer("n1");
  std::unique_ptr<Placer> p2 = MakePlacer("n2");
  Tick(*p1);
  Tick(*p2);
  EXPECT_TRUE(p1->leading());
  EXPECT_FALSE(p2->leading());
  EXPECT_EQ(Read().placer, "n1");
  // n1 holds both roles, n2 none: one role moves, its first step n2 joining the shard.
  int joining = 0;
  for (const ShardInfo& s : Read().shard_list) joining += s.joining.size();
  EXPECT_EQ(joining, 1);
  for (const ShardInfo& s : Read().shard_list) {
    if (!s.joining.empty()) EXPECT_EQ(s.joining[0], "n2");
  }
  // The policy off: the placer stops deciding.
  SetPolicy(false, 0);
  Tick(*p1);
  EXPECT_FALSE(p1->leading());
}

TEST_F(PlacerTest, SplitsAShardItsPrimaryMeasuredTooLargeAndUndoesItAfterTheTimeout) {
  SetPolicy(true, 1000);
  ClusterView v = Read();
  const ShardInfo s = v.shard_list[0];  // ["", "\x80")
  ASSERT_TRUE(map_.PublishLoad({v.shard_list[1].id, "n1", 1, 10, 999, "\xa0"}, lease_).ok());
  std::unique_ptr<Placer> p = MakePlacer("n1");
  // A split comes before spreading roles (n1 holds both shards, n2 none).
  ASSERT_TRUE(map_.PublishLoad({s.id, "n1", s.epoch, 10, 5000, "k"}, lease_).ok());
  Tick(*p);
  ASSERT_TRUE(p->leading());
  const ClusterView after = Read();
  const ShardInfo* asked = after.ShardById(s.id);
  ASSERT_NE(asked, nullptr);
  EXPECT_EQ(asked->split_at, "k");
  EXPECT_NE(asked->split_id, 0u);
  EXPECT_EQ(Read().ShardById(v.shard_list[1].id)->split_at, "");  // 999 bytes: under
  // No node carries the split out: after the timeout it is called off.
  clock_.Advance(absl::Seconds(31));
  Tick(*p);
  EXPECT_EQ(p->failed(), 1);
  EXPECT_EQ(Read().ShardById(s.id)->split_at, "");
}

TEST_F(PlacerTest, TrimsAGroupLeftLargerThanWanted) {
  SetPolicy(true, 0);
  // Shard 1 keeps n2 as an extra backup (a move whose placer died), shard 0 is n2's.
  ClusterView v = Read();
  ShardInfo a = v.shard_list[0];
  a.primary = "n2";
  ++a.epoch;
  ASSERT_TRUE(map_.UpdateShard(a, {}).ok());
  ShardInfo b = v.shard_list[1];
  b.backups = {"n2"};
  ++b.epoch;
  ASSERT_TRUE(map_.UpdateShard(b, {}).ok());
  std::unique_ptr<Placer> p = MakePlacer("n1");
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Read().ShardById(b.id)->backups.size(), 1u) << "decision " << i;
    Tick(*p);
    clock_.Advance(absl::Seconds(1));
  }
  EXPECT_TRUE(Read().ShardById(b.id)->backups.empty());
  EXPECT_EQ(p->done(), 1);
}

}  // namespace
}  // namespace unloadkv::server
