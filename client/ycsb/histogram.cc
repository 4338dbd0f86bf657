#include "client/ycsb/histogram.h"

#include <algorithm>
#include <cmath>

namespace unloadkv::ycsb {

Histogram::Histogram() : counts_(size_t{kMagnitudes} << kSubBits, 0) {}

// Values below 2^kSubBits map exactly; above, the top kSubBits bits of the value select the
// sub-bucket within its power of two.
int Histogram::IndexOf(int64_t v) {
  if (v < (int64_t{1} << kSubBits)) return static_cast<int>(v);
  const int msb = 63 - __builtin_clzll(static_cast<uint64_t>(v));
  const int shift = msb - kSubBits + 1;
  const int magnitude = shift;  // 1 for [2^11, 2^12), ...
  if (magnitude >= kMagnitudes) return (kMagnitudes << kSubBits) - 1;
  const int sub = static_cast<int>(v >> shift);  // in [2^(kSubBits-1), 2^kSubBits)
  return (magnitude << kSubBits) + sub;
}

int64_t Histogram::ValueOf(int index) {
  const int magnitude = index >> kSubBits;
  const int64_t sub = index & ((1 << kSubBits) - 1);
  if (magnitude == 0) return sub;
  return ((sub + 1) << magnitude) - 1;
}

void Histogram::Record(int64_t us) {
  if (us < 0) us = 0;
  ++counts_[IndexOf(us)];
  if (count_ == 0 || us < min_) min_ = us;
  if (count_ == 0 || us > max_) max_ = us;
  ++count_;
  sum_ += us;
}

void Histogram::Add(const Histogram& o) {
  if (o.count_ == 0) return;
  for (size_t i = 0; i < counts_.size(); ++i) counts_[i] += o.counts_[i];
  min_ = count_ ? std::min(min_, o.min_) : o.min_;
  max_ = count_ ? std::max(max_, o.max_) : o.max_;
  count_ += o.count_;
  sum_ += o.sum_;
}

int64_t Histogram::Percentile(double p) const {
  if (count_ == 0) return 0;
  const uint64_t want = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(p / 100.0 * count_)));
  uint64_t seen = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    seen += counts_[i];
    if (seen >= want) return std::min(ValueOf(static_cast<int>(i)), max_);
  }
  return max_;
}

}  // namespace unloadkv::ycsb
