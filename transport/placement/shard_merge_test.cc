#include "transport/placement/shard_merge.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "transport/cluster/memory_cluster_map.h"

namespace unloadkv {
namespace {

// The map alone: the test plays the nodes (a hand-over, the primary's merge transaction).
class ShardMergeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(map_.Create(2, *cluster::InitialShards(3, {"g", "p"})).ok());
    lease_ = *map_.GrantLease(absl::Seconds(60));
    for (const char* n : {"a", "b"}) {
      ASSERT_TRUE(map_.RegisterNode({n, "127.0.0.1:1", ""}, lease_).ok());
    }
    Set(0, 2, "a", {"b"});
    Set(1, 3, "b", {"a"});
    Set(2, 2, "a", {"b"});
  }
  cluster::ShardInfo Shard(uint32_t id) { return *map_.Read()->ShardById(id); }
  void Set(uint32_t id, uint64_t epoch, const std::string& primary,
           const std::vector<std::string>& backups) {
    cluster::ShardInfo s = Shard(id);
    s.epoch = epoch;
    s.primary = primary;
    s.backups = backups;
    s.handover_to.clear();
    ASSERT_TRUE(map_.UpdateShard(s, {}).ok());
  }
  MergeStep Step(MergeRequest* req) {
    absl::StatusOr<MergeStep> st = StepMerge(&map_, req);
    EXPECT_TRUE(st.ok()) << st.status();
    return st.ok() ? *st : MergeStep{};
  }

  cluster::MemoryCoordinator coordinator_;
  cluster::MemoryClusterMap map_{&coordinator_, "t"};
  cluster::LeaseId lease_ = 0;
};

TEST_F(ShardMergeTest, MovesTheRightPrimaryFirstThenAsksThenSaysItIsDone) {
  MergeRequest req;
  req.a = 1;  // either order: 0 is the left one
  req.b = 0;
  MergeStep st = Step(&req);
  EXPECT_FALSE(st.done);
  EXPECT_EQ(req.left, 0u);
  EXPECT_EQ(req.right, 1u);
  EXPECT_EQ(Shard(1).handover_to, "a") << st.said;  // its primary's role to shard 0's primary
  Set(1, 4, "a", {"b"});                            // the hand-over done
  st = Step(&req);
  EXPECT_TRUE(absl::StrContains(st.said, "asked a to merge shard 1 into shard 0")) << st.said;
  EXPECT_EQ(Shard(0).merge_with, 1u);
  st = Step(&req);
  EXPECT_TRUE(absl::StrContains(st.said, "waiting for a")) << st.said;
  // The primary's transaction.
  cluster::ClusterView v = *map_.Read();
  cluster::ShardInfo merged = *v.ShardById(0);
  merged.end = "p";
  merged.epoch += 1;
  merged.merge_with = 0;
  ASSERT_TRUE(map_.MergeShards(merged, 1, v).ok());
  st = Step(&req);
  EXPECT_TRUE(st.done) << st.said;
  EXPECT_EQ(map_.Read()->shard_list.size(), 2u);
  EXPECT_EQ(*UndoMerge(&map_, req), "");
}

TEST_F(ShardMergeTest, RefusesShardsThatAreNotNeighboursAndChangesNothing) {
  const int64_t before = map_.Read()->revision;
  MergeRequest apart;
  apart.a = 0;
  apart.b = 2;
  EXPECT_EQ(StepMerge(&map_, &apart).status().code(), absl::StatusCode::kInvalidArgument);
  MergeRequest twice;
  twice.a = 1;
  twice.b = 1;
  EXPECT_EQ(StepMerge(&map_, &twice).status().code(), absl::StatusCode::kInvalidArgument);
  MergeRequest unknown;
  unknown.a = 1;
  unknown.b = 7;
  EXPECT_EQ(StepMerge(&map_, &unknown).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(map_.Read()->revision, before);
}

TEST_F(ShardMergeTest, AMergeThatTimesOutIsCalledOff) {
  MergeRequest req;
  req.a = 1;
  req.b = 2;
  Set(2, 3, "b", {"a"});  // both served by b: no move first
  std::vector<std::string> said;
  absl::Status st = RunMerge(&map_, req, absl::Milliseconds(30), absl::Milliseconds(10),
                             [&](const std::string& l) { said.push_back(l); });
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded);
  ASSERT_FALSE(said.empty());
  EXPECT_TRUE(absl::StrContains(said.back(), "the merge was called off")) << said.back();
  EXPECT_EQ(Shard(1).merge_with, 0u);
  EXPECT_EQ(Shard(1).end, "p");
}

}  // namespace
}  // namespace unloadkv
