#include "transport/placement/shard_split.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "transport/cluster/memory_cluster_map.h"

namespace unloadkv {
namespace {

// The map alone: the test plays the primary (its map transaction) where a kvserver would.
class ShardSplitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(map_.Create(2, *cluster::InitialShards(2, {"m"})).ok());
    lease_ = *map_.GrantLease(absl::Seconds(60));
    for (const char* n : {"a", "b"}) {
      ASSERT_TRUE(map_.RegisterNode({n, "127.0.0.1:1", ""}, lease_).ok());
    }
    cluster::ShardInfo s = Shard(0);  // ["", "m")
    s.epoch = 2;
    s.primary = "a";
    s.backups = {"b"};
    ASSERT_TRUE(map_.UpdateShard(s, {}).ok());
  }
  cluster::ShardInfo Shard(uint32_t id) { return *map_.Read()->ShardById(id); }
  // What the primary does once its SPLIT record committed.
  void PrimarySplits() {
    cluster::ClusterView v = *map_.Read();
    cluster::ShardInfo left = *v.ShardById(0), right;
    right.id = left.split_id;
    right.start = left.split_at;
    right.end = left.end;
    right.epoch = left.epoch + 1;
    right.primary = left.primary;
    right.backups = left.backups;
    left.end = left.split_at;
    left.epoch += 1;
    left.split_at.clear();
    left.split_id = 0;
    ASSERT_TRUE(map_.SplitShard(left, right, v).ok());
  }

  cluster::MemoryCoordinator coordinator_;
  cluster::MemoryClusterMap map_{&coordinator_, "t"};
  cluster::LeaseId lease_ = 0;
};

TEST_F(ShardSplitTest, AsksThePrimaryThenWaitsThenSaysWhatItMade) {
  SplitRequest req{0, "g"};
  absl::StatusOr<SplitStep> st = StepSplit(&map_, &req);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_FALSE(st->done);
  EXPECT_EQ(req.new_id, 2u);  // the largest id + 1
  EXPECT_EQ(Shard(0).split_at, "g");
  EXPECT_EQ(Shard(0).split_id, 2u);
  EXPECT_EQ(Shard(0).epoch, 2u);  // asking changes no epoch
  st = StepSplit(&map_, &req);
  ASSERT_TRUE(st.ok());
  EXPECT_FALSE(st->done);
  EXPECT_TRUE(absl::StrContains(st->said, "waiting for its primary a")) << st->said;
  PrimarySplits();
  st = StepSplit(&map_, &req);
  ASSERT_TRUE(st.ok());
  EXPECT_TRUE(st->done);
  EXPECT_TRUE(absl::StrContains(st->said, "shard 2 holds [\"g\", \"m\"), primary a, backups [b]"))
      << st->said;
  EXPECT_EQ(Shard(0).end, "g");
  EXPECT_EQ(*UndoSplit(&map_, req), "");  // nothing left to call off
}

TEST_F(ShardSplitTest, RefusesKeysOutsideTheRangeAndChangesNothing) {
  const int64_t before = map_.Read()->revision;
  for (const char* at : {"", "m", "z"}) {
    SplitRequest req{0, at};
    EXPECT_EQ(StepSplit(&map_, &req).status().code(), absl::StatusCode::kInvalidArgument) << at;
  }
  SplitRequest unknown{9, "g"};
  EXPECT_EQ(StepSplit(&map_, &unknown).status().code(), absl::StatusCode::kNotFound);
  SplitRequest no_primary{1, "q"};  // shard 1 was never served
  EXPECT_EQ(StepSplit(&map_, &no_primary).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(map_.Read()->revision, before);
}

TEST_F(ShardSplitTest, AnotherSplitAskedIsRefusedAndATimedOutOneIsCalledOff) {
  SplitRequest first{0, "g"};
  ASSERT_TRUE(StepSplit(&map_, &first).ok());
  SplitRequest second{0, "h"};
  EXPECT_EQ(StepSplit(&map_, &second).status().code(), absl::StatusCode::kFailedPrecondition);
  std::vector<std::string> said;
  absl::Status st = RunSplit(&map_, first, absl::Milliseconds(30), absl::Milliseconds(10),
                             [&](const std::string& l) { said.push_back(l); });
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded);
  ASSERT_FALSE(said.empty());
  EXPECT_TRUE(absl::StrContains(said.back(), "the split was called off")) << said.back();
  EXPECT_EQ(Shard(0).split_id, 0u);
  EXPECT_EQ(Shard(0).end, "m");
}

}  // namespace
}  // namespace unloadkv
