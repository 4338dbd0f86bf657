#include "transport/engine/target_model.h"

#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "transport/engine/adaptive_policy.h"
#include "transport/rnic/device.h"

namespace unloadkv::engine {
namespace {

class FixedClock : public Clock {
 public:
  absl::Time Now() const override { return now; }
  absl::Time now = absl::UnixEpoch() + absl::Seconds(100);
};

TEST(TargetModelTest, PublishesRegimeConfidenceAndAge) {
  FixedClock clock;
  TargetModel m("sim/3", &clock);
  EXPECT_FALSE(m.Read(5).known);
  EXPECT_TRUE(m.Due(5, 2048));
  m.Publish(5, Path::kUnload, 3200, 2400, 0);
  m.Publish(5, Path::kUnload, 3100, 2300, 2);
  TargetModel::CellReport r = m.Report(5);
  EXPECT_TRUE(r.state.known);
  EXPECT_EQ(r.state.regime, Path::kUnload);
  EXPECT_EQ(r.state.confidence, 2u);
  EXPECT_EQ(r.state.backoff, 2u);
  EXPECT_EQ(r.state.publications, 2u);
  EXPECT_EQ(r.offload_ns, 3100u);
  EXPECT_EQ(r.unload_ns, 2300u);
  clock.now += absl::Seconds(7);
  EXPECT_EQ(m.Report(5).age, absl::Seconds(7));
  m.Publish(5, Path::kOffload, 0, 0, 0);  // stopped early: latencies not measured
  EXPECT_EQ(m.Read(5).confidence, 1u);
  EXPECT_EQ(m.Report(5).offload_ns, 0u);
  EXPECT_FALSE(m.Read(4).known);  // cells are apart
}

TEST(TargetModelTest, OneProbePerCellUntilReleasedOrItsLeaseRunsOut) {
  FixedClock clock;
  TargetModel m("sim/3", &clock);
  ASSERT_TRUE(m.TryClaimProbe(0, 1, 1000));
  EXPECT_FALSE(m.TryClaimProbe(0, 2, 1000));
  EXPECT_TRUE(m.TryClaimProbe(1, 2, 1000));  // another cell
  EXPECT_TRUE(m.Report(0).probing);
  m.ReleaseProbe(0, 2);  // not the holder: nothing changes
  EXPECT_FALSE(m.TryClaimProbe(0, 2, 1000));
  m.AddWrites(0, 1000);  // the holder went quiet for the lease
  EXPECT_TRUE(m.TryClaimProbe(0, 2, 1000));
  EXPECT_EQ(m.Report(0).writes_since_probe, 0u);
  m.ReleaseProbe(0, 2);
  EXPECT_FALSE(m.Report(0).probing);
}

TEST(TargetModelTest, DueAfterTheBackedOffIntervalOfTheTargetsWrites) {
  FixedClock clock;
  TargetModel m("sim/3", &clock);
  ASSERT_TRUE(m.TryClaimProbe(2, 9, 1 << 20));
  m.Publish(2, Path::kUnload, 3000, 2000, 1);
  m.ReleaseProbe(2, 9);
  m.AddWrites(2, 4095);
  EXPECT_FALSE(m.Due(2, 2048));
  m.AddWrites(2, 1);
  EXPECT_TRUE(m.Due(2, 2048));
}

TEST(TargetModelTest, TrendSettlesWhenLatencyStopsFalling) {
  FixedClock clock;
  TargetModel m("sim/3", &clock);
  for (int b = 0; b < 12; ++b) m.AddTrendBlock(4000 - 100 * b, 12, 0.03);  // warming up
  EXPECT_FALSE(m.settled());
  m.AddTrendBlock(2700, 12, 0.03);  // 13th block: 2700 vs 4000 twelve blocks before
  EXPECT_FALSE(m.settled());
  for (int b = 0; b < 12; ++b) m.AddTrendBlock(2700, 12, 0.03);
  EXPECT_TRUE(m.settled());
}

TEST(TargetModelsTest, OneModelPerPeerDevice) {
  FixedClock clock;
  TargetModels models(&clock);
  std::shared_ptr<TargetModel> a = models.For("soft", "127.0.0.1:4791");
  EXPECT_EQ(a, models.For("soft", "127.0.0.1:4791"));
  EXPECT_NE(a, models.For("soft", "127.0.0.1:4792"));
  EXPECT_NE(a, models.For("sim", "127.0.0.1:4791"));
  EXPECT_EQ(a->key(), "soft/127.0.0.1:4791");
  a->Publish(0, Path::kUnload, 3000, 2000, 0);
  TargetModelSummary s = Summarize(models);
  EXPECT_EQ(s.targets, 3u);
  EXPECT_EQ(s.cells[static_cast<int>(Path::kUnload)], 1u);
  EXPECT_EQ(s.cells[static_cast<int>(Path::kOffload)], 0u);
  EXPECT_DOUBLE_EQ(s.mean_ns[static_cast<int>(Path::kUnload)], 2000);
}

// Concurrent claims: exactly one of the contenders holds a cell at a time (run under TSan).
TEST(TargetModelTest, ConcurrentClaimsHaveOneWinner) {
  FixedClock clock;
  TargetModel m("sim/3", &clock);
  std::atomic<int> holders{0}, max_holders{0};
  std::vector<std::thread> threads;
  for (uint64_t owner = 1; owner <= 4; ++owner) {
    threads.emplace_back([&, owner] {
      for (int i = 0; i < 20000; ++i) {
        m.AddWrites(7, 1);
        m.AddTrendBlock(1000, 12, 0.03);
        if (!m.TryClaimProbe(7, owner, uint64_t{1} << 40)) continue;
        int now = holders.fetch_add(1) + 1;
        int seen = max_holders.load();
        while (now > seen && !max_holders.compare_exchange_weak(seen, now)) {
        }
        m.Publish(7, Path::kUnload, 2000, 1000, 0);
        holders.fetch_sub(1);
        m.ReleaseProbe(7, owner);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(max_holders.load(), 1);
  EXPECT_GT(m.Read(7).publications, 0u);
}

// A synthetic target where unload is faster for every write; `n` writes of one policy.
int Unloaded(AdaptivePolicy& policy, int n, uint64_t first_page) {
  int unloaded = 0;
  for (int i = 0; i < n; ++i) {
    Decision d = policy.Decide((first_page + i) << 12, 64, true);
    policy.Observe(d, {absl::Nanoseconds(d.path == Path::kOffload ? 3200 : 2400)});
    unloaded += d.path == Path::kUnload;
  }
  return unloaded;
}

TEST(SharedTargetPolicyTest, ANewConnectionStartsInTheRegimeOthersLearned) {
  FixedClock clock;
  auto model = std::make_shared<TargetModel>("sim/1", &clock);
  AdaptivePolicy first;
  first.AttachTarget(model);
  Unloaded(first, 20000, 0);
  ASSERT_EQ(first.regime(0, 0), Path::kUnload);
  ASSERT_TRUE(model->Read(0).known);
  AdaptivePolicy second;
  second.AttachTarget(model);
  EXPECT_EQ(second.regime(0, 0), Path::kUnload);
  EXPECT_EQ(Unloaded(second, 500, 1 << 20), 500);  // from its first write, no probe due
  AdaptivePolicy alone;  // without the model: starts offloaded, as every connection did
  EXPECT_EQ(Unloaded(alone, 500, 1 << 20), 0);
}

TEST(SharedTargetPolicyTest, ShortLivedConnectionsLearnTogether) {
  FixedClock clock;
  auto model = std::make_shared<TargetModel>("sim/1", &clock);
  int late_unloaded = 0;
  for (int k = 0; k < 64; ++k) {
    AdaptivePolicy p;
    p.AttachTarget(model);
    const int u = Unloaded(p, 500, uint64_t(k) << 20);
    if (k >= 16) late_unloaded += u;
  }
  // Alone, none of them lives long enough to settle and probe (1664 writes).
  EXPECT_GT(late_unloaded, 48 * 500 * 0.95);
}

TEST(SharedTargetPolicyTest, ADestroyedProberReleasesItsClaim) {
  FixedClock clock;
  auto model = std::make_shared<TargetModel>("sim/1", &clock);
  {
    AdaptivePolicy p;
    p.AttachTarget(model);
    // Settles (1664 writes), then probes: stop inside the probe.
    for (int i = 0; i < 4000 && !model->Report(0).probing; ++i) Unloaded(p, 1, i);
    ASSERT_TRUE(model->Report(0).probing);
  }
  EXPECT_FALSE(model->Report(0).probing);
}

// A connection that closes inside its probe shares the result when both measured halves heard
// of half their writes; with less it only gives up the claim.
TEST(SharedTargetPolicyTest, AConnectionClosingMidProbeSharesWhatItMeasured) {
  // After the probe's first write: 128 unloaded writes (the second 64 measured), then offloaded
  // ones, measured from the 193rd probe write on.
  for (const auto& [writes_after_start, shared] : {std::pair{230, true}, std::pair{200, false}}) {
    FixedClock clock;
    auto model = std::make_shared<TargetModel>("sim/1", &clock);
    {
      AdaptivePolicy p;
      p.AttachTarget(model);
      int i = 0;
      for (; i < 4000 && !model->Report(0).probing; ++i) Unloaded(p, 1, i);
      ASSERT_TRUE(model->Report(0).probing);
      Unloaded(p, writes_after_start, i);
      EXPECT_FALSE(model->Read(0).known);
    }
    EXPECT_FALSE(model->Report(0).probing) << writes_after_start;
    EXPECT_EQ(model->Read(0).known, shared) << writes_after_start;
    if (shared) {
      EXPECT_EQ(model->Read(0).regime, Path::kUnload);
      EXPECT_EQ(model->Report(0).offload_ns, 3200u);
      EXPECT_EQ(model->Report(0).unload_ns, 2400u);
    }
  }
}

// Re-probes of a plainly slower path back off target-wide: a connection routed by the model
// continues the model's back-off instead of starting its own from the shortest interval.
TEST(SharedTargetPolicyTest, ReprobesBackOffAcrossShortConnections) {
  FixedClock clock;
  auto model = std::make_shared<TargetModel>("sim/1", &clock);
  model->Publish(0, Path::kUnload, 3200, 2400, 0);
  int probing_connections = 0;
  for (int k = 0; k < 40; ++k) {  // 20,000 writes
    AdaptivePolicy p;
    p.AttachTarget(model);
    probing_connections += Unloaded(p, 500, uint64_t(k) << 20) < 500;
  }
  EXPECT_EQ(model->Read(0).regime, Path::kUnload);
  // Due after 2048, 4096 and 8192 of the target's writes: backed off 3 times. Each connection
  // starting from back-off 0 re-probed every 4096 writes (5 probes) and never got past 1.
  EXPECT_EQ(model->Read(0).backoff, 3u);
  EXPECT_EQ(probing_connections, 3);
}

// The target's hint that its translation cache is full lets a lone connection (no model to
// share) probe at once: without it, a 500-write connection never settles (1664 writes).
TEST(TargetHintTest, AFullTranslationCacheLetsAShortConnectionProbe) {
  AdaptivePolicy told;
  told.OnTargetHint(rnic::TranslationCacheState::kFull);
  EXPECT_GT(Unloaded(told, 500, 0), 500 / 2);
  for (rnic::TranslationCacheState hint :
       {rnic::TranslationCacheState::kUnknown, rnic::TranslationCacheState::kWarming}) {
    AdaptivePolicy untold;
    untold.OnTargetHint(hint);
    EXPECT_EQ(Unloaded(untold, 500, 0), 0) << static_cast<int>(hint);
  }
}

// A connection whose own writes disagree with the model diverges by its own probes.
TEST(SharedTargetPolicyTest, AConnectionWhoseWorldDiffersDiverges) {
  FixedClock clock;
  auto model = std::make_shared<TargetModel>("sim/1", &clock);
  model->Publish(0, Path::kUnload, 3200, 2400, 0);
  AdaptivePolicy p;
  p.AttachTarget(model);
  int offloaded_late = 0;
  for (int i = 0; i < 20000; ++i) {
    Decision d = p.Decide(uint64_t(i) << 12, 64, true);
    p.Observe(d, {absl::Nanoseconds(d.path == Path::kOffload ? 1500 : 2400)});  // offload faster
    if (i >= 15000) offloaded_late += d.path == Path::kOffload;
  }
  EXPECT_GT(offloaded_late, 5000 * 0.95);
  EXPECT_EQ(model->Read(0).regime, Path::kOffload);  // and published what it found
}

}  // namespace
}  // namespace unloadkv::engine
