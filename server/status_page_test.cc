#include "server/status_page.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"

namespace unloadkv::server {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(StatusSamplerTest, QuantilesInterpolateWithinTheBucketOfTheDeltas) {
  const std::vector<double> bounds = {1, 2, 4, kInf};
  // Before: 10 observations at or under 1. Since: 10 in (1, 2], 10 in (2, 4].
  const std::vector<double> then = {10, 10, 10, 10}, now = {10, 20, 30, 30};
  EXPECT_DOUBLE_EQ(StatusSampler::Quantile(bounds, then, now, 0.5), 2);
  EXPECT_DOUBLE_EQ(StatusSampler::Quantile(bounds, then, now, 0.25), 1.5);
  EXPECT_DOUBLE_EQ(StatusSampler::Quantile(bounds, then, now, 0.99), 2 + 2 * 0.98);
  // Nothing observed since: no quantile. Only in +Inf: its lower bound.
  EXPECT_TRUE(std::isnan(StatusSampler::Quantile(bounds, now, now, 0.5)));
  EXPECT_DOUBLE_EQ(StatusSampler::Quantile(bounds, now, {10, 20, 30, 35}, 0.5), 4);
  // Mismatched readings (a histogram that appeared meanwhile): no quantile.
  EXPECT_TRUE(std::isnan(StatusSampler::Quantile(bounds, {}, now, 0.5)));
}

TEST(StatusSamplerTest, SamplesRatesOncePerSecondFromTheRegistry) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto& requests =
      prometheus::BuildCounter().Name("unloadkv_rpc_requests_total").Register(*registry);
  prometheus::Counter& puts = requests.Add({{"method", "put"}, {"code", "ok"}});
  prometheus::Counter& gets = requests.Add({{"method", "get"}, {"code", "not_found"}});
  auto& writes = prometheus::BuildCounter().Name("unloadkv_value_writes_total").Register(*registry);
  prometheus::Counter& offloaded = writes.Add({{"path", "offload"}});
  prometheus::Counter& unloaded = writes.Add({{"path", "unload"}});
  prometheus::Histogram& latency =
      prometheus::BuildHistogram()
          .Name("unloadkv_rpc_latency_seconds")
          .Register(*registry)
          .Add({{"method", "put"}}, prometheus::Histogram::BucketBoundaries{1e-5, 1e-4});
  prometheus::BuildGauge().Name("unloadkv_keys").Register(*registry).Add({}).Set(7);

  StatusSampler sampler(registry);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  sampler.MaybeSample(t0);  // the first reading: no sample yet
  EXPECT_EQ(sampler.Json("n1", "null"),
            R"({"node":"n1","samples":[],"cluster":null,"durability":null})");
  EXPECT_EQ(sampler.Json("n1", "null", R"({"fsync":"always"})"),
            R"({"node":"n1","samples":[],"cluster":null,"durability":{"fsync":"always"}})");
  puts.Increment(40);
  gets.Increment(20);
  offloaded.Increment(10);
  unloaded.Increment(30);
  for (int i = 0; i < 40; ++i) latency.Observe(5e-5);  // all in (10 us, 100 us]
  sampler.MaybeSample(t0 + absl::Milliseconds(500));   // under a second: nothing
  sampler.MaybeSample(t0 + absl::Seconds(2));
  const std::string json = sampler.Json("n1", R"({"name":"c"})");
  EXPECT_NE(json.find(R"("t":1002000,"rps":30,"put_rps":20,"get_rps":10)"), std::string::npos)
      << json;
  EXPECT_NE(json.find(R"("put_p50_us":55,)"), std::string::npos) << json;  // 10 + 90 x 0.5
  EXPECT_NE(json.find(R"("get_p50_us":null,)"), std::string::npos) << json;
  EXPECT_NE(json.find(R"("offload_wps":5,"unload_wps":15,"unloaded_share":0.75)"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find(R"("keys":7,)"), std::string::npos) << json;
  EXPECT_NE(json.find(R"(],"cluster":{"name":"c"},"durability":null})"), std::string::npos) << json;
  for (int i = 0; i < 200; ++i) sampler.MaybeSample(t0 + absl::Seconds(3 + i));
  const std::string many = sampler.Json("n1", "null");
  size_t samples = 0;
  for (size_t p = many.find("\"t\":"); p != std::string::npos; p = many.find("\"t\":", p + 1)) {
    ++samples;
  }
  EXPECT_EQ(samples, StatusSampler::kHistory);
}

TEST(StatusSamplerTest, NodeNamesAreJsonEscaped) {
  StatusSampler sampler(std::make_shared<prometheus::Registry>());
  EXPECT_EQ(sampler.Json("a\"b\\c\n\x01", "null"),
            R"({"node":"a\"b\\c\u000a\u0001","samples":[],"cluster":null,"durability":null})");
}

}  // namespace
}  // namespace unloadkv::server
