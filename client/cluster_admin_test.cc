#include "client/cluster_admin.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "transport/cluster/memory_cluster_map.h"

namespace unloadkv {
namespace {

class ForceEmptyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(map_.Create(2, *cluster::InitialShards(2, {})).ok());
    // Shard 0: durable, served by a and b, both gone (never registered here).
    cluster::ShardInfo s = map_.Read()->shard_list[0];
    s.epoch = 4;
    s.primary = "a";
    s.backups = {"b"};
    s.durable = true;
    ASSERT_TRUE(map_.UpdateShard(s, {}).ok());
  }
  cluster::ShardInfo Shard(uint32_t id) { return *map_.Read()->ShardById(id); }

  cluster::MemoryCoordinator coordinator_;
  cluster::MemoryClusterMap map_{&coordinator_, "t"};
};

TEST_F(ForceEmptyTest, APolicyChangeKeepsTheFieldsNotGivenAndRefusesATinyLimit) {
  absl::StatusOr<std::string> said = SetPlacementPolicy(&map_, true, std::nullopt);
  ASSERT_TRUE(said.ok()) << said.status();
  EXPECT_EQ(*said, "automatic placement on, no split by size");
  said = SetPlacementPolicy(&map_, std::nullopt, 1 << 20);
  ASSERT_TRUE(said.ok()) << said.status();
  EXPECT_EQ(*said, "automatic placement on, shards split above 1048576 live bytes");
  EXPECT_EQ(SetPlacementPolicy(&map_, false, 1000).status().code(),
            absl::StatusCode::kInvalidArgument);
  const cluster::PlacementPolicy stored = map_.Read()->policy;
  EXPECT_TRUE(stored.auto_rebalance);  // the refusal changed nothing
  EXPECT_EQ(stored.max_shard_bytes, 1u << 20);
  EXPECT_EQ(*SetPlacementPolicy(&map_, false, std::nullopt), "automatic placement off");
}

TEST_F(ForceEmptyTest, ForgetsTheReplicasOfAShardWhoseEveryReplicaIsGone) {
  absl::StatusOr<std::string> done = ForceEmpty(&map_, 0);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_TRUE(absl::StrContains(*done, "replicas [a,b] forgotten, epoch 5")) << *done;
  const cluster::ShardInfo s = Shard(0);
  EXPECT_EQ(s.epoch, 5u);
  EXPECT_TRUE(s.primary.empty());
  EXPECT_TRUE(s.backups.empty());
  EXPECT_FALSE(s.durable);
}

TEST_F(ForceEmptyTest, RefusesWhileAReplicaIsLiveAndChangesNothing) {
  cluster::LeaseId lease = *map_.GrantLease(absl::Seconds(10));
  ASSERT_TRUE(map_.RegisterNode({"b", "127.0.0.1:1", ""}, lease).ok());
  absl::StatusOr<std::string> refused = ForceEmpty(&map_, 0);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "node b holds a replica and is live"))
      << refused.status();
  EXPECT_EQ(Shard(0).epoch, 4u);
  EXPECT_EQ(Shard(0).primary, "a");
  EXPECT_TRUE(Shard(0).durable);
}

TEST_F(ForceEmptyTest, RefusesAnUnknownOrNeverServedShard) {
  EXPECT_EQ(ForceEmpty(&map_, 9).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ForceEmpty(&map_, 1).status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace unloadkv
