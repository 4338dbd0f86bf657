// The built-in status page, served on the metrics port (docs/operations.md):
//   GET /status       one self-contained HTML page (inline script and style, nothing fetched
//                     from elsewhere) that charts the figures below, live, and the shard map;
//   GET /status.json  the figures: one sample per second of the last two minutes, computed
//                     from the node's Prometheus registry, the cluster section, and the
//                     durability section (the fsync policy, the logs' figures, and why a log
//                     refuses writes).
//
// A sample holds rates and latencies over the second before it: requests/s (all, PUT, GET),
// PUT and GET p50/p99 from the latency histograms' bucket deltas (interpolated within a bucket
// as Prometheus's histogram_quantile does; null with no request), value writes/s by path and
// the unloaded share, staging-ring slots in use and their number, keys, connections, arena
// bytes used and free.
#ifndef UNLOADKV_SERVER_STATUS_PAGE_H_
#define UNLOADKV_SERVER_STATUS_PAGE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "prometheus/registry.h"
#include "transport/base/mutex.h"

namespace unloadkv::server {

// Thread-safe.
class StatusSampler {
 public:
  static constexpr size_t kHistory = 120;  // samples kept (one a second)

  explicit StatusSampler(std::shared_ptr<prometheus::Registry> registry);

  // Takes a sample when at least a second passed since the previous one (`now`: the server's
  // clock). Cheap otherwise; costs one registry collection when it samples.
  void MaybeSample(absl::Time now);

  // {"node": ..., "samples": [...], "cluster": `cluster_json`, "durability":
  // `durability_json`} (JSON values: "null" outside a cluster, and without --data_dir).
  std::string Json(const std::string& node, const std::string& cluster_json,
                   const std::string& durability_json = "null") const;

  // Cumulative readings of the registry at one instant.
  struct Totals {
    double requests = 0;
    std::map<std::string, double> requests_by_method;
    // Per method: cumulative bucket counts and their upper bounds (the last is +Inf).
    std::map<std::string, std::vector<double>> bucket_counts;
    std::vector<double> bucket_bounds;
    double value_writes[3] = {0, 0, 0};  // offload, unload, unknown
    double ring_in_use = 0, ring_slots = 0, keys = 0, connections = 0;
    double arena_used = 0, arena_free = 0;
  };
  // The q-quantile (0..1) of the observations between two readings of one histogram's
  // cumulative bucket counts, in the bounds' unit; NaN when there were none.
  static double Quantile(const std::vector<double>& bounds, const std::vector<double>& then,
                         const std::vector<double>& now, double q);

 private:
  struct Sample {
    int64_t unix_ms = 0;
    double rps = 0, put_rps = 0, get_rps = 0;
    double put_p50_us = 0, put_p99_us = 0, get_p50_us = 0, get_p99_us = 0;
    double offload_wps = 0, unload_wps = 0, unloaded_share = 0;
    double ring_in_use = 0, ring_slots = 0, keys = 0, connections = 0;
    double arena_used = 0, arena_free = 0;
  };
  Totals Read() const;

  const std::shared_ptr<prometheus::Registry> registry_;
  mutable Mutex mu_;
  absl::Time last_time_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  Totals last_ ABSL_GUARDED_BY(mu_);
  std::deque<Sample> samples_ ABSL_GUARDED_BY(mu_);
};

// The page GET /status serves.
const std::string& StatusPageHtml();

}  // namespace unloadkv::server

#endif  // UNLOADKV_SERVER_STATUS_PAGE_H_
