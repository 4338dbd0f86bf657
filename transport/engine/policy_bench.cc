// Per-decision cost of the path policies (Decide + Observe), and proof that the hot path does
// not allocate: global operator new is counted while the benchmark loop runs (after each
// policy's first decision, which makes its heat sketch's table).
//   bazel run -c opt //transport/engine:policy_bench
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "transport/base/clock.h"
#include "transport/engine/adaptive_policy.h"
#include "transport/engine/target_model.h"

namespace {
std::atomic<uint64_t> allocations{0};
}

void* operator new(size_t n) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  void* p = std::malloc(n);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace unloadkv::engine {
namespace {

template <typename P>
void BM_DecideObserve(benchmark::State& state) {
  P policy;
  std::mt19937_64 rng(1);
  std::vector<uint64_t> addrs(1 << 16);
  for (uint64_t& a : addrs) a = (rng() % (uint64_t{1} << 20)) << 12;  // 4 GiB of pages
  size_t i = 0;
  policy.Decide(addrs[i++], 64, true);  // the heat sketch's table is made at the first write
  uint64_t before = allocations.load();
  for (auto _ : state) {
    Decision d = policy.Decide(addrs[i++ & 0xffff], 64, true);
    policy.Observe(d, {absl::Nanoseconds(d.path == Path::kOffload ? 3000 : 2300)});
    benchmark::DoNotOptimize(d);
  }
  state.counters["allocations"] = static_cast<double>(allocations.load() - before);
}
BENCHMARK_TEMPLATE(BM_DecideObserve, OffloadPolicy);
BENCHMARK_TEMPLATE(BM_DecideObserve, UnloadPolicy);
BENCHMARK_TEMPLATE(BM_DecideObserve, AdaptivePolicy);

// The adaptive policy sharing a per-target model (target_model.h) with `state.range(0) - 1`
// other connections' policies, which take turns with it (one write each), as connections of one
// engine into one device do.
void BM_DecideObserveSharedTarget(benchmark::State& state) {
  RealClock clock;
  auto model = std::make_shared<TargetModel>("sim/bench", &clock);
  std::vector<std::unique_ptr<AdaptivePolicy>> policies;
  for (int64_t k = 0; k < state.range(0); ++k) {
    policies.push_back(std::make_unique<AdaptivePolicy>());
    policies.back()->AttachTarget(model);
  }
  std::mt19937_64 rng(1);
  std::vector<uint64_t> addrs(1 << 16);
  for (uint64_t& a : addrs) a = (rng() % (uint64_t{1} << 20)) << 12;
  size_t i = 0;
  for (auto& p : policies) p->Decide(addrs[i++], 64, true);  // each one's heat sketch table
  uint64_t before = allocations.load();
  for (auto _ : state) {
    AdaptivePolicy& policy = *policies[i % policies.size()];
    Decision d = policy.Decide(addrs[i++ & 0xffff], 64, true);
    policy.Observe(d, {absl::Nanoseconds(d.path == Path::kOffload ? 3000 : 2300)});
    benchmark::DoNotOptimize(d);
  }
  state.counters["allocations"] = static_cast<double>(allocations.load() - before);
}
BENCHMARK(BM_DecideObserveSharedTarget)->Arg(1)->Arg(8);

}  // namespace
}  // namespace unloadkv::engine

BENCHMARK_MAIN();
