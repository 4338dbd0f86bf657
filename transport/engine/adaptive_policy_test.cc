#include "transport/engine/adaptive_policy.h"

#include <algorithm>
#include <deque>
#include <random>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "transport/rnic/device.h"

namespace unloadkv::engine {
namespace {

// A synthetic world: offload is fast on hot pages and slow on cold ones, unload costs the same
// everywhere. The policy must discover that from latencies alone.
absl::Duration WorldLatency(Path p, bool hot) {
  if (p == Path::kUnload) return absl::Nanoseconds(2300);
  return absl::Nanoseconds(hot ? 1500 : 3200);
}

TEST(AdaptivePolicyTest, KeepsHotPagesOffloadedAndUnloadsColdOnes) {
  AdaptivePolicy policy;
  std::mt19937_64 rng(5);
  int hot_offloaded = 0, hot_total = 0, cold_unloaded = 0, cold_total = 0;
  for (int i = 0; i < 200000; ++i) {
    bool hot = rng() % 2 == 0;
    uint64_t page = hot ? rng() % 16 : 1000 + rng() % 1000000;
    Decision d = policy.Decide(page << 12, 64, true);
    policy.Observe(d, {WorldLatency(d.path, hot)});
    if (i < 100000) continue;  // measure after learning
    if (hot) {
      ++hot_total;
      hot_offloaded += d.path == Path::kOffload;
    } else {
      ++cold_total;
      cold_unloaded += d.path == Path::kUnload;
    }
  }
  EXPECT_GT(hot_offloaded, hot_total * 0.95);
  EXPECT_GT(cold_unloaded, cold_total * 0.95);
  EXPECT_GT(policy.switches(), 0u);
}

TEST(AdaptivePolicyTest, FollowsAChangeInWhichPathIsFaster) {
  AdaptivePolicy policy;
  auto run = [&](absl::Duration offload, absl::Duration unload, int n) {
    int unloaded = 0;
    for (int i = 0; i < n; ++i) {
      Decision d = policy.Decide(uint64_t(i % 100000) << 12, 64, true);
      policy.Observe(d, {d.path == Path::kOffload ? offload : unload});
      if (i >= n / 2) unloaded += d.path == Path::kUnload;
    }
    return static_cast<double>(unloaded) / (n / 2);
  };
  EXPECT_GT(run(absl::Nanoseconds(3000), absl::Nanoseconds(2000), 50000), 0.9);
  EXPECT_LT(run(absl::Nanoseconds(1500), absl::Nanoseconds(2000), 50000), 0.1);
}

// The world of the simulated fabric at 4 GiB with two unload workers: unload's first writes
// are slow (one-time costs, then start-up contention), after that unload is faster. A policy that
// let the first explored samples count would judge unload by them for thousands of writes.
TEST(AdaptivePolicyTest, OneTimeCostsOfAPathsFirstWritesDoNotDecide) {
  AdaptivePolicy policy;
  int seen[2] = {0, 0};
  int unloaded = 0;
  constexpr int kWrites = 6000;  // the first probe waits for ~1500 writes of steady latency
  for (int i = 0; i < kWrites; ++i) {
    Decision d = policy.Decide(uint64_t(1000 + i) << 12, 64, true);
    const int p = static_cast<int>(d.path);
    // As measured there: unload's first two writes 9.5 us, the next few 3.85 us while the
    // start-up burst of offloaded writes still occupies the NIC, then 2.4 us.
    const int n = seen[p]++;
    absl::Duration lat = d.path == Path::kOffload ? absl::Nanoseconds(3150)
                         : n < 2                  ? absl::Nanoseconds(9500)
                         : n < 8                  ? absl::Nanoseconds(3850)
                                                  : absl::Nanoseconds(2400);
    policy.Observe(d, {lat});
    if (i >= kWrites / 2) unloaded += d.path == Path::kUnload;
  }
  EXPECT_GT(unloaded, kWrites / 2 * 0.9);
}

// As measured on the simulated fabric at 4 GiB: the first few dozen unloaded writes of a
// connection are slow (first-use translation misses, start-up contention), later ones fast.
// What those early writes saw must not keep the policy off the path for good.
TEST(AdaptivePolicyTest, EarlySlowWritesOfAPathDoNotKeepThePolicyOffIt) {
  AdaptivePolicy policy;
  int unload_samples = 0, unloaded = 0;
  constexpr int kWrites = 12000;
  for (int i = 0; i < kWrites; ++i) {
    Decision d = policy.Decide(uint64_t(1000 + i) << 12, 64, true);
    absl::Duration lat = absl::Nanoseconds(3200);
    if (d.path == Path::kUnload) {
      lat = absl::Nanoseconds(unload_samples++ < 40 ? 4300 : 2900);
    }
    policy.Observe(d, {lat});
    if (i >= kWrites - 2000) unloaded += d.path == Path::kUnload;
  }
  EXPECT_GT(unloaded, 2000 * 0.9) << "still on offload after " << unload_samples
                                  << " unload samples";
}

// Paths that share a resource: the more writes go to unload, the slower both paths get (the
// unload worker queues; the initiator's CPU handles more acks). A write sent alone down the
// unload path is fast, so comparing single writes settles where both paths take 3.5 us (half
// the writes unloaded); keeping every write on offload is faster (3 us). The policy must
// compare regimes, not single writes.
TEST(AdaptivePolicyTest, ComparesRegimesWhenPathsShareAResource) {
  AdaptivePolicy policy;
  std::deque<int> recent;  // paths of the last 64 writes
  int in_window = 0, unloaded = 0;
  constexpr int kWrites = 50000;
  for (int i = 0; i < kWrites; ++i) {
    Decision d = policy.Decide(uint64_t(1000 + i % 100000) << 12, 64, true);
    const int u = d.path == Path::kUnload;
    recent.push_back(u);
    in_window += u;
    if (recent.size() > 64) {
      in_window -= recent.front();
      recent.pop_front();
    }
    const double share = static_cast<double>(in_window) / recent.size();
    const double ns = u ? 2000 + 3000 * share : 3000 + 1000 * share;
    policy.Observe(d, {absl::Nanoseconds(ns)});
    if (i >= kWrites / 2) unloaded += u;
  }
  EXPECT_LT(unloaded, kWrites / 2 * 0.05) << "settled on a mix slower than offload alone";
}

// A translation cache warming up: offload gets faster the more writes went that way (at a 4 MiB
// working set on the simulated fabric, from 3.2 us to 1.9 us over about 3000 writes), unload
// costs 2.3 us throughout. Judged early, offload looks slower, and once unloaded the cache would
// never warm: the policy must wait until the latency has stopped falling.
TEST(AdaptivePolicyTest, WaitsForAWarmingCacheBeforeJudgingOffload) {
  AdaptivePolicy policy;
  int offloaded_so_far = 0, offloaded_late = 0;
  constexpr int kWrites = 10000;
  for (int i = 0; i < kWrites; ++i) {
    Decision d = policy.Decide(uint64_t(1000 + i % 1024) << 12, 64, true);
    absl::Duration lat = absl::Nanoseconds(2300);
    if (d.path == Path::kOffload) {
      const double warm = std::min(1.0, offloaded_so_far++ / 3000.0);
      lat = absl::Nanoseconds(3200 - 1300 * warm);
    }
    policy.Observe(d, {lat});
    if (i >= kWrites - 2000) offloaded_late += d.path == Path::kOffload;
  }
  EXPECT_GT(offloaded_late, 2000 * 0.9) << "judged offload while its cache was still warming";
}

// The engine's side of lazy writes: an offloaded lazy write is observed when the policy asked
// for its latency (Decision::observe) or when it is the signaled one of eight.
bool EngineObserves(const Decision& d, int* offloaded_lazy) {
  return d.path == Path::kUnload || d.observe || ++*offloaded_lazy % 8 == 0;
}

// The KV client's pattern: value writes are lazy, so the engine observes only every eighth
// offloaded one (the signaled one) and reports the rest as Unobserved; unloaded writes are all
// observed. The policy must still finish its probes and find that unload is faster.
TEST(AdaptivePolicyTest, LearnsWhenMostOffloadedWritesAreNeverObserved) {
  for (bool sparse : {false, true}) {
    AdaptivePolicy policy;
    std::mt19937_64 rng(11);
    int offloaded_seen = 0, unloaded_late = 0, total_late = 0;
    for (int i = 0; i < 20000; ++i) {
      Decision d = policy.Decide((1000 + rng() % 1000000) << 12, 1000, true);
      if (sparse && !EngineObserves(d, &offloaded_seen)) {
        policy.Unobserved(d);
      } else {
        policy.Observe(d, {absl::Nanoseconds(d.path == Path::kUnload ? 1800 : 2900)});
      }
      if (i >= 10000) {
        ++total_late;
        unloaded_late += d.path == Path::kUnload;
      }
    }
    EXPECT_GT(unloaded_late, total_late * 9 / 10) << (sparse ? "sparse" : "dense");
  }
}

// A short-lived KV client's connection to a target whose translation cache is full: it probes
// within its first writes, before it has observed the 16 regular writes a probe's early stop
// compares with. It must finish that probe (and unload), not stop it against an unknown latency.
TEST(AdaptivePolicyTest, AShortLazyConnectionFinishesItsFirstProbe) {
  AdaptivePolicy policy;
  policy.OnTargetHint(rnic::TranslationCacheState::kFull);
  std::mt19937_64 rng(5);
  int offloaded_seen = 0, unloaded_late = 0;
  for (int i = 0; i < 1250; ++i) {
    Decision d = policy.Decide((1000 + rng() % 1000000) << 12, 1000, true);
    if (!EngineObserves(d, &offloaded_seen)) {
      policy.Unobserved(d);
    } else {
      policy.Observe(d, {absl::Nanoseconds(d.path == Path::kUnload ? 2400 : 3200)});
    }
    if (i >= 750) unloaded_late += d.path == Path::kUnload;
  }
  EXPECT_EQ(policy.regime(AdaptivePolicy::SizeClass(1000), 0), Path::kUnload);
  EXPECT_GT(unloaded_late, 500 * 9 / 10);
}

// A KV client: one write and one request per operation, one operation at a time. Where the
// writes' own latencies say nothing (equal on both paths) or the opposite of what the requests
// say, the requests decide: they are what the application waits for.
TEST(AdaptivePolicyTest, RequestsDecideWhereTheWritesOwnLatencyMisleads) {
  struct Case {
    double offload_write_ns, unload_write_ns, offload_request_ns, unload_request_ns;
    Path expected;
  } cases[] = {
      {2800, 2800, 3700, 3000, Path::kUnload},   // the writes tie, unloaded requests faster
      {2800, 3300, 3700, 3000, Path::kUnload},   // unloaded writes slower, requests faster
      {3300, 2800, 3000, 3700, Path::kOffload},  // unloaded writes faster, requests slower
  };
  for (const Case& c : cases) {
    AdaptivePolicy policy;
    std::mt19937_64 rng(3);
    int late_on_expected = 0;
    for (int i = 0; i < 20000; ++i) {
      Decision d = policy.Decide((1000 + rng() % 1000000) << 12, 1000, true);
      const bool unloaded = d.path == Path::kUnload;
      policy.Observe(d, {absl::Nanoseconds(unloaded ? c.unload_write_ns : c.offload_write_ns)});
      policy.ObserveRequest(
          absl::Nanoseconds(unloaded ? c.unload_request_ns : c.offload_request_ns));
      if (i >= 15000) late_on_expected += d.path == c.expected;
    }
    EXPECT_GT(late_on_expected, 5000 * 9 / 10)
        << c.offload_write_ns << "/" << c.unload_write_ns << " ns writes, " << c.offload_request_ns
        << "/" << c.unload_request_ns << " ns requests";
  }
}

// Reads between the writes (YCSB B: 95%) take as long on either path; averaged in, they would
// hide the writes' requests' difference (19 reads of 2.7 us per write: 1.3%, within the 3%
// hysteresis). Only a request after a write counts.
TEST(AdaptivePolicyTest, ReadsBetweenWritesDoNotDiluteTheRequestsDifference) {
  AdaptivePolicy policy;
  std::mt19937_64 rng(3);
  int unloaded_late = 0;
  for (int i = 0; i < 20000; ++i) {
    Decision d = policy.Decide((1000 + rng() % 1000000) << 12, 1000, true);
    const bool unloaded = d.path == Path::kUnload;
    policy.Observe(d, {absl::Nanoseconds(2800)});
    policy.ObserveRequest(absl::Nanoseconds(unloaded ? 3000 : 3700));
    for (int r = 0; r < 19; ++r) policy.ObserveRequest(absl::Nanoseconds(2700));
    if (i >= 15000) unloaded_late += unloaded;
  }
  EXPECT_GT(unloaded_late, 5000 * 9 / 10);
}

// A bulk load: four lazy writes to each fresh page, one after another. An offloaded write to a
// page whose translation the NIC has not loaded (no earlier offloaded write to it) misses;
// unloading a page's first write ("cold" to the heat sketch, the next three are "warm") only
// moves the miss to its next offloaded write. Offload-only is best (2725 ns a write against
// 2850 mixed, 2900 unload-only): the policy must not keep a mix. And only the writes a probe
// measures ask to be observed: few enough that lazy writes mostly stay quiet.
TEST(AdaptivePolicyTest, KeepsNoMixWithinPagesAndAsksForFewObservations) {
  AdaptivePolicy policy;
  int offloaded_lazy = 0, unloaded_late = 0, asked = 0;
  constexpr int kWrites = 200000;
  uint64_t cached_page = 0;  // the last page whose translation an offloaded write loaded
  for (int i = 0; i < kWrites; ++i) {
    const uint64_t page = 1000 + i / 4;
    Decision d = policy.Decide((page << 12) + (i % 4) * 1024, 1000, true);
    asked += d.observe;
    int ns = 2900;
    if (d.path == Path::kOffload) {
      ns = cached_page == page ? 2400 : 3700;
      cached_page = page;
    }
    if (EngineObserves(d, &offloaded_lazy)) {
      policy.Observe(d, {absl::Nanoseconds(ns)});
    } else {
      policy.Unobserved(d);
    }
    if (i >= kWrites / 2) unloaded_late += d.path == Path::kUnload;
  }
  EXPECT_LT(unloaded_late, kWrites / 2 / 20) << "kept a mix that is slower than offload-only";
  EXPECT_GT(asked, 0) << "probes measured writes the engine may never report";
  EXPECT_LT(asked, kWrites / 10);
}

// Four lazy writes to each fresh page again, but here each page's first write ("cold") pays
// a miss offloaded (3700 ns) whatever path the others took, and its later ones ("warm") never
// do (2000 ns); unloaded writes take 2900. The engine observes one lazy write in eight (and
// every unloaded one), always a page's fourth here: the cold cell's writes are heard of only in its
// probes, and the connection's observed writes are much faster than its own. It must still probe
// (not wait forever for an observation), and not stop its probe early against the other
// cell's latency: the cold cell unloads, the warm one stays offloaded.
TEST(AdaptivePolicyTest, ACellHeardOfOnlyInItsProbesStillLearns) {
  AdaptivePolicy policy;
  int cold_unloaded_late = 0, warm_unloaded_late = 0;
  constexpr int kWrites = 8000;  // the first probe may start after 1536 + 256 writes
  for (int i = 0; i < kWrites; ++i) {
    const bool cold = i % 4 == 0;
    Decision d = policy.Decide(((1000 + uint64_t(i) / 4) << 12) + (i % 4) * 1024, 1000, true);
    const int ns = d.path == Path::kUnload ? 2900 : cold ? 3700 : 2000;
    if (d.path == Path::kUnload || d.observe || i % 8 == 7) {
      policy.Observe(d, {absl::Nanoseconds(ns)});
    } else {
      policy.Unobserved(d);
    }
    if (i < kWrites / 2 || d.path != Path::kUnload) continue;
    ++(cold ? cold_unloaded_late : warm_unloaded_late);
  }
  EXPECT_GT(cold_unloaded_late, kWrites / 2 / 4 * 9 / 10);
  EXPECT_LT(warm_unloaded_late, kWrites / 2 * 3 / 4 / 10);
}

// Unload is faster everywhere here, yet writes to a handful of very hot pages stay offloaded
// (their translations stay cached on a real NIC), while the others move to unload.
TEST(AdaptivePolicyTest, VeryHotPagesStayOffloadedEvenWhereUnloadIsFaster) {
  AdaptivePolicy policy;
  std::mt19937_64 rng(3);
  int hot_unloaded = 0, cold_unloaded = 0, cold_total = 0;
  for (int i = 0; i < 40000; ++i) {
    const bool hot = rng() % 2 == 0;
    const uint64_t page = hot ? rng() % 8 : 1000 + rng() % 1000000;
    Decision d = policy.Decide(page << 12, 64, true);
    policy.Observe(d, {absl::Nanoseconds(d.path == Path::kUnload ? 1500 : 3000)});
    if (i < 20000) continue;
    if (hot) {
      hot_unloaded += d.path == Path::kUnload;
    } else {
      ++cold_total;
      cold_unloaded += d.path == Path::kUnload;
    }
  }
  EXPECT_EQ(hot_unloaded, 0);
  EXPECT_GT(cold_unloaded, cold_total * 0.9);
  AdaptivePolicy::Options no_pin;
  no_pin.hot_stays_offloaded = false;
  AdaptivePolicy free_policy(no_pin);
  int unloaded = 0;
  for (int i = 0; i < 40000; ++i) {
    Decision d = free_policy.Decide(uint64_t(rng() % 8) << 12, 64, true);
    free_policy.Observe(d, {absl::Nanoseconds(d.path == Path::kUnload ? 1500 : 3000)});
    if (i >= 20000) unloaded += d.path == Path::kUnload;
  }
  EXPECT_GT(unloaded, 20000 * 0.9) << "without the pin, hot pages follow the faster path";
}

// A rare cell (here 3% of the writes, to warm pages) does not probe on its own: its switch
// would not show in the connection's mean. It follows its colder cell, which found unload
// faster.
TEST(AdaptivePolicyTest, ARareCellFollowsItsColderCell) {
  AdaptivePolicy policy;
  std::mt19937_64 rng(4);
  int warm_unloaded = 0, warm_total = 0;
  for (int i = 0; i < 30000; ++i) {
    const bool warm = rng() % 100 < 3;
    const uint64_t page = warm ? 100 + rng() % 256 : 1000000 + rng() % 10000000;
    Decision d = policy.Decide(page << 12, 64, true);
    policy.Observe(d, {absl::Nanoseconds(d.path == Path::kUnload ? 2300 : 3200)});
    if (i >= 20000 && warm) {
      ++warm_total;
      warm_unloaded += d.path == Path::kUnload;
    }
  }
  ASSERT_GT(warm_total, 200);
  EXPECT_GT(warm_unloaded, warm_total * 0.95);
  EXPECT_EQ(policy.regime(0, 1), Path::kUnload);
}

TEST(AdaptivePolicyTest, DoesNotFlapBetweenNearlyEqualPaths) {
  AdaptivePolicy policy;
  // Unload 1.5% slower than offload, with up to 2% noise: inside the 3% hysteresis, so
  // neither regime may win over the other for good.
  ASSERT_GT(AdaptivePolicy::Options().hysteresis, 0.015);
  std::mt19937_64 rng(9);
  const int cell_size = AdaptivePolicy::SizeClass(64);
  Path regime_after_warmup = Path::kOffload;
  uint64_t on_regime = 0, late_writes = 0;
  for (int i = 0; i < 100000; ++i) {
    if (i == 20000) regime_after_warmup = policy.regime(cell_size, 0);
    Decision d = policy.Decide(uint64_t(rng() % 1000000) << 12, 64, true);
    if (i >= 20000) {
      ++late_writes;
      if (d.path == regime_after_warmup) ++on_regime;
    }
    double base = d.path == Path::kOffload ? 2000 : 2030;
    policy.Observe(d, {absl::Nanoseconds(base + static_cast<double>(rng() % 40))});
  }
  EXPECT_LE(policy.switches(), 2u);
  // The regime chosen by 20000 writes holds to the end, and probes of the other path take a
  // small share of the writes.
  EXPECT_EQ(policy.regime(cell_size, 0), regime_after_warmup);
  EXPECT_GE(static_cast<double>(on_regime) / late_writes, 0.9)
      << on_regime << " of " << late_writes << " on the regime's path";
}

// A backlogged stream over two paths that keep different numbers of writes in flight (`room`)
// and serve one every `service_ns` (offload, unload). Each write is decided, then waits until
// its path has room (completing the earliest writes first, in virtual time). Returns the
// unloaded share of the stream's second half.
struct PipelinePaths {
  double service_ns[2];
  size_t room[2];
};
double RunPipeline(AdaptivePolicy* policy, bool waited, int n, const PipelinePaths& paths) {
  struct InFlight {
    Decision d;
    double decided_ns, posted_ns, done_ns;
  };
  const double* service_ns = paths.service_ns;
  const size_t* room = paths.room;
  std::deque<InFlight> queue[2];
  double last_done_ns[2] = {0, 0};
  double now_ns = 0;
  int unloaded = 0;
  for (int i = 0; i < n; ++i) {
    const Decision d = policy->Decide(uint64_t(i % 100000) << 12, 1024, true);
    if (i >= n / 2) unloaded += d.path == Path::kUnload;
    const int p = static_cast<int>(d.path);
    const double decided_ns = now_ns;
    while (queue[p].size() >= room[p]) {
      const int q = queue[1 - p].empty() || queue[p].front().done_ns <= queue[1 - p].front().done_ns
                        ? p
                        : 1 - p;
      const InFlight done = queue[q].front();
      queue[q].pop_front();
      now_ns = std::max(now_ns, done.done_ns);
      policy->Observe(done.d, {absl::Nanoseconds(done.done_ns - done.posted_ns), waited,
                               absl::Nanoseconds(done.posted_ns - done.decided_ns)});
    }
    last_done_ns[p] = std::max(now_ns, last_done_ns[p]) + service_ns[p];
    queue[p].push_back({d, decided_ns, now_ns, last_done_ns[p]});
  }
  return static_cast<double>(unloaded) / (n - n / 2);
}

// Offload serves a write every 160 ns with 16 in flight (2.56 us latency), unload one every
// 140 ns with 64 in flight, the staging ring (8.96 us): latency favors offload, the rate unload.
constexpr PipelinePaths kShallowSendQueue = {{160, 140}, {16, 64}};

TEST(AdaptivePolicyTest, ABackloggedStreamIsJudgedByTimePerWriteNotLatency) {
  AdaptivePolicy backlogged;
  EXPECT_GT(RunPipeline(&backlogged, /*waited=*/true, 60000, kShallowSendQueue), 0.9);
  EXPECT_GT(backlogged.switches(), 0u);
  // The same stream with writes posted as they come: the latency is what the writer waits for.
  AdaptivePolicy open;
  EXPECT_LT(RunPipeline(&open, /*waited=*/false, 60000, kShallowSendQueue), 0.1);
  // A backlogged connection waits for a staging slot rather than overflow to offload.
  EXPECT_EQ(backlogged.OnRingFull(), FullRingAction::kWait);
  EXPECT_EQ(open.OnRingFull(), FullRingAction::kOffload);
}

// Soft, a shard's transfer of 4 KiB writes: offload keeps hundreds in flight and is the faster
// path (6.3 us per write against 11). With halves of 64 writes, shorter than one latency, the
// probes measured the previous block's queue draining and unloaded 84-99% of the transfer.
TEST(AdaptivePolicyTest, ABackloggedStreamsProbesOutlastItsQueue) {
  AdaptivePolicy deep;
  EXPECT_LT(RunPipeline(&deep, /*waited=*/true, 60000, {{6300, 11000}, {364, 64}}), 0.1);
  // The same queues with unload the faster path.
  AdaptivePolicy faster_unload;
  EXPECT_GT(RunPipeline(&faster_unload, /*waited=*/true, 60000, {{6300, 4000}, {364, 64}}), 0.9);
}

TEST(AdaptivePolicyTest, NeverUnloadsAWriteThatDoesNotFitASlot) {
  AdaptivePolicy policy;
  for (int i = 0; i < 10000; ++i) {
    Decision d = policy.Decide(uint64_t(i) << 12, 1 << 20, false);
    ASSERT_EQ(d.path, Path::kOffload);
  }
}

TEST(HeatSketchTest, FrequentPagesEstimateHigherAndCoolDown) {
  HeatSketch sketch(16, 1000);
  EXPECT_EQ(sketch.Estimate(7), 0u) << "a sketch nothing was added to";
  for (int i = 0; i < 900; ++i) {
    sketch.Add(7);
    sketch.Add(100000 + i);
  }
  EXPECT_GT(sketch.Estimate(7), 100u);
  EXPECT_LE(sketch.Estimate(555555), 2u);
  for (int i = 0; i < 5000; ++i) sketch.Add(200000 + i);  // several halvings
  EXPECT_LT(sketch.Estimate(7), 60u);
}

}  // namespace
}  // namespace unloadkv::engine

