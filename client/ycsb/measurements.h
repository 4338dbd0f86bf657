// Per-operation latency histograms and return-code counts, and YCSB's text summary:
//   [OVERALL], RunTime(ms), 10110
//   [OVERALL], Throughput(ops/sec), 98.91196834817013
//   [READ], Operations, 497
//   [READ], AverageLatency(us), 1102.4808853118713
//   [READ], MinLatency(us), 253
//   [READ], MaxLatency(us), 13391
//   [READ], 95thPercentileLatency(us), 1863
//   [READ], 99thPercentileLatency(us), 5191
//   [READ], Return=OK, 497
// as YCSB's TextMeasurementsExporter prints it for HdrHistogram measurements (doubles in Java's
// Double.toString form; operations sorted by name).
#ifndef UNLOADKV_CLIENT_YCSB_MEASUREMENTS_H_
#define UNLOADKV_CLIENT_YCSB_MEASUREMENTS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "client/ycsb/histogram.h"

namespace unloadkv::ycsb {

// Thread-compatible: one per client thread, merged at the end.
class Measurements {
 public:
  void Record(const std::string& op, int64_t latency_us, const std::string& return_code);
  // With a target rate: latency from when the operation should have started.
  void RecordIntended(const std::string& op, int64_t latency_us);
  void Add(const Measurements& other);

  struct Series {
    std::unique_ptr<Histogram> histogram = std::make_unique<Histogram>();
    std::map<std::string, uint64_t> returns;
  };
  const std::map<std::string, Series>& series() const { return series_; }

 private:
  std::map<std::string, Series> series_;
};

// Java's Double.toString for the values YCSB prints ("1000.0", "98.91196834817013").
std::string JavaDouble(double v);

// The summary block; `percentiles` as in hdrhistogram.percentiles (e.g. {95, 99}). RunTime is
// printed in whole milliseconds, as YCSB does; throughput comes from the exact `runtime`.
std::string FormatSummary(absl::Duration runtime, uint64_t operations, const Measurements& m,
                          const std::vector<double>& percentiles);

}  // namespace unloadkv::ycsb

#endif  // UNLOADKV_CLIENT_YCSB_MEASUREMENTS_H_
