// One suite, run on every ClusterMap backend: the in-memory map (on a manual clock) and a real
// etcd 3.4 started by the test on loopback (skipped with a message only where etcd is not
// installed; ./quickstart.sh test installs it).
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/support/etcd_process.h"
#include "tests/support/manual_clock.h"
#include "transport/base/mutex.h"
#include "transport/cluster/etcd_cluster_map.h"
#include "transport/cluster/memory_cluster_map.h"

namespace unloadkv::cluster {
namespace {

using testing::ManualClock;

// What the suite needs of a backend.
class Backend {
 public:
  virtual ~Backend() = default;
  // A handle on `cluster`; the suite opens several to play several processes.
  virtual std::unique_ptr<ClusterMap> Open(const std::string& cluster) = 0;
  // Lets time pass until `done` holds or `limit` passed (virtual time for the in-memory map,
  // real time for etcd). Returns whether `done` held.
  virtual bool WaitUntil(const std::function<bool()>& done, absl::Duration limit) = 0;
};

class MemoryBackend : public Backend {
 public:
  std::unique_ptr<ClusterMap> Open(const std::string& cluster) override {
    return std::make_unique<MemoryClusterMap>(&coordinator_, cluster);
  }
  bool WaitUntil(const std::function<bool()>& done, absl::Duration limit) override {
    for (absl::Duration t; t <= limit; t += absl::Milliseconds(100)) {
      coordinator_.ExpireLeases();
      if (done()) return true;
      clock_.Advance(absl::Milliseconds(100));
    }
    return false;
  }

 private:
  ManualClock clock_;
  MemoryCoordinator coordinator_{&clock_};
};

class EtcdBackend : public Backend {
 public:
  explicit EtcdBackend(std::unique_ptr<testing::EtcdProcess> etcd) : etcd_(std::move(etcd)) {}
  std::unique_ptr<ClusterMap> Open(const std::string& cluster) override {
    auto map = EtcdClusterMap::Open(etcd_->endpoint(), cluster);
    EXPECT_TRUE(map.ok()) << map.status();
    return map.ok() ? *std::move(map) : nullptr;
  }
  bool WaitUntil(const std::function<bool()>& done, absl::Duration limit) override {
    const absl::Time deadline = absl::Now() + limit;
    while (absl::Now() < deadline) {
      if (done()) return true;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return done();
  }

 private:
  std::unique_ptr<testing::EtcdProcess> etcd_;
};

using BackendFactory = std::function<std::unique_ptr<Backend>(std::string* skip_reason)>;

struct NamedFactory {
  std::string name;
  BackendFactory make;
};
void PrintTo(const NamedFactory& f, std::ostream* os) { *os << f.name; }

class ClusterMapConformanceTest : public ::testing::TestWithParam<NamedFactory> {
 protected:
  void SetUp() override {
    std::string skip;
    backend_ = GetParam().make(&skip);
    if (backend_ == nullptr) GTEST_SKIP() << skip;
    map_ = backend_->Open("c1");
    ASSERT_NE(map_, nullptr);
  }

  // Creates c1 with `shards` shards and `replicas` wanted replicas.
  void CreateMap(int shards, int replicas) {
    absl::StatusOr<std::vector<ShardInfo>> initial = InitialShards(shards, {});
    ASSERT_TRUE(initial.ok());
    absl::StatusOr<int64_t> rev = map_->Create(replicas, *initial);
    ASSERT_TRUE(rev.ok()) << rev.status();
  }

  ClusterView MustRead() {
    absl::StatusOr<ClusterView> v = map_->Read();
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? *v : ClusterView{};
  }

  LeaseId MustLease(absl::Duration ttl) {
    absl::StatusOr<LeaseId> lease = map_->GrantLease(ttl);
    EXPECT_TRUE(lease.ok()) << lease.status();
    return lease.ok() ? *lease : 0;
  }

