// The adaptive path policy.
//
// Every write falls in a cell: (size class, heat class of its page). Size classes are powers
// of four from 256 B to 64 KiB; the heat class comes from a decaying HeatSketch of 4 KiB pages
// (cold, warm, hot, very hot). Per cell the policy keeps an exponentially weighted mean of the
// observed latency of each path, prefers the lower one, and switches only when the other is
// lower by more than the hysteresis margin. A small share of each cell's writes explores the
// non-preferred path so its estimate stays fresh; the share shrinks as the gap between the
// paths grows, to bound what exploration costs. Hot pages therefore stay offloaded exactly when
// offloading them is observed to be fast, and cold pages move to unload when that is faster.
#ifndef UNLOADKV_TRANSPORT_ENGINE_ADAPTIVE_POLICY_H_
#define UNLOADKV_TRANSPORT_ENGINE_ADAPTIVE_POLICY_H_

#include <array>
#include <cstdint>

#include "transport/engine/heat_sketch.h"
#include "transport/engine/policy.h"

namespace unloadkv::engine {

class AdaptivePolicy : public PathPolicy {
 public:
  struct Options {
    double ewma_weight = 1.0 / 16;   // weight of a new sample
    double hysteresis = 0.05;        // switch when the other path is this much faster
    uint32_t min_samples = 8;        // per path and cell before trusting its mean
    uint32_t sketch_window = 16384;  // updates between halvings of the heat sketch
  };
  static constexpr int kSizeClasses = 6;
  static constexpr int kHeatClasses = 4;

  AdaptivePolicy() : AdaptivePolicy(Options()) {}
  explicit AdaptivePolicy(const Options& options);

  absl::string_view name() const override { return "adaptive"; }
  Decision Decide(uint64_t remote_addr, uint32_t length, bool unload_possible) override;
  void Observe(const Decision& d, absl::Duration latency) override;
  FullRingAction OnRingFull() const override { return FullRingAction::kOffload; }
  uint64_t switches() const override { return switches_; }

  // For tests and reports: the preferred path of a cell.
  Path preferred(int size_class, int heat_class) const {
    return cells_[size_class * kHeatClasses + heat_class].preferred;
  }
  static int SizeClass(uint32_t length);
  static int HeatClass(uint32_t count);

 private:
  struct Cell {
    double mean_ns[2] = {0, 0};
    uint32_t samples[2] = {0, 0};
    uint32_t decisions = 0;
    Path preferred = Path::kOffload;
  };

  Options options_;
  HeatSketch sketch_;
  std::array<Cell, kSizeClasses * kHeatClasses> cells_;
  uint64_t switches_ = 0;
};

}  // namespace unloadkv::engine

#endif  // UNLOADKV_TRANSPORT_ENGINE_ADAPTIVE_POLICY_H_
