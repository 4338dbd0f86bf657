// A latency histogram with three significant digits over 1 us .. ~1 hour, log-bucketed like
// HdrHistogram (which YCSB's summary uses): values are grouped by their power of two, each
// power split into 2048 linear sub-buckets, so every recorded value is within 0.1% of its
// bucket's value.
#ifndef UNLOADKV_CLIENT_YCSB_HISTOGRAM_H_
#define UNLOADKV_CLIENT_YCSB_HISTOGRAM_H_

#include <cstdint>
#include <vector>

namespace unloadkv::ycsb {

// Thread-compatible; merge per-thread histograms with Add.
class Histogram {
 public:
  Histogram();
  void Record(int64_t us);  // values below 0 count as 0; above the range as the maximum
  void Add(const Histogram& other);

  uint64_t count() const { return count_; }
  int64_t min() const { return count_ ? min_ : 0; }
  int64_t max() const { return count_ ? max_ : 0; }
  double mean() const { return count_ ? static_cast<double>(sum_) / count_ : 0; }
  // The smallest recorded value v (at bucket precision) with at least p% of values <= v.
  int64_t Percentile(double p) const;

 private:
  static constexpr int kSubBits = 11;  // 2048 sub-buckets: 3 significant digits
  static constexpr int kMagnitudes = 32;
  static int IndexOf(int64_t v);
  static int64_t ValueOf(int index);  // highest value that maps to the bucket

  std::vector<uint64_t> counts_;
  uint64_t count_ = 0;
  int64_t min_ = 0, max_ = 0;
  int64_t sum_ = 0;
};

}  // namespace unloadkv::ycsb

#endif  // UNLOADKV_CLIENT_YCSB_HISTOGRAM_H_
