#include "transport/engine/adaptive_policy.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace unloadkv::engine {

AdaptivePolicy::AdaptivePolicy(const Options& options)
    : options_(options), sketch_(16, options.sketch_window) {}

int AdaptivePolicy::SizeClass(uint32_t length) {
  int c = 0;
  for (uint32_t limit = 256; c < kSizeClasses - 1 && length > limit; limit <<= 2) ++c;
  return c;
}

int AdaptivePolicy::HeatClass(uint32_t count) {
  if (count >= 32) return 3;
  if (count >= 8) return 2;
  if (count >= 2) return 1;
  return 0;
}

double AdaptivePolicy::ExploreShare(const Cell& cell) const {
  // Until both paths have enough samples, explore a lot; then the worse the other path looks,
  // the less it is explored (1/64 within 20%, 1/256 within 2x, 1/1024 beyond). Exploring is
  // not free: an explored write that takes 2x longer holds back the callbacks behind it.
  if (cell.samples[0] < options_.min_samples || cell.samples[1] < options_.min_samples) {
    return 0.25;
  }
  double fast = std::min(cell.mean_ns[0], cell.mean_ns[1]);
  double slow = std::max(cell.mean_ns[0], cell.mean_ns[1]);
  double ratio = slow / std::max(1.0, fast);
  return ratio < 1.2 ? 1.0 / 64 : ratio < 2.0 ? 1.0 / 256 : 1.0 / 1024;
}

Decision AdaptivePolicy::Decide(uint64_t remote_addr, uint32_t length, bool unload_possible) {
  uint32_t heat = sketch_.Add(remote_addr >> 12);
  uint16_t cell_index = static_cast<uint16_t>(SizeClass(length) * kHeatClasses + HeatClass(heat));
  if (!unload_possible) return {Path::kOffload, cell_index};
  Cell& cell = cells_[cell_index];
  double floor = ExploreShare(cell);
  double share = std::clamp(cell.share, floor, 1.0 - floor);
  cell.accumulator += share;
  if (cell.accumulator >= 1.0) {
    cell.accumulator -= 1.0;
    return {Path::kUnload, cell_index};
  }
  return {Path::kOffload, cell_index};
}

void AdaptivePolicy::Observe(const Decision& d, absl::Duration latency) {
  Cell& cell = cells_[d.cell];
  int i = static_cast<int>(d.path);
  double ns = absl::ToDoubleNanoseconds(latency);
  // The first writes of a path on a connection pay one-time costs (on the simulated fabric the
  // first two unloaded writes took 9.3-9.7 us against 3.7-3.9 us for the next ones). In the
  // estimate of a path that is only explored they would linger for thousands of writes and
  // keep the policy from a faster path, so they do not count.
  if (cell.warmup[i] < options_.warmup_samples) {
    ++cell.warmup[i];
    return;
  }
  ++cell.samples[i];
  // A plain mean until 1/n falls below the EWMA weight, so a cold first sample (an early miss)
  // does not linger in an estimate that sees few samples, as the explored path's does.
  // The explored path's estimate rests on few samples: it follows them faster (1/8), so that
  // what it saw early (start-up contention, other load) does not outweigh what it sees now.
  const double path_share = i == 1 ? cell.share : 1.0 - cell.share;
  const double weight = path_share < 0.125 ? 1.0 / 8 : options_.ewma_weight;
  double w = std::max(weight, 1.0 / cell.samples[i]);
  cell.mean_ns[i] += w * (ns - cell.mean_ns[i]);
  if (cell.samples[0] < options_.min_samples || cell.samples[1] < options_.min_samples) return;
  const double off = cell.mean_ns[0], unl = cell.mean_ns[1];
  const bool was_unload = cell.share >= 0.5;
  if (unl < off * (1.0 - options_.hysteresis)) {
    cell.share = std::min(1.0, cell.share + options_.step);
  } else if (off < unl * (1.0 - options_.hysteresis)) {
    cell.share = std::max(0.0, cell.share - options_.step);
  }
  if ((cell.share >= 0.5) != was_unload) ++switches_;
}

absl::StatusOr<std::unique_ptr<PathPolicy>> MakePolicy(absl::string_view name) {
  if (name == "offload") return std::unique_ptr<PathPolicy>(new OffloadPolicy());
  if (name == "unload") return std::unique_ptr<PathPolicy>(new UnloadPolicy());
  if (name == "adaptive") return std::unique_ptr<PathPolicy>(new AdaptivePolicy());
  if (absl::ConsumePrefix(&name, "split:")) {
    double f;
    if (absl::SimpleAtod(name, &f) && f >= 0 && f <= 1) {
      return std::unique_ptr<PathPolicy>(new SplitPolicy(f));
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown write policy '", name,
                   "': choose offload, unload, adaptive or split:F with 0 <= F <= 1"));
}

}  // namespace unloadkv::engine
