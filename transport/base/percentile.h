// The nearest-rank percentile of a sample, for tools that report latencies.
#ifndef UNLOADKV_TRANSPORT_BASE_PERCENTILE_H_
#define UNLOADKV_TRANSPORT_BASE_PERCENTILE_H_

#include <algorithm>
#include <cstddef>
#include <vector>

namespace unloadkv {

// The value at rank floor(p * n) (clamped to the largest) of `values`, p in [0, 1]; 0 for an
// empty sample. Takes the sample by value: selection reorders it. O(n).
inline double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  const size_t i = std::min(values.size() - 1, static_cast<size_t>(p * values.size()));
  std::nth_element(values.begin(), values.begin() + i, values.end());
  return values[i];
}

}  // namespace unloadkv

#endif  // UNLOADKV_TRANSPORT_BASE_PERCENTILE_H_
