#include "transport/placement/shard_move.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "transport/cluster/memory_cluster_map.h"

namespace unloadkv {
namespace {

// The map alone: the test plays the nodes (a primary naming a caught-up joiner a backup, a
// backup taking over a resigned primary) where kvservers would.
class ShardMoveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(map_.Create(2, *cluster::InitialShards(2, {})).ok());
    lease_ = *map_.GrantLease(absl::Seconds(60));
    for (const char* n : {"a", "b", "c", "d"}) {
      ASSERT_TRUE(map_.RegisterNode({n, "127.0.0.1:1", ""}, lease_).ok());
    }
    Set(0, 3, "a", {"b"}, {});
    Set(1, 2, "b", {"c"}, {});
  }
  cluster::ShardInfo Shard(uint32_t id) { return *map_.Read()->ShardById(id); }
  void Set(uint32_t id, uint64_t epoch, const std::string& primary,
           const std::vector<std::string>& backups, const std::vector<std::string>& joining) {
    cluster::ShardInfo s = Shard(id);
    s.epoch = epoch;
    s.primary = primary;
    s.backups = backups;
    s.joining = joining;
    ASSERT_TRUE(map_.UpdateShard(s, {}).ok());
  }
  MoveStep Step(MoveRequest* req) {
    absl::StatusOr<MoveStep> st = StepMove(&map_, req);
    EXPECT_TRUE(st.ok()) << st.status();
    return st.ok() ? *st : MoveStep{};
  }

  cluster::MemoryCoordinator coordinator_;
  cluster::MemoryClusterMap map_{&coordinator_, "t"};
  cluster::LeaseId lease_ = 0;
};

TEST_F(ShardMoveTest, ABackupRoleMovesThroughJoiningAndTheOldBackupLeaves) {
  MoveRequest req{0, "c", "b"};
  MoveStep st = Step(&req);
  EXPECT_EQ(st.state, MoveStep::State::kJoining);
  EXPECT_EQ(Shard(0).joining, std::vector<std::string>{"c"});
  EXPECT_EQ(Shard(0).epoch, 3u);                           // joining changes no epoch
  EXPECT_EQ(Step(&req).state, MoveStep::State::kJoining);  // waits for the transfer
  EXPECT_EQ(Shard(0).joining, std::vector<std::string>{"c"});
  Set(0, 4, "a", {"b", "c"}, {});  // the primary: c caught up
  st = Step(&req);
  EXPECT_EQ(st.state, MoveStep::State::kDone);
  EXPECT_TRUE(absl::StrContains(st.said, "b leaves; its backup role is c's (epoch 5")) << st.said;
  const cluster::ShardInfo s = Shard(0);
  EXPECT_EQ(s.primary, "a");
  EXPECT_EQ(s.backups, std::vector<std::string>{"c"});
  EXPECT_EQ(s.epoch, 5u);
  EXPECT_EQ(Step(&req).state, MoveStep::State::kDone);  // and stays done
  EXPECT_EQ(Shard(0).epoch, 5u);
  EXPECT_EQ(Shard(1).epoch, 2u);  // the other shard untouched
}

TEST_F(ShardMoveTest, ThePrimaryRoleMovesByAResignationWithTheNewNodeFirstInLine) {
  MoveRequest req;  // from: the primary
  req.shard = 0;
  req.to = "d";
  EXPECT_EQ(Step(&req).state, MoveStep::State::kJoining);
  EXPECT_EQ(req.from, "a");
  EXPECT_TRUE(req.primary);
  Set(0, 4, "a", {"b", "d"}, {});  // d caught up
  MoveStep st = Step(&req);
  EXPECT_EQ(st.state, MoveStep::State::kHandingOver);
  EXPECT_TRUE(absl::StrContains(st.said, "asks a to hand the primary's role over to d")) << st.said;
  cluster::ShardInfo s = Shard(0);
  EXPECT_EQ(s.primary, "a");  // the primary hands over itself, once its writes in flight commit
  EXPECT_EQ(s.handover_to, "d");
  EXPECT_EQ(s.epoch, 4u);
  st = Step(&req);
  EXPECT_EQ(st.state, MoveStep::State::kHandingOver);
  EXPECT_TRUE(absl::StrContains(st.said, "waiting for a to let its writes")) << st.said;
  // a (ClusterNode::HandOver): resigned with d first in line, and left.
  s.epoch = 5;
  s.primary.clear();
  s.handover_to.clear();
  s.backups = {"d", "b"};
  ASSERT_TRUE(map_.UpdateShard(s, {}).ok());
  st = Step(&req);
  EXPECT_EQ(st.state, MoveStep::State::kHandingOver);
  EXPECT_TRUE(absl::StrContains(st.said, "waiting for d to take over")) << st.said;
  Set(0, 6, "d", {}, {"b"});  // d took over (TakeOver: fence, then the map)
  st = Step(&req);
  EXPECT_EQ(st.state, MoveStep::State::kDone);
  EXPECT_TRUE(absl::StrContains(st.said, "d holds the primary role a held")) << st.said;
}

