#include "transport/engine/adaptive_policy.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

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

Decision AdaptivePolicy::Decide(uint64_t remote_addr, uint32_t length, bool unload_possible) {
  uint32_t heat = sketch_.Add(remote_addr >> 12);
  uint16_t cell_index = static_cast<uint16_t>(SizeClass(length) * kHeatClasses + HeatClass(heat));
  if (!unload_possible) return {Path::kOffload, cell_index};
  Cell& cell = cells_[cell_index];
  ++cell.decisions;
  Path pref = cell.preferred;
  Path other = pref == Path::kOffload ? Path::kUnload : Path::kOffload;
  int p = static_cast<int>(pref), o = static_cast<int>(other);
  // Explore the other path: always until it has enough samples, then at a rate that falls as
  // it looks worse (1/32 when within 20%, 1/128 within 2x, 1/512 beyond).
  uint32_t period = 32;
  if (cell.samples[o] >= options_.min_samples && cell.samples[p] > 0) {
    double ratio = cell.mean_ns[o] / std::max(1.0, cell.mean_ns[p]);
    period = ratio < 1.2 ? 32 : ratio < 2.0 ? 128 : 512;
  } else if (cell.samples[o] < options_.min_samples) {
    period = 4;
  }
  if (cell.decisions % period == 0) return {other, cell_index};
  return {pref, cell_index};
}

void AdaptivePolicy::Observe(const Decision& d, absl::Duration latency) {
  Cell& cell = cells_[d.cell];
  int i = static_cast<int>(d.path);
  double ns = absl::ToDoubleNanoseconds(latency);
  cell.mean_ns[i] =
      cell.samples[i] == 0 ? ns : cell.mean_ns[i] + options_.ewma_weight * (ns - cell.mean_ns[i]);
  ++cell.samples[i];
  int p = static_cast<int>(cell.preferred), o = 1 - p;
  if (cell.samples[o] >= options_.min_samples && cell.samples[p] >= options_.min_samples &&
      cell.mean_ns[o] < cell.mean_ns[p] * (1.0 - options_.hysteresis)) {
    cell.preferred = static_cast<Path>(o);
    ++switches_;
  }
}

absl::StatusOr<std::unique_ptr<PathPolicy>> MakePolicy(absl::string_view name) {
  if (name == "offload") return std::unique_ptr<PathPolicy>(new OffloadPolicy());
  if (name == "unload") return std::unique_ptr<PathPolicy>(new UnloadPolicy());
  if (name == "adaptive") return std::unique_ptr<PathPolicy>(new AdaptivePolicy());
  return absl::InvalidArgumentError(
      absl::StrCat("unknown write policy '", name, "': choose offload, unload or adaptive"));
}

}  // namespace unloadkv::engine
