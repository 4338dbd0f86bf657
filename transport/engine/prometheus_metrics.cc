#include "transport/engine/prometheus_metrics.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace unloadkv::engine {

prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  prometheus::Histogram::BucketBoundaries b;
  for (double s = 1e-6; s < 1.5; s *= 2) b.push_back(s);
  return b;
}

PrometheusEngineMetrics::PrometheusEngineMetrics(std::shared_ptr<prometheus::Registry> registry)
    : registry_(std::move(registry)) {
  auto& writes = prometheus::BuildCounter()
                     .Name("unloadkv_engine_writes_total")
                     .Help("Writes this node initiated, by path and result")
                     .Register(*registry_);
  auto& bytes = prometheus::BuildCounter()
                    .Name("unloadkv_engine_write_bytes_total")
                    .Help("Bytes of successful writes this node initiated, by path")
                    .Register(*registry_);
  auto& latency = prometheus::BuildHistogram()
                      .Name("unloadkv_engine_write_latency_seconds")
                      .Help("Write latency from post to completion, by path")
                      .Register(*registry_);
  for (int p = 0; p < 2; ++p) {
    const std::string path = PathName(static_cast<Path>(p));
    writes_[p][0] = &writes.Add({{"path", path}, {"result", "error"}});
    writes_[p][1] = &writes.Add({{"path", path}, {"result", "ok"}});
    bytes_[p] = &bytes.Add({{"path", path}});
    latency_[p] = &latency.Add({{"path", path}}, LatencyBuckets());
  }
  auto& failures = prometheus::BuildCounter()
                       .Name("unloadkv_unload_validation_failures_total")
                       .Help("Staged writes the unload workers refused, by reason")
                       .Register(*registry_);
  for (int r = 0; r < kValidationFailureKinds; ++r) {
    failures_[r] =
        &failures.Add({{"reason", ValidationFailureName(static_cast<ValidationFailure>(r))}});
  }
  applied_ = &prometheus::BuildCounter()
                  .Name("unloadkv_unload_applied_writes_total")
                  .Help("Staged writes from peers that unload workers validated and applied")
                  .Register(*registry_)
                  .Add({});
  ring_ = &prometheus::BuildGauge()
               .Name("unloadkv_staging_ring_slots_in_use")
               .Help("Staging slots in use on the connection that last posted an unloaded write")
               .Register(*registry_)
               .Add({});
  ring_slots_ = &prometheus::BuildGauge()
                     .Name("unloadkv_staging_ring_slots")
                     .Help(
                         "Staging slots (all lanes) of the connection that last posted an "
                         "unloaded write: the capacity unloadkv_staging_ring_slots_in_use fills")
                     .Register(*registry_)
                     .Add({});
  switches_ = &prometheus::BuildCounter()
                   .Name("unloadkv_policy_switches_total")
                   .Help("Times a path policy changed its preferred path for a class of writes")
                   .Register(*registry_)
                   .Add({});
  RegisterTargetModelGauges();
}

void PrometheusEngineMetrics::RegisterTargetModelGauges() {
  models_ = &prometheus::BuildGauge()
                 .Name("unloadkv_engine_target_models")
                 .Help("Peer devices this node's adaptive policies keep a shared model of")
                 .Register(*registry_)
                 .Add({});
  auto& cells = prometheus::BuildGauge()
                    .Name("unloadkv_engine_target_model_cells")
                    .Help(
                        "Cells (size class x heat class) of all target models that a probe "
                        "concluded, by the regime it chose")
                    .Register(*registry_);
  auto& model_latency = prometheus::BuildGauge()
                            .Name("unloadkv_engine_target_model_latency_seconds")
                            .Help(
                                "Mean over known cells of the latency the last probe "
                                "measured on each path")
                            .Register(*registry_);
  for (int p = 0; p < 2; ++p) {
    const std::string path = PathName(static_cast<Path>(p));
    model_cells_[p] = &cells.Add({{"regime", path}});
    model_latency_[p] = &model_latency.Add({{"path", path}});
  }
  model_age_ = &prometheus::BuildGauge()
                    .Name("unloadkv_engine_target_model_oldest_age_seconds")
                    .Help("Age of the oldest probe result any target model still routes by")
                    .Register(*registry_)
                    .Add({});
  model_probes_ = &prometheus::BuildGauge()
                       .Name("unloadkv_engine_target_model_probes")
                       .Help("Probes in flight (one per cell and target at most)")
                       .Register(*registry_)
                       .Add({});
}

void PrometheusEngineMetrics::SetTargetModels(const TargetModelSummary& s) {
  models_->Set(static_cast<double>(s.targets));
  for (int p = 0; p < 2; ++p) {
    model_cells_[p]->Set(static_cast<double>(s.cells[p]));
    model_latency_[p]->Set(s.mean_ns[p] * 1e-9);
  }
  model_age_->Set(s.oldest_age_seconds);
  model_probes_->Set(static_cast<double>(s.probing));
}

void PrometheusEngineMetrics::OnWriteCompleted(Path path, uint32_t bytes, absl::Duration latency,
                                               bool ok) {
  const int p = static_cast<int>(path);
  writes_[p][ok ? 1 : 0]->Increment();
  if (ok) {
    bytes_[p]->Increment(bytes);
    if (latency != absl::InfiniteDuration()) latency_[p]->Observe(absl::ToDoubleSeconds(latency));
  }
}

void PrometheusEngineMetrics::OnValidationFailure(ValidationFailure reason) {
  failures_[static_cast<int>(reason)]->Increment();
}

void PrometheusEngineMetrics::OnStagedWriteApplied(uint32_t) { applied_->Increment(); }

void PrometheusEngineMetrics::OnRingOccupancy(uint32_t used, uint32_t capacity) {
  ring_->Set(used);
  ring_slots_->Set(capacity);
}

void PrometheusEngineMetrics::OnPolicySwitch() { switches_->Increment(); }

}  // namespace unloadkv::engine