// The destination's lease lapses once the hand-over was asked (every lease lapses when etcd
// was paused past the TTL): the primary may have resigned already, so the move does not race
// it with a refusal and an undo. It waits for the primary's decision: the primary calls the
// hand-over off for a destination that is not live, and only then is the move refused.
TEST_F(ShardMoveTest, ADestinationUnregisteredAfterTheAskWaitsForThePrimarysDecision) {
  const cluster::LeaseId own = *map_.GrantLease(absl::Seconds(60));
  ASSERT_TRUE(map_.RegisterNode({"e", "127.0.0.1:1", ""}, own).ok());
  MoveRequest req;
  req.shard = 0;
  req.to = "e";
  EXPECT_EQ(Step(&req).state, MoveStep::State::kJoining);
  Set(0, 4, "a", {"b", "e"}, {});  // e caught up
  EXPECT_TRUE(absl::StrContains(Step(&req).said, "asks a to hand")) << Shard(0).handover_to;
  ASSERT_TRUE(map_.RevokeLease(own).ok());
  ASSERT_FALSE(map_.Read()->IsLive("e"));
  MoveStep st = Step(&req);
  EXPECT_EQ(st.state, MoveStep::State::kHandingOver);
  EXPECT_TRUE(absl::StrContains(st.said, "waiting for a to let its writes")) << st.said;
  EXPECT_EQ(Shard(0).handover_to, "e");  // nothing called off by the move
  // a (ClusterNode::HandOverObstacle): e is not a live backup; the hand-over is off.
  cluster::ShardInfo s = Shard(0);
  s.handover_to.clear();
  ASSERT_TRUE(map_.UpdateShard(s, {}).ok());
  absl::StatusOr<MoveStep> refused = StepMove(&map_, &req);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "e is not registered"))
      << refused.status();
}

// A failover to another backup while the primary's role was moving: the role is not the
// source's any more, and the move ends saying so.
TEST_F(ShardMoveTest, AFailoverMidMoveEndsIt) {
  MoveRequest req;
  req.shard = 0;
  req.to = "d";
  EXPECT_EQ(Step(&req).state, MoveStep::State::kJoining);
  Set(0, 5, "b", {"d"}, {});  // a died; b took over, d caught up meanwhile
  absl::StatusOr<MoveStep> st = StepMove(&map_, &req);
  EXPECT_EQ(st.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(st.status().message(), "a holds no role")) << st.status();
  Set(0, 6, "b", {"a", "d"}, {});  // a back as a backup: still not the primary
  st = StepMove(&map_, &req);
  EXPECT_EQ(st.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(st.status().message(), "the primary changed meanwhile (now b)"))
      << st.status();
  EXPECT_TRUE(Shard(0).handover_to.empty());
}

TEST_F(ShardMoveTest, ThePrimaryRoleMayGoToABackupWithoutAJoin) {
  MoveRequest req{0, "b", ""};
  EXPECT_EQ(Step(&req).state, MoveStep::State::kHandingOver);
  EXPECT_EQ(Shard(0).primary, "a");
  EXPECT_EQ(Shard(0).handover_to, "b");
  EXPECT_TRUE(Shard(0).joining.empty());
}

TEST_F(ShardMoveTest, BadRequestsAreRefusedAndChangeNothing) {
  const int64_t before = map_.Read()->revision;
  auto code = [&](MoveRequest req) { return StepMove(&map_, &req).status().code(); };
  EXPECT_EQ(code({9, "c", ""}), absl::StatusCode::kNotFound);
  EXPECT_EQ(code({0, "a", ""}), absl::StatusCode::kInvalidArgument);  // from the primary to itself
  EXPECT_EQ(code({0, "b", "c"}), absl::StatusCode::kFailedPrecondition);   // c holds no role
  EXPECT_EQ(code({0, "a", "b"}), absl::StatusCode::kFailedPrecondition);   // a is the primary
  EXPECT_EQ(code({0, "zz", "b"}), absl::StatusCode::kFailedPrecondition);  // not registered
  absl::StatusOr<MoveStep> unknown = [&] {
    MoveRequest req{0, "zz", "b"};
    return StepMove(&map_, &req);
  }();
  EXPECT_TRUE(absl::StrContains(unknown.status().message(), "zz is not registered"))
      << unknown.status();
  Set(1, 3, "", {"c"}, {});  // shard 1 between primaries
  EXPECT_EQ(code({1, "d", ""}), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Shard(0).epoch, 3u);
  EXPECT_TRUE(Shard(0).joining.empty());
  EXPECT_GT(map_.Read()->revision, before);  // only the test's own write
}

