// The engine's metrics hooks exported through prometheus-cpp (served by http::MetricsEndpoint,
// transport/http/metrics_endpoint.h).
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
//   unloadkv_engine_target_models                        gauge, per-target models (peers)
//   unloadkv_engine_target_model_cells{regime}           gauge, known cells by regime
//   unloadkv_engine_target_model_latency_seconds{path}   gauge, mean latency the probes measured
//   unloadkv_engine_target_model_oldest_age_seconds      gauge, the oldest publication's age
//   unloadkv_engine_target_model_probes                  gauge, probes in flight
#ifndef UNLOADKV_TRANSPORT_ENGINE_PROMETHEUS_METRICS_H_
#define UNLOADKV_TRANSPORT_ENGINE_PROMETHEUS_METRICS_H_

#include <memory>

#include "absl/time/time.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "transport/engine/metrics.h"
#include "transport/engine/target_model.h"

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
  // The target-model gauges, from Summarize(engine.target_models()): call it where the owner
  // refreshes its gauges (it is not a hook the engine calls).
  void SetTargetModels(const TargetModelSummary& s);

  const std::shared_ptr<prometheus::Registry>& registry() const { return registry_; }

 private:
  // Registers the unloadkv_engine_target_model_* gauges; called once by the constructor.
  void RegisterTargetModelGauges();

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Counter* writes_[2][2];  // [path][ok]
  prometheus::Counter* bytes_[2];
  prometheus::Histogram* latency_[2];
  prometheus::Counter* failures_[kValidationFailureKinds];
  prometheus::Counter* applied_;
  prometheus::Gauge* ring_;
  prometheus::Gauge* ring_slots_;
  prometheus::Counter* switches_;
  prometheus::Gauge* models_;
  prometheus::Gauge* model_cells_[2];    // by Path
  prometheus::Gauge* model_latency_[2];  // by Path
  prometheus::Gauge* model_age_;
  prometheus::Gauge* model_probes_;
};

}  // namespace unloadkv::engine

#endif  // UNLOADKV_TRANSPORT_ENGINE_PROMETHEUS_METRICS_H_
