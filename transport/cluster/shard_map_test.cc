#include "transport/cluster/shard_map.h"

#include "gtest/gtest.h"
#include "transport/cluster/map_records.h"

namespace unloadkv::cluster {
namespace {

TEST(InitialShardsTest, EvenSplitCoversTheKeySpaceInOrder) {
  absl::StatusOr<std::vector<ShardInfo>> shards = InitialShards(3, {});
  ASSERT_TRUE(shards.ok()) << shards.status();
  ASSERT_EQ(shards->size(), 3u);
  EXPECT_EQ((*shards)[0].start, "");
  EXPECT_EQ((*shards)[0].end, std::string(1, '\x55'));
  EXPECT_EQ((*shards)[1].start, std::string(1, '\x55'));
  EXPECT_EQ((*shards)[2].end, "");
  EXPECT_TRUE(CheckCoverage(*shards).ok());
}

TEST(InitialShardsTest, ExplicitSplitKeysBecomeBoundaries) {
  absl::StatusOr<std::vector<ShardInfo>> shards = InitialShards(3, {"user3", "user6"});
  ASSERT_TRUE(shards.ok()) << shards.status();
  ClusterView view;
  view.shard_list = *shards;
  EXPECT_EQ(view.ShardFor("")->id, 0u);
  EXPECT_EQ(view.ShardFor("user2999")->id, 0u);
  EXPECT_EQ(view.ShardFor("user3")->id, 1u);
  EXPECT_EQ(view.ShardFor("user5")->id, 1u);
  EXPECT_EQ(view.ShardFor("user6")->id, 2u);
  EXPECT_EQ(view.ShardFor("\xff\xff")->id, 2u);
}

TEST(InitialShardsTest, RejectsBadCountsAndSplits) {
  EXPECT_EQ(InitialShards(0, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(InitialShards(kMaxShards + 1, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(InitialShards(300, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(InitialShards(3, {"b"}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(InitialShards(3, {"b", "a"}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(InitialShards(2, {""}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ShardStateTest, FollowsLiveNodesAndWantedReplicas) {
  ClusterView view;
  view.replicas = 3;
  ShardInfo s;
  EXPECT_EQ(view.StateOf(s), ShardState::kNoPrimary);
  s.primary = "a";
  s.backups = {"b", "c"};
  EXPECT_EQ(view.StateOf(s), ShardState::kPrimaryDown);
  view.nodes["a"] = {"a", "x:1", ""};
  view.nodes["b"] = {"b", "x:2", ""};
  EXPECT_EQ(view.StateOf(s), ShardState::kUnderReplicated);
  view.nodes["c"] = {"c", "x:3", ""};
  EXPECT_EQ(view.StateOf(s), ShardState::kServing);
  EXPECT_EQ(ShardStateName(ShardState::kUnderReplicated), "under-replicated");
}

TEST(NamesTest, NodeAndClusterNamesAreChecked) {
  EXPECT_TRUE(CheckNodeName("kv-0.east_1").ok());
  EXPECT_FALSE(CheckNodeName("").ok());
  EXPECT_FALSE(CheckNodeName("a/b").ok());
  EXPECT_FALSE(CheckNodeName(std::string(65, 'a')).ok());
  EXPECT_FALSE(CheckClusterName("c 1").ok());
}

TEST(MapRecordsTest, RoundTripsThroughTheStoredForm) {
  absl::StatusOr<std::vector<ShardInfo>> shards = InitialShards(2, {"m"});
  ASSERT_TRUE(shards.ok());
  (*shards)[1].epoch = 7;
  (*shards)[1].primary = "n1";
  (*shards)[1].backups = {"n2", "n3"};
  (*shards)[1].joining = {"n4"};
  std::vector<StoredKey> keys{
      {ConfigKey("c"), EncodeConfig(2, 3, {}), 2},
      {ShardKey("c", 1), EncodeShard((*shards)[1]), 9},
      {ShardKey("c", 0), EncodeShard((*shards)[0]), 2},
      {NodeKey("c", "n1"), EncodeNode({"n1", "127.0.0.1:7000", "127.0.0.1:9000"}), 5},
  };
  absl::StatusOr<ClusterView> view = AssembleView("c", 11, keys);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->revision, 11);
  EXPECT_EQ(view->replicas, 3);
  ASSERT_EQ(view->shard_list.size(), 2u);
  const ShardInfo& s = view->shard_list[1];
  EXPECT_EQ(s.start, "m");
  EXPECT_EQ(s.epoch, 7u);
  EXPECT_EQ(s.primary, "n1");
  EXPECT_EQ(s.backups, (std::vector<std::string>{"n2", "n3"}));
  EXPECT_EQ(s.joining, (std::vector<std::string>{"n4"}));
  EXPECT_EQ(s.mod_revision, 9);
  EXPECT_EQ(view->nodes.at("n1").rpc_address, "127.0.0.1:7000");
}

TEST(MapRecordsTest, DamagedRecordsAreDataLossNamingTheKey) {
  absl::StatusOr<std::vector<ShardInfo>> shards = InitialShards(2, {"m"});
  ASSERT_TRUE(shards.ok());
  const StoredKey config{ConfigKey("c"), EncodeConfig(2, 1, {}), 2};
  const StoredKey s0{ShardKey("c", 0), EncodeShard((*shards)[0]), 2};
  const StoredKey s1{ShardKey("c", 1), EncodeShard((*shards)[1]), 2};

  absl::StatusOr<ClusterView> v =
      AssembleView("c", 3, {config, s0, {ShardKey("c", 1), "{not json", 2}});
  EXPECT_EQ(v.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(v.status().message().find("/unloadkv/c/shards/00000001"), std::string::npos);

  v = AssembleView("c", 3, {config, s0});  // a shard missing
  EXPECT_EQ(v.status().code(), absl::StatusCode::kDataLoss);

  ShardInfo gap = (*shards)[1];
  gap.start = "n";
  v = AssembleView("c", 3, {config, s0, {ShardKey("c", 1), EncodeShard(gap), 2}});
  EXPECT_EQ(v.status().code(), absl::StatusCode::kDataLoss);

  v = AssembleView("c", 3, {{ConfigKey("c"), EncodeConfig(2, 99, {}), 2}, s0, s1});
  EXPECT_EQ(v.status().code(), absl::StatusCode::kDataLoss);

  v = AssembleView("c", 3, {s0, s1});  // no config: never initialized
  EXPECT_EQ(v.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(v.status().message().find("cluster init"), std::string::npos);
}

TEST(MapRecordsTest, PrefixEndIsTheNextPrefix) {
  EXPECT_EQ(PrefixEnd("/a/"), "/a0");
  EXPECT_EQ(PrefixEnd(std::string("a\xff", 2)), "b");
}

}  // namespace
}  // namespace unloadkv::cluster
