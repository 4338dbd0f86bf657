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

namespace {
// Decision::tag: the probe phase in the low 2 bits, the probe generation above them.
constexpr uint8_t kRegular = 0, kSettle = 1, kMeasureOther = 2, kMeasureRegime = 3;
Path Other(Path p) { return p == Path::kOffload ? Path::kUnload : Path::kOffload; }
}  // namespace

void AdaptivePolicy::StartProbe(int cell) {
  probing_ = cell;
  probe_pos_ = 0;
  probe_age_ = 0;
  probe_regime_ = cells_[cell].regime;
  ++generation_;
  for (int b = 0; b < 2; ++b) {
    issued_[b] = seen_[b] = 0;
    sum_ns_[b] = 0;
  }
  other_sum_ns_ = 0;
  other_seen_ = 0;
  probe_measured_ = probe_matched_ = 0;
}

Decision AdaptivePolicy::Decide(uint64_t remote_addr, uint32_t length, bool unload_possible) {
  uint32_t heat = sketch_.Add(remote_addr >> 12);
  uint16_t cell_index = static_cast<uint16_t>(SizeClass(length) * kHeatClasses + HeatClass(heat));
  if (!unload_possible) return {Path::kOffload, cell_index, kRegular};
  Cell& cell = cells_[cell_index];
  if (cell.until_probe > 0) {
    --cell.until_probe;
  } else if (probing_ < 0) {
    if (cell.warmup[0] + cell.warmup[1] == 0) {
      cell.until_probe = options_.first_probe;  // nothing observed yet: wait a little
    } else {
      StartProbe(cell_index);
      cell.until_probe = options_.probe_interval << cell.backoff;
    }
  }
  if (probing_ >= 0 && ++probe_age_ > 4 * options_.probe_interval) {
    FinishProbe(/*aborted=*/true);  // abandoned: its cell's writes or their completions stopped
  }
  Path path = cell.regime;
  if (probing_ < 0 || probe_pos_ >= 2 * options_.probe_block) {
    return {path, cell_index, kRegular};
  }
  const uint32_t b = options_.probe_block;
  const uint32_t pos = probe_pos_;
  if (probing_ == cell_index) {
    path = pos < b ? Other(probe_regime_) : probe_regime_;
    ++probe_pos_;
  }
  uint8_t phase = pos % b < b / 2 ? kSettle : pos < b ? kMeasureOther : kMeasureRegime;
  if (phase != kSettle) ++issued_[phase - kMeasureOther];
  return {path, cell_index, static_cast<uint8_t>(phase | (generation_ << 2))};
}

void AdaptivePolicy::Observe(const Decision& d, absl::Duration latency) {
  Cell& cell = cells_[d.cell];
  const int i = static_cast<int>(d.path);
  // The first writes of a path on a connection pay one-time costs (on the simulated fabric the
  // first two unloaded writes took 9.3-9.7 us against 2.3-2.4 us later): they do not count.
  if (cell.warmup[i] < options_.warmup_samples) {
    ++cell.warmup[i];
    return;
  }
  const double ns = absl::ToDoubleNanoseconds(latency);
  const uint8_t phase = d.tag & 3;
  const bool current = probing_ >= 0 && phase != kRegular &&
                       static_cast<uint8_t>(d.tag >> 2) == static_cast<uint8_t>(generation_ & 0x3F);
  const bool probed_path = current && d.cell == probing_ && d.path == Other(probe_regime_);
  if ((!current || phase == kSettle) && !probed_path) {
    ++regular_seen_;
    regular_ns_ += std::max(1.0 / 64, 1.0 / regular_seen_) * (ns - regular_ns_);
  }
  if (!current) return;
  if (probed_path && seen_[1] == 0) {
    // The probed path plainly slower than the connection's usual latency: stop early, settling
    // writes included (at a 4 KiB working set a probe of 1 KiB unloaded writes stalls on
    // overlapping offloaded ones from its first write).
    other_sum_ns_ += ns;
    if (++other_seen_ >= 8 && other_sum_ns_ > other_seen_ * regular_ns_ * options_.abort_margin) {
      FinishProbe(/*aborted=*/true);
      return;
    }
  }
  if (phase == kSettle) return;
  const int block = phase - kMeasureOther;
  if (block == 0 && d.cell == probing_) {
    ++probe_measured_;
    probe_matched_ += probed_path;
  }
  sum_ns_[block] += ns;
  ++seen_[block];
  const bool routed = probe_pos_ >= 2 * options_.probe_block;
  if (routed && seen_[0] * 10 >= issued_[0] * 9 && seen_[1] * 10 >= issued_[1] * 9) {
    FinishProbe(/*aborted=*/false);
  }
}

void AdaptivePolicy::FinishProbe(bool aborted) {
  Cell& cell = cells_[probing_];
  probing_ = -1;
  bool clearly_slower = aborted;
  if (!aborted) {
    // Inconclusive when most of the probe's writes were kept on the regime's path.
    const bool conclusive = seen_[0] > 0 && seen_[1] > 0 && probe_matched_ * 2 >= probe_measured_;
    const double other = conclusive ? sum_ns_[0] / seen_[0] : 0;
    const double regime = conclusive ? sum_ns_[1] / seen_[1] : 0;
    if (conclusive && other < regime * (1.0 - options_.hysteresis)) {
      if (++cell.wins < options_.wins_to_switch) {
        cell.until_probe = options_.first_probe / 2;  // confirm soon
        return;
      }
      cell.wins = 0;
      cell.regime = Other(probe_regime_);
      cell.backoff = 0;
      cell.until_probe = options_.probe_interval;
      ++switches_;
      return;
    }
    clearly_slower = !conclusive || other > regime * options_.backoff_margin;
  }
  cell.wins = 0;
  cell.backoff = clearly_slower ? std::min(cell.backoff + 1, options_.max_backoff) : 0;
  cell.until_probe = options_.probe_interval << cell.backoff;
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
