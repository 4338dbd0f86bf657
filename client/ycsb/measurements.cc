#include "client/ycsb/measurements.h"

#include <charconv>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace unloadkv::ycsb {

void Measurements::Record(const std::string& op, int64_t latency_us,
                          const std::string& return_code) {
  Series& s = series_[op];
  s.histogram->Record(latency_us);
  ++s.returns[return_code];
}

void Measurements::RecordIntended(const std::string& op, int64_t latency_us) {
  series_[absl::StrCat("INTENDED-", op)].histogram->Record(latency_us);
}

void Measurements::Add(const Measurements& other) {
  for (const auto& [name, s] : other.series_) {
    Series& mine = series_[name];
    mine.histogram->Add(*s.histogram);
    for (const auto& [code, n] : s.returns) mine.returns[code] += n;
  }
}

std::string JavaDouble(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  if (v == 0) return "0.0";
  const double a = std::fabs(v);
  char buf[64];
  if (a >= 1e-3 && a < 1e7) {
    // Shortest round-trip digits, as Java prints them, always with a fraction part.
    auto r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::fixed);
    std::string s(buf, r.ptr);
    if (s.find('.') == std::string::npos) s += ".0";
    return s;
  }
  auto r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string s(buf, r.ptr);  // "1.2345e+07"
  size_t e = s.find('e');
  std::string mant = s.substr(0, e);
  if (mant.find('.') == std::string::npos) mant += ".0";
  int exp = std::stoi(s.substr(e + 1));
  return absl::StrCat(mant, "E", exp);
}

namespace {
std::string PercentileName(double p) {
  if (p == std::floor(p)) return absl::StrCat(static_cast<int64_t>(p), "thPercentileLatency(us)");
  return absl::StrCat(JavaDouble(p), "thPercentileLatency(us)");
}
}  // namespace

std::string FormatSummary(absl::Duration runtime, uint64_t operations, const Measurements& m,
                          const std::vector<double>& percentiles) {
  std::string out =
      absl::StrCat("[OVERALL], RunTime(ms), ", absl::ToInt64Milliseconds(runtime), "\n");
  const double seconds = absl::ToDoubleSeconds(runtime);
  const double throughput = seconds > 0 ? operations / seconds : 0;
  absl::StrAppend(&out, "[OVERALL], Throughput(ops/sec), ", JavaDouble(throughput), "\n");
  for (const auto& [name, s] : m.series()) {
    const Histogram& h = *s.histogram;
    const std::string tag = absl::StrCat("[", name, "], ");
    absl::StrAppend(&out, tag, "Operations, ", h.count(), "\n");
    absl::StrAppend(&out, tag, "AverageLatency(us), ", JavaDouble(h.mean()), "\n");
    absl::StrAppend(&out, tag, "MinLatency(us), ", h.min(), "\n");
    absl::StrAppend(&out, tag, "MaxLatency(us), ", h.max(), "\n");
    for (double p : percentiles) {
      absl::StrAppend(&out, tag, PercentileName(p), ", ", h.Percentile(p), "\n");
    }
    for (const auto& [code, n] : s.returns) {
      absl::StrAppend(&out, tag, "Return=", code, ", ", n, "\n");
    }
  }
  return out;
}

}  // namespace unloadkv::ycsb