namespace unloadkv::engine {
namespace {

TEST(SplitPolicyTest, SendsTheGivenFractionToUnloadAndParsesStrictly) {
  auto p = MakePolicy("split:0.25");
  ASSERT_TRUE(p.ok()) << p.status();
  int unloaded = 0;
  for (int i = 0; i < 1000; ++i) unloaded += (*p)->Decide(i << 12, 64, true).path == Path::kUnload;
  EXPECT_EQ(unloaded, 250);
  EXPECT_EQ((*p)->Decide(0, 1 << 20, false).path, Path::kOffload);
  for (const char* bad : {"split:", "split:1.5", "split:-0.1", "split:x", "splits:0.5"}) {
    absl::StatusOr<std::unique_ptr<PathPolicy>> q = MakePolicy(bad);
    ASSERT_FALSE(q.ok()) << bad;
    EXPECT_NE(q.status().message().find(absl::StrCat("'", bad, "'")), std::string::npos)
        << q.status();
  }
}

TEST(UnloadAfterPolicyTest, OffloadsTheFirstNWritesThatMayUnloadAndParsesStrictly) {
  auto p = MakePolicy("unload_after:3");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->Decide(0, 1 << 20, false).path, Path::kOffload);  // does not count
  for (int i = 0; i < 3; ++i) EXPECT_EQ((*p)->Decide(i << 12, 64, true).path, Path::kOffload);
  for (int i = 0; i < 5; ++i) EXPECT_EQ((*p)->Decide(i << 12, 64, true).path, Path::kUnload);
  EXPECT_EQ((*p)->Decide(0, 1 << 20, false).path, Path::kOffload);
  auto zero = MakePolicy("unload_after:0");
  ASSERT_TRUE(zero.ok()) << zero.status();
  EXPECT_EQ((*zero)->Decide(0, 64, true).path, Path::kUnload);
  for (const char* bad : {"unload_after:", "unload_after:-1", "unload_after:+1", "unload_after:1.5",
                          "unload_after:x", "unload_after:1 "}) {
    EXPECT_FALSE(MakePolicy(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace unloadkv::engine
