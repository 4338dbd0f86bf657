#include "transport/engine/heat_sketch.h"

#include <algorithm>

namespace unloadkv::engine {

HeatSketch::HeatSketch(int width_log2, uint32_t window)
    : mask_((1u << width_log2) - 1), window_(window) {}

uint32_t HeatSketch::Index(int row, uint64_t page) const {
  // Two independent multiplicative hashes (odd 64-bit constants), top bits.
  static constexpr uint64_t kMul[kRows] = {0x9E3779B97F4A7C15ull, 0xC2B2AE3D27D4EB4Full};
  uint64_t h = (page + row) * kMul[row];
  return row * (mask_ + 1) + static_cast<uint32_t>((h >> 32) & mask_);
}

uint32_t HeatSketch::Add(uint64_t page) {
  if (counters_.empty()) counters_.assign(kRows * (size_t{mask_} + 1), 0);
  if (++since_decay_ >= window_) Decay();
  uint32_t idx[kRows];
  uint32_t est = UINT32_MAX;
  for (int r = 0; r < kRows; ++r) {
    idx[r] = Index(r, page);
    est = std::min<uint32_t>(est, counters_[idx[r]]);
  }
  // Conservative update: only counters at the minimum grow, which keeps overestimates small.
  uint32_t next = std::min<uint32_t>(est + 1, UINT16_MAX);
  for (int r = 0; r < kRows; ++r) {
    if (counters_[idx[r]] < next) counters_[idx[r]] = static_cast<uint16_t>(next);
  }
  return next;
}

uint32_t HeatSketch::Estimate(uint64_t page) const {
  if (counters_.empty()) return 0;
  uint32_t est = UINT32_MAX;
  for (int r = 0; r < kRows; ++r) est = std::min<uint32_t>(est, counters_[Index(r, page)]);
  return est;
}

void HeatSketch::Decay() {
  since_decay_ = 0;
  for (uint16_t& c : counters_) c >>= 1;
}

}  // namespace unloadkv::engine
