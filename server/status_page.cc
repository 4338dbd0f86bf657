#include "server/status_page.h"

#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "transport/base/printable.h"

namespace unloadkv::server {
namespace {

const std::string* LabelValue(const prometheus::ClientMetric& m, const char* name) {
  for (const prometheus::ClientMetric::Label& l : m.label) {
    if (l.name == name) return &l.value;
  }
  return nullptr;
}

// A JSON number, or null for NaN and infinities.
std::string Number(double v) {
  if (!std::isfinite(v)) return "null";
  return absl::StrFormat("%.6g", v);
}

double Rate(double now, double then, double seconds) {
  return seconds > 0 && now >= then ? (now - then) / seconds : 0;
}

}  // namespace

StatusSampler::StatusSampler(std::shared_ptr<prometheus::Registry> registry)
    : registry_(std::move(registry)) {}

StatusSampler::Totals StatusSampler::Read() const {
  Totals t;
  for (const prometheus::MetricFamily& f : registry_->Collect()) {
    for (const prometheus::ClientMetric& m : f.metric) {
      if (f.name == "unloadkv_rpc_requests_total") {
        t.requests += m.counter.value;
        if (const std::string* method = LabelValue(m, "method")) {
          t.requests_by_method[*method] += m.counter.value;
        }
      } else if (f.name == "unloadkv_rpc_latency_seconds") {
        const std::string* method = LabelValue(m, "method");
        if (method == nullptr) continue;
        std::vector<double>& counts = t.bucket_counts[*method];
        t.bucket_bounds.clear();
        for (const prometheus::ClientMetric::Bucket& b : m.histogram.bucket) {
          counts.push_back(static_cast<double>(b.cumulative_count));
          t.bucket_bounds.push_back(b.upper_bound);
        }
      } else if (f.name == "unloadkv_value_writes_total") {
        const std::string* path = LabelValue(m, "path");
        if (path == nullptr) continue;
        const int i = *path == "offload" ? 0 : *path == "unload" ? 1 : 2;
        t.value_writes[i] += m.counter.value;
      } else if (f.name == "unloadkv_staging_ring_slots_in_use") {
        t.ring_in_use = m.gauge.value;
      } else if (f.name == "unloadkv_staging_ring_slots") {
        t.ring_slots = m.gauge.value;
      } else if (f.name == "unloadkv_keys") {
        t.keys = m.gauge.value;
      } else if (f.name == "unloadkv_connections") {
        t.connections = m.gauge.value;
      } else if (f.name == "unloadkv_arena_used_bytes") {
        t.arena_used = m.gauge.value;
      } else if (f.name == "unloadkv_arena_free_bytes") {
        t.arena_free = m.gauge.value;
      }
    }
  }
  return t;
}

double StatusSampler::Quantile(const std::vector<double>& bounds, const std::vector<double>& then,
                               const std::vector<double>& now, double q) {
  const size_t n = bounds.size();
  if (n == 0 || then.size() != n || now.size() != n) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  const double total = now[n - 1] - then[n - 1];
  if (total <= 0) return std::numeric_limits<double>::quiet_NaN();
  const double rank = q * total;
  double below = 0;  // observations in the buckets before i
  for (size_t i = 0; i < n; ++i) {
    const double upto = now[i] - then[i];
    if (upto >= rank) {
      const double lower = i == 0 ? 0 : bounds[i - 1];
      if (!std::isfinite(bounds[i])) return lower;  // in the +Inf bucket: its lower bound
      const double in_bucket = upto - below;
      return in_bucket <= 0 ? bounds[i] : lower + (bounds[i] - lower) * (rank - below) / in_bucket;
    }
    below = upto;
  }
  return bounds[n - 1];
}

void StatusSampler::MaybeSample(absl::Time now) {
  MutexLock l(&mu_);
  if (now - last_time_ < absl::Seconds(1)) return;
  Totals t = Read();
  if (last_time_ != absl::InfinitePast()) {
    const double s = absl::ToDoubleSeconds(now - last_time_);
    Sample x;
    x.unix_ms = absl::ToUnixMillis(now);
    x.rps = Rate(t.requests, last_.requests, s);
    x.put_rps = Rate(t.requests_by_method["put"], last_.requests_by_method["put"], s);
    x.get_rps = Rate(t.requests_by_method["get"], last_.requests_by_method["get"], s);
    auto us = [&](const char* method, double q) {
      return 1e6 *
             Quantile(t.bucket_bounds, last_.bucket_counts[method], t.bucket_counts[method], q);
    };
    x.put_p50_us = us("put", 0.5);
    x.put_p99_us = us("put", 0.99);
    x.get_p50_us = us("get", 0.5);
    x.get_p99_us = us("get", 0.99);
    x.offload_wps = Rate(t.value_writes[0], last_.value_writes[0], s);
    x.unload_wps = Rate(t.value_writes[1], last_.value_writes[1], s);
    const double all =
        x.offload_wps + x.unload_wps + Rate(t.value_writes[2], last_.value_writes[2], s);
    x.unloaded_share = all > 0 ? x.unload_wps / all : std::numeric_limits<double>::quiet_NaN();
    x.ring_in_use = t.ring_in_use;
    x.ring_slots = t.ring_slots;
    x.keys = t.keys;
    x.connections = t.connections;
    x.arena_used = t.arena_used;
    x.arena_free = t.arena_free;
    samples_.push_back(x);
    if (samples_.size() > kHistory) samples_.pop_front();
  }
  last_ = std::move(t);
  last_time_ = now;
}

std::string StatusSampler::Json(const std::string& node, const std::string& cluster_json,
                                const std::string& durability_json) const {
  std::string out = absl::StrCat("{\"node\":", JsonString(node), ",\"samples\":[");
  MutexLock l(&mu_);
  bool first = true;
  for (const Sample& x : samples_) {
    absl::StrAppend(
        &out, first ? "" : ",", "{\"t\":", x.unix_ms, ",\"rps\":", Number(x.rps),
        ",\"put_rps\":", Number(x.put_rps), ",\"get_rps\":", Number(x.get_rps),
        ",\"put_p50_us\":", Number(x.put_p50_us), ",\"put_p99_us\":", Number(x.put_p99_us),
        ",\"get_p50_us\":", Number(x.get_p50_us), ",\"get_p99_us\":", Number(x.get_p99_us));
    absl::StrAppend(
        &out, ",\"offload_wps\":", Number(x.offload_wps), ",\"unload_wps\":", Number(x.unload_wps),
        ",\"unloaded_share\":", Number(x.unloaded_share),
        ",\"ring_in_use\":", Number(x.ring_in_use), ",\"ring_slots\":", Number(x.ring_slots),
        ",\"keys\":", Number(x.keys), ",\"connections\":", Number(x.connections),
        ",\"arena_used\":", Number(x.arena_used), ",\"arena_free\":", Number(x.arena_free), "}");
    first = false;
  }
  return absl::StrCat(out, "],\"cluster\":", cluster_json, ",\"durability\":", durability_json,
                      "}");
}

}  // namespace unloadkv::server