// What an unfinished move left goes: its extra replica (joining or a backup already) leaves a
// group holding more than wanted, and a hand-over to it is called off; a group it completes
// (its source gone meanwhile) keeps it.
TEST_F(ShardMoveTest, UndoTakesBackTheExtraReplicaAndTheHandOver) {
  MoveRequest req;
  req.shard = 0;
  req.to = "d";
  EXPECT_EQ(Step(&req).state, MoveStep::State::kJoining);
  absl::StatusOr<std::string> undone = UndoMove(&map_, req);
  ASSERT_TRUE(undone.ok()) << undone.status();
  EXPECT_TRUE(absl::StrContains(*undone, "d left the group again")) << *undone;
  EXPECT_TRUE(Shard(0).joining.empty());
  EXPECT_EQ(Shard(0).epoch, 3u);         // it had not become a backup
  EXPECT_EQ(*UndoMove(&map_, req), "");  // nothing left

  Set(0, 4, "a", {"b", "d"}, {});  // joined again, caught up, and the hand-over asked
  EXPECT_EQ(Step(&req).state, MoveStep::State::kHandingOver);
  ASSERT_EQ(Shard(0).handover_to, "d");
  undone = UndoMove(&map_, req);
  ASSERT_TRUE(undone.ok()) << undone.status();
  EXPECT_TRUE(absl::StrContains(*undone, "the hand-over to d called off; d left the group again"))
      << *undone;
  cluster::ShardInfo s = Shard(0);
  EXPECT_EQ(s.handover_to, "");
  EXPECT_EQ(s.backups, std::vector<std::string>{"b"});
  EXPECT_EQ(s.epoch, 5u);

  Set(0, 6, "b", {"d"}, {});  // a is gone: d is wanted now
  EXPECT_EQ(*UndoMove(&map_, req), "");
  EXPECT_EQ(Shard(0).backups, std::vector<std::string>{"d"});
}

TEST_F(ShardMoveTest, ADrainMovesEachRoleToTheLeastLoadedNodeOutsideTheGroup) {
  // a: primary of 0; b: backup of 0, primary of 1; c: backup of 1; d: nothing.
  absl::StatusOr<MoveRequest> next = NextDrainMove(*map_.Read(), "b");
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->shard, 0u);
  EXPECT_EQ(next->from, "b");
  EXPECT_EQ(next->to, "d");  // c holds one role, d none
  EXPECT_EQ(NextDrainMove(*map_.Read(), "d").status().code(), absl::StatusCode::kNotFound);
  // Every live node already in shard 0's group: nowhere to go.
  Set(0, 3, "a", {"b", "c", "d"}, {});
  absl::StatusOr<MoveRequest> none = NextDrainMove(*map_.Read(), "b");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(none.status().message(), "shard 0: no live node")) << none.status();
}

// While the destination catches up, the move says how far it got (at most once a second) and
// ends, nothing having come of it, at its timeout.
TEST_F(ShardMoveTest, AMoveSaysHowFarTheCatchUpGot) {
  std::vector<std::string> said;
  int asked = 0;
  const absl::Status st = RunMove(
      &map_, MoveRequest{0, "c", ""}, absl::Milliseconds(2500), absl::Milliseconds(50),
      [&](const std::string& line) { said.push_back(line); },
      [&](uint32_t shard, const std::string& to) {
        EXPECT_EQ(shard, 0u);
        EXPECT_EQ(to, "c");
        return absl::StrCat("step ", ++asked);
      });
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded) << st;
  EXPECT_GE(asked, 2);
  EXPECT_LE(asked, 3);  // about once a second over 2.5 s, not at every 50 ms poll
  int lines = 0;
  for (const std::string& line : said) {
    if (absl::StrContains(line, "shard 0: c catching up: step ")) ++lines;
  }
  EXPECT_EQ(lines, asked);
}

}  // namespace
}  // namespace unloadkv