  static NodeInfo Node(const std::string& name) {
    return NodeInfo{name, absl::StrCat("127.0.0.1:7", name.size()), ""};
  }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<ClusterMap> map_;
};

TEST_P(ClusterMapConformanceTest, AnUnknownClusterIsNotFoundAndTheMessageSaysHowToCreateIt) {
  absl::StatusOr<ClusterView> v = map_->Read();
  ASSERT_EQ(v.status().code(), absl::StatusCode::kNotFound) << v.status();
  EXPECT_NE(v.status().message().find("\"c1\""), std::string::npos) << v.status();
  EXPECT_NE(v.status().message().find("cluster init"), std::string::npos) << v.status();
}

TEST_P(ClusterMapConformanceTest, ACreatedMapReadsBackCoveringTheKeySpace) {
  CreateMap(3, 2);
  ClusterView v = MustRead();
  EXPECT_GT(v.revision, 0);
  EXPECT_EQ(v.shards, 3);
  EXPECT_EQ(v.replicas, 2);
  ASSERT_EQ(v.shard_list.size(), 3u);
  for (const ShardInfo& s : v.shard_list) {
    EXPECT_EQ(s.epoch, 0u);
    EXPECT_TRUE(s.primary.empty());
    EXPECT_GT(s.mod_revision, 0);
  }
  EXPECT_TRUE(CheckCoverage(v.shard_list).ok());
  EXPECT_EQ(v.ShardFor("")->id, 0u);
  EXPECT_EQ(v.ShardFor("zzz")->id, 1u);
  EXPECT_EQ(v.ShardFor("\xf0")->id, 2u);
  EXPECT_TRUE(v.nodes.empty());
}

TEST_P(ClusterMapConformanceTest, CreatingTwiceIsAlreadyExistsAndClustersAreSeparate) {
  CreateMap(2, 1);
  absl::StatusOr<std::vector<ShardInfo>> one = InitialShards(1, {});
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(map_->Create(3, *one).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(MustRead().shards, 2);  // unchanged

  std::unique_ptr<ClusterMap> other = backend_->Open("c2");
  EXPECT_EQ(other->Read().status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(other->Create(3, *one).ok());
  EXPECT_EQ(other->Read()->shards, 1);
  EXPECT_EQ(MustRead().shards, 2);
}

TEST_P(ClusterMapConformanceTest, AnUpdateAppliesOnlyToTheRevisionItRead) {
  CreateMap(2, 2);
  ClusterView v = MustRead();
  ShardInfo s = v.shard_list[1];
  ShardInfo stale = s;
  s.epoch = 1;
  s.primary = "n1";
  s.backups = {"n2"};
  s.joining = {"n4"};
  s.durable = true;
  s.handover_to = "n2";
  absl::StatusOr<int64_t> rev = map_->UpdateShard(s, {});
  ASSERT_TRUE(rev.ok()) << rev.status();
  EXPECT_GT(*rev, v.revision);

  // A second writer that read before the first wrote loses, and changes nothing.
  stale.epoch = 1;
  stale.primary = "n3";
  EXPECT_EQ(map_->UpdateShard(stale, {}).status().code(), absl::StatusCode::kFailedPrecondition);
  ClusterView after = MustRead();
  const ShardInfo* got = after.ShardById(s.id);
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(got->primary, "n1");
  EXPECT_EQ(got->backups, std::vector<std::string>{"n2"});
  EXPECT_EQ(got->joining, std::vector<std::string>{"n4"});  // every field round-trips
  EXPECT_TRUE(got->durable);
  EXPECT_EQ(got->handover_to, "n2");
  EXPECT_TRUE(got->split_at.empty());
  EXPECT_EQ(got->split_id, 0u);
  EXPECT_EQ(got->epoch, 1u);
  EXPECT_EQ(got->mod_revision, *rev);
  // The other shard was not touched.
  EXPECT_EQ(after.ShardById(v.shard_list[0].id)->mod_revision, v.shard_list[0].mod_revision);
}

// A split writes the shard, creates the new one and counts it in the config at once, only
// from the revisions it read; a split that does not fit the range, or reuses an id, is refused
// and changes nothing.
TEST_P(ClusterMapConformanceTest, ASplitReplacesOneShardByTwoAtOnceOrNotAtAll) {
  CreateMap(2, 2);
  ClusterView v = MustRead();
  ShardInfo asked = v.shard_list[1];  // [0x80, "")
  asked.split_at = "\x90";
  asked.split_id = 2;
  ASSERT_TRUE(map_->UpdateShard(asked, {}).ok());
  v = MustRead();
  ASSERT_EQ(v.ShardById(1)->split_at, "\x90");
  ASSERT_EQ(v.ShardById(1)->split_id, 2u);
  ShardInfo left = *v.ShardById(1);
  ShardInfo right = left;
  left.end = "\x90";
  left.epoch = 1;
  left.split_at.clear();
  left.split_id = 0;
  right.id = 2;
  right.start = "\x90";
  right.epoch = 1;
  right.split_at.clear();
  right.split_id = 0;

  // Ranges that do not split the shard, or a taken id: refused before anything is sent.
  ShardInfo wide = right;
  wide.end = "\xa0";
  EXPECT_EQ(map_->SplitShard(left, wide, v).status().code(), absl::StatusCode::kInvalidArgument);
  ShardInfo taken = right;
  taken.id = 0;
  EXPECT_EQ(map_->SplitShard(left, taken, v).status().code(), absl::StatusCode::kInvalidArgument);

  absl::StatusOr<int64_t> rev = map_->SplitShard(left, right, v);
  ASSERT_TRUE(rev.ok()) << rev.status();
  ClusterView after = MustRead();
  EXPECT_EQ(after.shards, 3);
  ASSERT_EQ(after.shard_list.size(), 3u);
  EXPECT_EQ(after.ShardById(1)->end, "\x90");
  EXPECT_EQ(after.ShardById(2)->start, "\x90");
  EXPECT_EQ(after.ShardById(2)->end, "");
  EXPECT_EQ(after.ShardById(2)->mod_revision, *rev);
  EXPECT_EQ(after.ShardFor("\x95")->id, 2u);
  EXPECT_EQ(after.ShardFor("\x85")->id, 1u);

  // The same split again, from the view read before it: the shard changed, nothing applies.
  right.id = 3;
  EXPECT_EQ(map_->SplitShard(left, right, v).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(MustRead().shards, 3);
  EXPECT_EQ(MustRead().ShardById(3), nullptr);

  // And merged back: one shard over both ranges, the other's record gone, at once.
  ClusterView split = MustRead();
  ShardInfo merged = *split.ShardById(1);
  merged.end = "";
  merged.epoch = 2;
  ShardInfo short_of = merged;
  short_of.end = "\xa0";
  EXPECT_EQ(map_->MergeShards(short_of, 2, split).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(map_->MergeShards(merged, 0, split).status().code(),
            absl::StatusCode::kInvalidArgument);  // shard 0 does not start where 1 ends
  rev = map_->MergeShards(merged, 2, split);
  ASSERT_TRUE(rev.ok()) << rev.status();
  ClusterView joined = MustRead();
  EXPECT_EQ(joined.shards, 2);
  EXPECT_EQ(joined.ShardById(2), nullptr);
  EXPECT_EQ(joined.ShardById(1)->end, "");
  EXPECT_EQ(joined.ShardFor("\x95")->id, 1u);
  EXPECT_EQ(map_->MergeShards(merged, 2, split).status().code(),
            absl::StatusCode::kFailedPrecondition);  // again from the old view: both changed
}

TEST_P(ClusterMapConformanceTest, OfManyConcurrentWritersFromOneReadExactlyOneWins) {
  CreateMap(1, 3);
  const ShardInfo read = MustRead().shard_list[0];
  std::vector<std::unique_ptr<ClusterMap>> handles;
  for (int i = 0; i < 4; ++i) handles.push_back(backend_->Open("c1"));
  std::atomic<int> wins{0}, conflicts{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      ShardInfo s = read;
      s.epoch = read.epoch + 1;
      s.primary = absl::StrCat("n", i);
      absl::StatusOr<int64_t> r = handles[i]->UpdateShard(s, {});
      if (r.ok()) ++wins;
      if (r.status().code() == absl::StatusCode::kFailedPrecondition) ++conflicts;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wins.load(), 1);
  EXPECT_EQ(conflicts.load(), 3);
}

TEST_P(ClusterMapConformanceTest, ANodeLivesUnderItsLeaseAndItsNameIsUnique) {
  CreateMap(1, 1);
  const LeaseId lease = MustLease(absl::Seconds(1));
  ASSERT_TRUE(map_->RegisterNode(Node("n1"), lease).ok());
  ClusterView v = MustRead();
  ASSERT_EQ(v.nodes.count("n1"), 1u);
  EXPECT_EQ(v.nodes.at("n1").rpc_address, Node("n1").rpc_address);

  // A second process under the same name is refused while the first lives.
  const LeaseId other = MustLease(absl::Seconds(5));
  absl::Status dup = map_->RegisterNode(Node("n1"), other);
  EXPECT_EQ(dup.code(), absl::StatusCode::kAlreadyExists) << dup;
  EXPECT_NE(dup.message().find("\"n1\""), std::string::npos) << dup;

  // Without keepalives the node disappears after its TTL; then the name is free again.
  EXPECT_TRUE(
      backend_->WaitUntil([&] { return MustRead().nodes.count("n1") == 0; }, absl::Seconds(5)));
  EXPECT_EQ(map_->KeepAlive(lease).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(map_->RegisterNode(Node("n1"), other).ok());
}

TEST_P(ClusterMapConformanceTest, APolicyIsSetAgainstTheConfigItReadAndOutlivesASplit) {
  CreateMap(2, 1);
  ClusterView v = MustRead();
  EXPECT_FALSE(v.policy.auto_rebalance);
  EXPECT_EQ(v.policy.max_shard_bytes, 0u);
  const PlacementPolicy policy{true, 1 << 20};
  ASSERT_TRUE(map_->SetPolicy(policy, v).ok());
  // Against the config as it was before: refused, changing nothing.
  EXPECT_EQ(map_->SetPolicy(PlacementPolicy{}, v).status().code(),
            absl::StatusCode::kFailedPrecondition);
  v = MustRead();
  EXPECT_TRUE(v.policy == policy);
  EXPECT_EQ(v.shards, 2);
  // A split rewrites the config's shard count and keeps the policy.
  ShardInfo left = v.shard_list[1];
  ShardInfo right = left;
  right.id = 2;
  right.start = left.start + "m";
  left.end = right.start;
  ASSERT_TRUE(map_->SplitShard(left, right, v).ok());
  v = MustRead();
  EXPECT_EQ(v.shards, 3);
  EXPECT_TRUE(v.policy == policy);
}

TEST_P(ClusterMapConformanceTest, LoadsAndThePlacerRoleLiveUnderTheirLeases) {
  CreateMap(2, 1);
  const LeaseId l1 = MustLease(absl::Seconds(1));
  const LeaseId l2 = MustLease(absl::Seconds(30));
  ASSERT_TRUE(map_->RegisterNode(Node("n1"), l1).ok());
  ShardLoad load{1, "n1", 4, 10, 12345, "k5"};
  ASSERT_TRUE(map_->PublishLoad(load, l1).ok());
  load.live_bytes = 23456;  // a newer measurement replaces the record
  ASSERT_TRUE(map_->PublishLoad(load, l1).ok());
  ClusterView v = MustRead();
  ASSERT_EQ(v.loads.count(1), 1u);
  EXPECT_EQ(v.loads.at(1).node, "n1");
  EXPECT_EQ(v.loads.at(1).epoch, 4u);
  EXPECT_EQ(v.loads.at(1).keys, 10u);
  EXPECT_EQ(v.loads.at(1).live_bytes, 23456u);
  EXPECT_EQ(v.loads.at(1).median_key, "k5");
  EXPECT_EQ(v.loads.count(0), 0u);

  // One placer at a time: the first campaign wins, the second node waits, the winner's
  // campaign is idempotent.
  EXPECT_EQ(v.placer, "");
  absl::StatusOr<bool> won = map_->Campaign("n1", l1);
  ASSERT_TRUE(won.ok()) << won.status();
  EXPECT_TRUE(*won);
  won = map_->Campaign("n2", l2);
  ASSERT_TRUE(won.ok()) << won.status();
  EXPECT_FALSE(*won);
  EXPECT_TRUE(*map_->Campaign("n1", l1));
  EXPECT_EQ(MustRead().placer, "n1");

  // n1's lease ends: its load and its role go with it, and n2 takes the role over.
  EXPECT_TRUE(backend_->WaitUntil(
      [&] {
        ClusterView now = MustRead();
        return now.loads.empty() && now.placer.empty();
      },
      absl::Seconds(5)));
  won = map_->Campaign("n2", l2);
  ASSERT_TRUE(won.ok()) << won.status();
  EXPECT_TRUE(*won);
  EXPECT_EQ(MustRead().placer, "n2");
  EXPECT_EQ(map_->PublishLoad(load, l1).code(), absl::StatusCode::kNotFound);
  won = map_->Campaign("n1", l1);
  ASSERT_TRUE(won.ok()) << won.status();
  EXPECT_FALSE(*won);
  ASSERT_TRUE(map_->RevokeLease(l2).ok());
  EXPECT_EQ(map_->Campaign("n1", l1).status().code(), absl::StatusCode::kNotFound);
}

TEST_P(ClusterMapConformanceTest, KeepAlivesKeepANodeBeyondItsTtl) {
  CreateMap(1, 1);
  const LeaseId lease = MustLease(absl::Seconds(1));
  ASSERT_TRUE(map_->RegisterNode(Node("n1"), lease).ok());
  // Three TTLs with a keepalive every 300 ms: still registered.
  int rounds = 0;
  EXPECT_FALSE(backend_->WaitUntil(
      [&] {
        absl::StatusOr<absl::Duration> ttl = map_->KeepAlive(lease);
        EXPECT_TRUE(ttl.ok()) << ttl.status();
        EXPECT_EQ(MustRead().nodes.count("n1"), 1u);
        ++rounds;
        return false;
      },
      absl::Seconds(3)));
  EXPECT_GT(rounds, 5);
  EXPECT_EQ(MustRead().nodes.count("n1"), 1u);
  // Revoking removes it at once.
  ASSERT_TRUE(map_->RevokeLease(lease).ok());
  EXPECT_EQ(MustRead().nodes.count("n1"), 0u);
  EXPECT_EQ(map_->KeepAlive(lease).status().code(), absl::StatusCode::kNotFound);
}

TEST_P(ClusterMapConformanceTest, AFailoverTransactionWaitsUntilTheDeadNodeIsGone) {
  CreateMap(1, 2);
  const LeaseId l1 = MustLease(absl::Seconds(1));
  const LeaseId l2 = MustLease(absl::Seconds(30));
  ASSERT_TRUE(map_->RegisterNode(Node("n1"), l1).ok());
  ASSERT_TRUE(map_->RegisterNode(Node("n2"), l2).ok());
  ShardInfo s = MustRead().shard_list[0];
  s.epoch = 1;
  s.primary = "n1";
  s.backups = {"n2"};
  ASSERT_TRUE(map_->UpdateShard(s, {}).ok());

  // n2 tries to take over while n1 is registered: refused.
  ShardInfo takeover = MustRead().shard_list[0];
  takeover.epoch = 2;
  takeover.primary = "n2";
  takeover.backups.clear();
  EXPECT_EQ(map_->UpdateShard(takeover, {"n1"}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(MustRead().StateOf(MustRead().shard_list[0]), ShardState::kServing);
  // Once n1's lease expired the same transaction applies.
  ASSERT_TRUE(backend_->WaitUntil(
      [&] {
        ClusterView v = MustRead();
        return v.StateOf(v.shard_list[0]) == ShardState::kPrimaryDown;
      },
      absl::Seconds(5)));
  takeover.mod_revision = MustRead().shard_list[0].mod_revision;
  ASSERT_TRUE(map_->UpdateShard(takeover, {"n1"}).ok());
  ClusterView v = MustRead();
  EXPECT_EQ(v.shard_list[0].primary, "n2");
  EXPECT_EQ(v.shard_list[0].epoch, 2u);
  EXPECT_EQ(v.StateOf(v.shard_list[0]), ShardState::kUnderReplicated);  // 1 of 2 replicas
}

TEST_P(ClusterMapConformanceTest, WatchersLearnOfShardChangesRegistrationsAndExpiries) {
  CreateMap(1, 1);
  Mutex mu;
  std::vector<int64_t> seen;
  auto seen_count = [&] {
    MutexLock l(&mu);
    return seen.size();
  };
  absl::StatusOr<std::unique_ptr<MapWatch>> watch = map_->Watch([&](int64_t revision) {
    MutexLock l(&mu);
    seen.push_back(revision);
  });
  ASSERT_TRUE(watch.ok()) << watch.status();

  ShardInfo s = MustRead().shard_list[0];
  s.epoch = 1;
  s.primary = "n1";
  absl::StatusOr<int64_t> rev = map_->UpdateShard(s, {});
  ASSERT_TRUE(rev.ok());
  ASSERT_TRUE(backend_->WaitUntil([&] { return seen_count() >= 1; }, absl::Seconds(5)));
  {
    MutexLock l(&mu);
    EXPECT_EQ(seen.back(), *rev);
  }

  const LeaseId lease = MustLease(absl::Seconds(1));
  ASSERT_TRUE(map_->RegisterNode(Node("n1"), lease).ok());
  ASSERT_TRUE(backend_->WaitUntil([&] { return seen_count() >= 2; }, absl::Seconds(5)));
  // The expiry is a change too.
  ASSERT_TRUE(backend_->WaitUntil([&] { return seen_count() >= 3; }, absl::Seconds(5)));
  EXPECT_EQ(MustRead().nodes.count("n1"), 0u);

  // Changes of another cluster are not this watch's business.
  std::unique_ptr<ClusterMap> other = backend_->Open("c2");
  ASSERT_TRUE(other->Create(1, *InitialShards(1, {})).ok());
  // After the handle is gone, no more calls.
  watch->reset();
  const size_t before = seen_count();
  s = MustRead().shard_list[0];
  s.epoch = 2;
  ASSERT_TRUE(map_->UpdateShard(s, {}).ok());
  backend_->WaitUntil([] { return false; }, absl::Milliseconds(300));
  EXPECT_EQ(seen_count(), before);
}

std::unique_ptr<Backend> MakeMemory(std::string*) { return std::make_unique<MemoryBackend>(); }

std::unique_ptr<Backend> MakeEtcd(std::string* skip) {
  absl::StatusOr<std::unique_ptr<testing::EtcdProcess>> etcd = testing::EtcdProcess::Start();
  if (!etcd.ok()) {
    if (etcd.status().code() == absl::StatusCode::kFailedPrecondition) {
      *skip = std::string(etcd.status().message());
      return nullptr;
    }
    ADD_FAILURE() << etcd.status();
    *skip = "etcd did not start";
    return nullptr;
  }
  return std::make_unique<EtcdBackend>(*std::move(etcd));
}

INSTANTIATE_TEST_SUITE_P(Backends, ClusterMapConformanceTest,
                         ::testing::Values(NamedFactory{"memory", MakeMemory},
                                           NamedFactory{"etcd", MakeEtcd}),
                         [](const auto& info) { return info.param.name; });

// Backend-specific: etcd errors name the endpoint.
TEST(EtcdClusterMapTest, AnUnreachableEtcdIsUnavailableNamingTheEndpoint) {
  // A port nobody listens on: bind, note, close.
  absl::StatusOr<std::unique_ptr<EtcdClusterMap>> map = EtcdClusterMap::Open("127.0.0.1:1", "c1");
  ASSERT_TRUE(map.ok());
  absl::StatusOr<ClusterView> v = (*map)->Read();
  EXPECT_EQ(v.status().code(), absl::StatusCode::kUnavailable) << v.status();
  EXPECT_NE(v.status().message().find("127.0.0.1:1"), std::string::npos) << v.status();
}

TEST(EtcdClusterMapTest, BadFlagsAreInvalidArgument) {
  EXPECT_EQ(EtcdClusterMap::Open("localhost", "c1").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EtcdClusterMap::Open("127.0.0.1:2379,", "c1").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EtcdClusterMap::Open("127.0.0.1:2379", "bad/name").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(EtcdClusterMapTest, AWatchSurvivesAnEtcdRestart) {
  absl::StatusOr<std::unique_ptr<testing::EtcdProcess>> etcd = testing::EtcdProcess::Start();
  if (!etcd.ok() && etcd.status().code() == absl::StatusCode::kFailedPrecondition) {
    GTEST_SKIP() << etcd.status().message();
  }
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  auto map = EtcdClusterMap::Open((*etcd)->endpoint(), "c1");
  ASSERT_TRUE(map.ok());
  ASSERT_TRUE((*map)->Create(1, *InitialShards(1, {})).ok());
  std::atomic<int64_t> last{0};
  auto watch = (*map)->Watch([&](int64_t revision) { last.store(revision); });
  ASSERT_TRUE(watch.ok());

  (*etcd)->Stop();
  EXPECT_EQ((*map)->Read().status().code(), absl::StatusCode::kUnavailable);
  ASSERT_TRUE((*etcd)->Restart().ok()) << (*etcd)->LogTail();

  ShardInfo s = (*map)->Read()->shard_list[0];
  s.epoch = 1;
  absl::StatusOr<int64_t> rev = (*map)->UpdateShard(s, {});
  ASSERT_TRUE(rev.ok()) << rev.status();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (last.load() < *rev && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
  EXPECT_GE(last.load(), *rev);
}

}  // namespace
}  // namespace unloadkv::cluster
