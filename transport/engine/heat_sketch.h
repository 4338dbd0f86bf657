// A bounded, decaying estimate of how often each page is written: a count-min sketch with
// conservative update whose counters are halved every `window` updates, so pages that stop
// being written cool down. Fixed memory, allocated at the first Add (a connection whose writes
// the policy never sees, such as a kvserver's connection to a client, holds none: 256 KiB at
// the default width); no allocation after that. Not thread-safe.
#ifndef UNLOADKV_TRANSPORT_ENGINE_HEAT_SKETCH_H_
#define UNLOADKV_TRANSPORT_ENGINE_HEAT_SKETCH_H_

#include <array>
#include <cstdint>
#include <vector>

namespace unloadkv::engine {

class HeatSketch {
 public:
  static constexpr int kRows = 2;
  // `width_log2`: counters per row = 2^width_log2. `window`: updates between halvings.
  explicit HeatSketch(int width_log2 = 16, uint32_t window = 16384);

  // Counts one write to `page`; returns its estimated count (decayed) including this one.
  uint32_t Add(uint64_t page);
  uint32_t Estimate(uint64_t page) const;

 private:
  uint32_t Index(int row, uint64_t page) const;
  void Decay();

  uint32_t mask_;
  uint32_t window_;
  uint32_t since_decay_ = 0;
  std::vector<uint16_t> counters_;  // kRows rows of (mask_ + 1); empty until the first Add
};

}  // namespace unloadkv::engine

#endif  // UNLOADKV_TRANSPORT_ENGINE_HEAT_SKETCH_H_
