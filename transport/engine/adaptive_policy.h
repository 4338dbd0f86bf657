// The adaptive path policy.
//
// Every write falls in a cell: (size class, heat class of its page). Size classes are powers
// of four from 256 B to 64 KiB; the heat class comes from a decaying HeatSketch of 4 KiB pages
// (cold, warm, hot, very hot). Per cell the policy keeps a mean of the observed latency of
// each path and the share of the cell's writes it sends to unload. After each observation the
// share moves a step toward the faster path, unless the two means are within the hysteresis
// margin. The share therefore settles at 0 or 1 when one path is simply better, and in between
// when each path slows down under load (the NIC's translation units on one side, the unload
// workers on the other), splitting the load where both paths take equally long. The share
// never reaches 0 or 1 exactly: a small, gap-dependent fraction explores the other path so its
// estimate stays fresh. Routing is deterministic (an accumulator, not a random draw).
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
    double ewma_weight = 1.0 / 64;   // weight of a new sample on a path taken often
    double hysteresis = 0.05;        // means within this fraction count as equal
    double step = 1.0 / 512;         // share change per observation
    uint32_t min_samples = 8;        // per path and cell before trusting its mean
    uint32_t warmup_samples = 2;     // first observations of each path and cell, not counted
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

  // For tests and reports: the share of a cell's writes sent to unload.
  double unload_share(int size_class, int heat_class) const {
    return cells_[size_class * kHeatClasses + heat_class].share;
  }
  static int SizeClass(uint32_t length);
  static int HeatClass(uint32_t count);

 private:
  struct Cell {
    double mean_ns[2] = {0, 0};
    uint32_t samples[2] = {0, 0};
    uint32_t warmup[2] = {0, 0};
    double share = 0;        // of writes sent to unload, before exploration bounds
    double accumulator = 0;  // deterministic routing of `share`
  };
  // Exploration floor for the path the cell currently disfavours.
  double ExploreShare(const Cell& cell) const;

  Options options_;
  HeatSketch sketch_;
  std::array<Cell, kSizeClasses * kHeatClasses> cells_;
  uint64_t switches_ = 0;
};

}  // namespace unloadkv::engine

#endif  // UNLOADKV_TRANSPORT_ENGINE_ADAPTIVE_POLICY_H_
