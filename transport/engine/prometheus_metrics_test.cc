#include "transport/engine/prometheus_metrics.h"

#include <map>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "prometheus/registry.h"

namespace unloadkv::engine {
namespace {

class FixedClock : public Clock {
 public:
  absl::Time Now() const override { return now; }
  absl::Time now = absl::UnixEpoch() + absl::Seconds(100);
};

// name{label=value} -> gauge value, of every gauge the registry holds.
std::map<std::string, double> Gauges(const prometheus::Registry& r) {
  std::map<std::string, double> out;
  for (const prometheus::MetricFamily& f : r.Collect()) {
    if (f.type != prometheus::MetricType::Gauge) continue;
    for (const prometheus::ClientMetric& m : f.metric) {
      std::string name = f.name;
      for (const prometheus::ClientMetric::Label& l : m.label) {
        name += "{" + l.name + "=" + l.value + "}";
      }
      out[name] = m.gauge.value;
    }
  }
  return out;
}

TEST(PrometheusEngineMetricsTest, ExportsTheTargetModelSummary) {
  auto registry = std::make_shared<prometheus::Registry>();
  PrometheusEngineMetrics metrics(registry);
  FixedClock clock;
  TargetModels models(&clock);
  std::shared_ptr<TargetModel> a = models.For("sim", "3");
  models.For("sim", "4");
  a->Publish(0, Path::kUnload, 3000, 2000, 0);
  a->Publish(1, Path::kUnload, 4000, 3000, 0);
  clock.now += absl::Seconds(5);
  a->Publish(2, Path::kOffload, 1000, 0, 0);  // stopped early: no unload latency
  ASSERT_TRUE(a->TryClaimProbe(3, 7, 1000));
  metrics.SetTargetModels(Summarize(models));

  std::map<std::string, double> g = Gauges(*registry);
  EXPECT_EQ(g["unloadkv_engine_target_models"], 2);
  EXPECT_EQ(g["unloadkv_engine_target_model_cells{regime=unload}"], 2);
  EXPECT_EQ(g["unloadkv_engine_target_model_cells{regime=offload}"], 1);
  EXPECT_NEAR(g["unloadkv_engine_target_model_latency_seconds{path=offload}"], 8000e-9 / 3, 1e-15);
  EXPECT_DOUBLE_EQ(g["unloadkv_engine_target_model_latency_seconds{path=unload}"], 2500e-9);
  EXPECT_DOUBLE_EQ(g["unloadkv_engine_target_model_oldest_age_seconds"], 5);
  EXPECT_EQ(g["unloadkv_engine_target_model_probes"], 1);
}

}  // namespace
}  // namespace unloadkv::engine
