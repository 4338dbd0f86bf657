// writebench's runs (writebench_main.cc): one point is two nodes, one or more connections and
// a closed loop of random writes with --window in flight, under one path policy.
#ifndef UNLOADKV_TRANSPORT_BENCH_WRITEBENCH_RUN_H_
#define UNLOADKV_TRANSPORT_BENCH_WRITEBENCH_RUN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "transport/bench/workload.h"

namespace unloadkv::bench {

struct Point {
  std::string policy;
  Pattern pattern;
  uint64_t working_set;
  uint32_t write_size;
};

struct Result {
  Point point;
  int64_t ops = 0;
  double mean_us = 0, p50_us = 0, p99_us = 0, ops_per_s = 0, gbps = 0, unload_fraction = 0;
  double path_mean_us[2] = {0, 0};   // by engine::Path; 0 when no write took it
  std::vector<double> latencies_us;  // in issue order, measured writes only
  uint64_t mtt_misses = 0;
};

// Whether --fabric gives modeled numbers (the simulated fabric).
bool Modeled();
// Staging lanes per connection: --staging_lanes, or one per unload worker.
int StagingLanes();
// "oracle:K" -> K (1..1000000); nullopt for other names; an error for a malformed oracle.
absl::StatusOr<std::optional<uint64_t>> ParseOracle(absl::string_view name, Pattern pattern);
// Runs one point with the flags' fabric, window, warm-up and counts.
absl::StatusOr<Result> RunPoint(const Point& pt);

}  // namespace unloadkv::bench

#endif  // UNLOADKV_TRANSPORT_BENCH_WRITEBENCH_RUN_H_
