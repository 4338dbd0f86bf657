#include "transport/placement/rebalance.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace unloadkv {
namespace {

cluster::ClusterView View(const std::vector<std::string>& nodes,
                          const std::vector<cluster::ShardInfo>& shards, int replicas) {
  cluster::ClusterView v;
  v.replicas = replicas;
  v.shards = static_cast<int>(shards.size());
  v.shard_list = shards;
  for (const std::string& n : nodes) v.nodes[n] = {n, "127.0.0.1:1", ""};
  return v;
}

cluster::ShardInfo Shard(uint32_t id, const std::string& primary,
                         const std::vector<std::string>& backups) {
  cluster::ShardInfo s;
  s.id = id;
  s.epoch = 3;
  s.primary = primary;
  s.backups = backups;
  return s;
}

// The map once `moves` are made, as cluster move leaves it.
void Apply(const std::vector<MoveRequest>& moves, cluster::ClusterView* v) {
  for (const MoveRequest& m : moves) {
    cluster::ShardInfo& s = v->shard_list[m.shard];
    if (!m.from.empty()) {
      ASSERT_TRUE(std::count(s.backups.begin(), s.backups.end(), m.from) == 1) << m.from;
      std::replace(s.backups.begin(), s.backups.end(), m.from, m.to);
    } else if (std::count(s.backups.begin(), s.backups.end(), m.to) == 1) {
      std::replace(s.backups.begin(), s.backups.end(), m.to, s.primary);
      s.primary = m.to;
    } else {
      s.primary = m.to;
    }
  }
}

void ExpectSpread(const cluster::ClusterView& v) {
  std::map<std::string, int> roles, primaries;
  int total = 0;
  for (const cluster::ShardInfo& s : v.shard_list) {
    const std::vector<std::string> r = s.Replicas();
    EXPECT_EQ(std::set<std::string>(r.begin(), r.end()).size(), r.size())
        << "two replicas of shard " << s.id << " on one node";
    for (const std::string& n : r) ++roles[n];
    ++primaries[s.primary];
    total += static_cast<int>(r.size());
  }
  const int nodes = static_cast<int>(v.nodes.size());
  for (const auto& [n, c] : roles) EXPECT_LE(c, (total + nodes - 1) / nodes) << n;
  const int shards = static_cast<int>(v.shard_list.size());
  for (const auto& [n, c] : primaries) EXPECT_LE(c, (shards + nodes - 1) / nodes) << n;
}

// Greedy placement then two nodes added: a and b hold every role, c and d none.
TEST(RebalanceTest, SpreadsRolesAndPrimariesOverNodesAddedLater) {
  cluster::ClusterView v = View(
      {"a", "b", "c", "d"},
      {Shard(0, "a", {"b"}), Shard(1, "a", {"b"}), Shard(2, "a", {"b"}), Shard(3, "a", {"b"})}, 2);
  const std::vector<MoveRequest> plan = PlanRebalance(v);
  ASSERT_FALSE(plan.empty());
  Apply(plan, &v);
  ExpectSpread(v);
  EXPECT_TRUE(PlanRebalance(v).empty()) << "a second pass finds more to do";
}

TEST(RebalanceTest, ASpreadClusterNeedsNoMove) {
  cluster::ClusterView v =
      View({"a", "b", "c"}, {Shard(0, "a", {"b"}), Shard(1, "b", {"c"}), Shard(2, "c", {"a"})}, 2);
  EXPECT_TRUE(PlanRebalance(v).empty());
}

// Three replicas on three nodes: every node holds every shard, nothing can move; primaries
// still spread by hand-overs to backups.
TEST(RebalanceTest, WithEveryNodeInEveryGroupOnlyPrimariesMove) {
  cluster::ClusterView v =
      View({"a", "b", "c"},
           {Shard(0, "a", {"b", "c"}), Shard(1, "a", {"b", "c"}), Shard(2, "a", {"b", "c"})}, 3);
  const std::vector<MoveRequest> plan = PlanRebalance(v);
  ASSERT_EQ(plan.size(), 2u);
  for (const MoveRequest& m : plan) EXPECT_TRUE(m.from.empty());  // hand-overs only
  Apply(plan, &v);
  ExpectSpread(v);
}

// The state a failover left in a loaded cluster_test run: a is primary of two shards, c of
// none, and c is no backup of a's shards (their backups, b and d, are primary of one each). No
// single hand-over evens this out; a chain does (a hands shard 0 to b, b hands shard 2 to c),
// made from c's end so b never holds two.
TEST(RebalanceTest, PrimariesTravelAlongAChainOfHandOvers) {
  cluster::ClusterView v = View(
      {"a", "b", "c", "d"},
      {Shard(0, "a", {"b"}), Shard(1, "a", {"d"}), Shard(2, "b", {"c"}), Shard(3, "d", {"c"})}, 2);
  const std::vector<MoveRequest> plan = PlanRebalance(v);
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].shard, 2u);
  EXPECT_EQ(plan[0].to, "c");
  EXPECT_EQ(plan[1].shard, 0u);
  EXPECT_EQ(plan[1].to, "b");
  for (const MoveRequest& m : plan) EXPECT_TRUE(m.from.empty());  // hand-overs only
  Apply(plan, &v);
  std::map<std::string, int> primaries;
  for (const cluster::ShardInfo& s : v.shard_list) ++primaries[s.primary];
  for (const char* n : {"a", "b", "c", "d"}) EXPECT_EQ(primaries[n], 1) << n;
  EXPECT_TRUE(PlanRebalance(v).empty()) << "a second pass finds more to do";
}

// cluster_test's start, every way it can go: four shards of two replicas, each claimed by a or
// b (whichever saw it first) with the other as backup, then c and d added. One pass spreads
// every node to two roles and one primary; a second finds nothing to do.
TEST(RebalanceTest, EveryGreedyStartOfTwoNodesSpreadsInOnePass) {
  for (int claims = 0; claims < 16; ++claims) {
    std::vector<cluster::ShardInfo> shards;
    for (uint32_t id = 0; id < 4; ++id) {
      const bool by_a = (claims >> id & 1) != 0;
      shards.push_back(Shard(id, by_a ? "a" : "b", {by_a ? "b" : "a"}));
    }
    cluster::ClusterView v = View({"a", "b", "c", "d"}, shards, 2);
    Apply(PlanRebalance(v), &v);
    std::map<std::string, int> roles, primaries;
    for (const cluster::ShardInfo& s : v.shard_list) {
      for (const std::string& n : s.Replicas()) ++roles[n];
      ++primaries[s.primary];
    }
    for (const char* n : {"a", "b", "c", "d"}) {
      EXPECT_EQ(roles[n], 2) << n << ", claims " << claims;
      EXPECT_EQ(primaries[n], 1) << n << ", claims " << claims;
    }
    EXPECT_TRUE(PlanRebalance(v).empty()) << "claims " << claims;
  }
}

TEST(RebalanceTest, AShardInFluxIsLeftAlone) {
  cluster::ShardInfo joining = Shard(0, "a", {"b"});
  joining.joining = {"c"};
  cluster::ShardInfo headless = Shard(1, "", {"b"});
  cluster::ClusterView v = View({"a", "b", "c", "d"}, {joining, headless}, 2);
  EXPECT_TRUE(PlanRebalance(v).empty());
}

}  // namespace
}  // namespace unloadkv
