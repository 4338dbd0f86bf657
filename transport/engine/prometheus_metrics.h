// The engine's metrics hooks exported through prometheus-cpp, and the /metrics HTTP endpoint.
//
// Names (base units, counters end in _total, labels are low-cardinality):
//   unloadkv_engine_writes_total{path,result}            writes this node initiated
//   unloadkv_engine_write_bytes_total{path}
//   unloadkv_engine_write_latency_seconds{path}          histogram, post to completion
//   unloadkv_unload_validation_failures_total{reason}    target side
//   unloadkv_unload_applied_writes_total                 target side: staged writes applied
//   unloadkv_staging_ring_slots_in_use                   gauge, last posted value
//   unloadkv_staging_ring_slots                          gauge, that connection's slots
//   unloadkv_policy_switches_total
#ifndef UNLOADKV_TRANSPORT_ENGINE_PROMETHEUS_METRICS_H_
#define UNLOADKV_TRANSPORT_ENGINE_PROMETHEUS_METRICS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "transport/engine/metrics.h"

class CivetServer;

namespace unloadkv::engine {

// Latency buckets in seconds: 1 us to about 1 s, doubling.
prometheus::Histogram::BucketBoundaries LatencyBuckets();

// Thread-safe (prometheus-cpp metrics are). The registry may gain other families.
class PrometheusEngineMetrics : public EngineMetrics {
 public:
  explicit PrometheusEngineMetrics(std::shared_ptr<prometheus::Registry> registry);

  void OnWriteCompleted(Path path, uint32_t bytes, absl::Duration latency, bool ok) override;
  void OnValidationFailure(ValidationFailure reason) override;
  void OnStagedWriteApplied(uint32_t bytes) override;
  void OnRingOccupancy(uint32_t used, uint32_t capacity) override;
  void OnPolicySwitch() override;

  const std::shared_ptr<prometheus::Registry>& registry() const { return registry_; }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Counter* writes_[2][2];  // [path][ok]
  prometheus::Counter* bytes_[2];
  prometheus::Histogram* latency_[2];
  prometheus::Counter* failures_[kValidationFailureKinds];
  prometheus::Counter* applied_;
  prometheus::Gauge* ring_;
  prometheus::Gauge* ring_slots_;
  prometheus::Counter* switches_;
};

// The node's HTTP endpoint: `registry` at http://<address>/metrics (Prometheus text format),
// and pages added with Handle. `address` is "host:port" (port 0 picks a free one). A busy port
// or bad address is an error, not an exception.
//
// Idle or slow connections cannot block scrapes for long: kThreads connections are served at
// once, and one that has not sent a complete request within kRequestTimeout is closed.
class MetricsEndpoint {
 public:
  static constexpr int kThreads = 64;
  static constexpr absl::Duration kRequestTimeout = absl::Seconds(1);

  struct Page {
    std::string content_type;
    std::string body;
  };
  // Called on the endpoint's threads, concurrently: must be thread-safe.
  using PageFunction = std::function<Page()>;

  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(
      const std::string& address, std::shared_ptr<prometheus::Registry> registry);
  ~MetricsEndpoint();

  // Serves GET `path` (exactly: "/status" does not serve "/status/x") from `page`. The function
  // must stay callable until the endpoint is destroyed.
  void Handle(const std::string& path, PageFunction page);

  // "http://host:port/metrics".
  const std::string& url() const { return url_; }
  // "http://host:port".
  const std::string& base_url() const { return base_url_; }

 private:
  class Handler;
  MetricsEndpoint() = default;
  std::unique_ptr<CivetServer> server_;
  std::vector<std::unique_ptr<Handler>> handlers_;  // outlive server_'s use of them
  std::string url_, base_url_;
};

}  // namespace unloadkv::engine

#endif  // UNLOADKV_TRANSPORT_ENGINE_PROMETHEUS_METRICS_H_
