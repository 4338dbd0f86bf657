#include "transport/engine/adaptive_policy.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace unloadkv::engine {

AdaptivePolicy::AdaptivePolicy(const Options& options)
    : options_(options), sketch_(16, options.sketch_window) {
  options_.trend_blocks = std::clamp<uint32_t>(options_.trend_blocks, 1, kMaxTrendBlocks);
}

AdaptivePolicy::~AdaptivePolicy() {
  if (target_ == nullptr || probing_ < 0) return;
  // A connection that closes inside a probe shares what the probe measured when both measured
  // halves heard of at least half their writes: otherwise the target's first probe is lost
  // with every connection shorter than it (sim, 4 GiB, 500-write connections: a probe begun at
  // a connection's 277th write had routed 224 of its 256 writes), and the next one starts over.
  const uint64_t enough = measure_len_ / 2;
  if (seen_[0] >= enough && seen_[1] >= enough) {
    FinishProbe(ProbeEnd::kCompleted);
  } else {
    target_->ReleaseProbe(probing_, reinterpret_cast<uintptr_t>(this));
  }
}

int AdaptivePolicy::SizeClass(uint32_t length) {
  int c = 0;
  for (uint32_t limit = 256; c < kSizeClasses - 1 && length > limit; limit <<= 2) ++c;
  return c;
}

int AdaptivePolicy::HeatClass(uint32_t count) {
  int c = 0;
  while (c < kHeatClasses - 1 && count >= kHeatThresholds[c]) ++c;
  return c;
}

namespace {
// Decision::tag: the probe phase in the low 2 bits, the probe generation above them.
constexpr uint8_t kRegular = 0, kSettle = 1, kMeasureOther = 2, kMeasureRegime = 3;
Path Other(Path p) { return p == Path::kOffload ? Path::kUnload : Path::kOffload; }
// A plain mean of the first 64 samples, then an exponential one with weight 1/64.
void AddToMovingMean(double ns, double* mean, uint64_t* seen) {
  ++*seen;
  *mean += std::max(1.0 / 64, 1.0 / *seen) * (ns - *mean);
}
}  // namespace

bool AdaptivePolicy::Major(const Cell& cell) const {
  return cell.recent * options_.min_probe_share_inverse >=
         std::min<uint64_t>(decisions_, 2 * kShareWindow);
}

bool AdaptivePolicy::Known(int cell) const {
  return cells_[cell].concluded || (target_ != nullptr && target_->Read(cell).known);
}

Path AdaptivePolicy::KnownRegime(int cell) const {
  return cells_[cell].concluded || target_ == nullptr ? cells_[cell].regime
                                                      : target_->Read(cell).regime;
}

Path AdaptivePolicy::EffectiveRegime(int cell) const {
  const int heat = cell % kHeatClasses;
  for (int h = heat; h >= 0; --h) {
    if (Known(cell - heat + h)) return KnownRegime(cell - heat + h);
  }
  return cells_[cell].regime;
}

bool AdaptivePolicy::StartProbe(int cell) {
  if (target_ != nullptr && (!target_->Due(cell, options_.probe_interval) ||
                             !target_->TryClaimProbe(cell, reinterpret_cast<uintptr_t>(this),
                                                     4 * uint64_t{options_.probe_interval}))) {
    return false;  // another connection probed this cell of the target lately, or is probing
  }
  if (target_ != nullptr && !cells_[cell].concluded) {
    // A cell routed by the model backs off as the model's probes did: each connection starting
    // from 0 re-probed a plainly slower path every interval (sim, 4 GiB, 500-write connections:
    // every ninth connection spent 53-95 writes offloaded).
    cells_[cell].backoff = target_->Read(cell).backoff;
  }
  probing_ = cell;
  probe_pos_ = 0;
  // Backlogged, each half is as long as the writes in flight and a block measures twice that:
  // the other regime's writes queued before a block have ended when its measured half begins,
  // and the measured half spans a few latencies (soft, a shard's 4 KiB transfer with 120-300
  // in flight: halves of 64 writes lasted less than one latency, and their time per write
  // ranged over 4.5-24 us where offload-only takes 6.3 and unload-only 11).
  const uint32_t half = options_.probe_block / 2;
  const uint32_t depth =
      backlogged() ? static_cast<uint32_t>(std::min<uint64_t>(in_flight_, kMaxProbeDepth)) : 0;
  settle_len_ = std::max(half, depth);
  measure_len_ = std::max(half, 2 * depth);
  probe_age_ = 0;
  probe_regime_ = EffectiveRegime(cell);
  cells_[cell].regime = probe_regime_;
  ++generation_;
  for (int b = 0; b < 2; ++b) {
    issued_[b] = seen_[b] = 0;
    sum_ns_[b] = in_flight_sum_[b] = held_sum_ns_[b] = 0;
  }
  other_sum_ns_ = 0;
  other_seen_ = 0;
  other_skipped_ = 0;
  std::fill(std::begin(other_ns_), std::end(other_ns_), 0.0);
  probe_measured_ = probe_matched_ = 0;
  for (int b = 0; b < 2; ++b) {
    requests_seen_[b] = 0;
    requests_sum_ns_[b] = 0;
  }
  return true;
}

Decision AdaptivePolicy::Decide(uint64_t remote_addr, uint32_t length, bool unload_possible) {
  ++in_flight_;
  uint32_t heat = sketch_.Add(remote_addr >> 12);
  const int heat_class = HeatClass(heat);
  uint16_t cell_index = static_cast<uint16_t>(SizeClass(length) * kHeatClasses + heat_class);
  if (!unload_possible || (options_.hot_stays_offloaded && heat_class == kHeatClasses - 1)) {
    return {Path::kOffload, cell_index, kRegular};
  }
  Cell& cell = cells_[cell_index];
  write_since_request_ = true;
  if (target_ != nullptr && ++cell.unflushed == kFlushWrites) {
    target_->AddWrites(cell_index, kFlushWrites);
    cell.unflushed = 0;
  }
  // Each cell's share of the recent decisions (counts halved every kShareWindow).
  ++cell.recent;
  if (++decisions_ % kShareWindow == 0) {
    for (Cell& c : cells_) c.recent /= 2;
  }
  const bool major = Major(cell);
  // Colder cells first: a warmer cell routes like them until it has probed itself.
  bool colder_known = true;
  for (int h = 0; h < heat_class; ++h) {
    const Cell& c = cells_[cell_index - heat_class + h];
    colder_known &= Known(cell_index - heat_class + h) || !Major(c);
  }
  if (cell.until_probe > 0) {
    --cell.until_probe;
  } else if (probing_ < 0 && major && colder_known && Settled()) {
    if (cell.warmup[0] + cell.warmup[1] == 0 && !cell.waited_first) {
      // Nothing observed yet: wait a little (less when other connections' writes settled the
      // target: this connection may not live long), once: a cell whose writes are all lazy
      // and never the engine's observed one in eight (a bulk load's first write to each page,
      // four writes a page) is heard of only in its probes.
      cell.waited_first = true;
      cell.until_probe = settled_ ? options_.first_probe : options_.first_probe_settled_target;
    } else if (StartProbe(cell_index)) {
      cell.until_probe = options_.probe_interval << cell.backoff;
    }
  }
  if (probing_ >= 0 &&
      ++probe_age_ > 4 * std::max(options_.probe_interval, 2 * (settle_len_ + measure_len_))) {
    FinishProbe(ProbeEnd::kAbandoned);  // its cell's writes or their completions stopped
  }
  Path path = EffectiveRegime(cell_index);
  const uint32_t b = settle_len_ + measure_len_;
  if (probing_ < 0 || probe_pos_ >= 2 * b) {
    return {path, cell_index, kRegular};
  }
  const uint32_t pos = probe_pos_;
  if (probing_ == cell_index) {
    path = pos < b ? Other(probe_regime_) : probe_regime_;
    ++probe_pos_;
  }
  uint8_t phase = pos % b < settle_len_ ? kSettle : pos < b ? kMeasureOther : kMeasureRegime;
  if (phase != kSettle) ++issued_[phase - kMeasureOther];
  // Measured writes are all observed: the one lazy offloaded write in eight that the engine
  // observes anyway is not a fair sample of them (docs/engine.md).
  return {path, cell_index, static_cast<uint8_t>(phase | (generation_ << 2)), phase != kSettle,
          static_cast<uint32_t>(std::min<uint64_t>(in_flight_, UINT32_MAX))};
}

void AdaptivePolicy::Observe(const Decision& d, const WriteTiming& t) {
  Cell& cell = cells_[d.cell];
  const int i = static_cast<int>(d.path);
  ++path_observed_[i];
  if (in_flight_ > 0) --in_flight_;
  waited_share_ += ((t.waited ? 1.0 : 0.0) - waited_share_) / 64;
  // The first writes of a path on a connection pay one-time costs (on the simulated fabric the
  // first two unloaded writes took 9.3-9.7 us against 2.3-2.4 us later): they do not count.
  if (cell.warmup[i] < options_.warmup_samples) {
    ++cell.warmup[i];
    return;
  }
  const double ns = absl::ToDoubleNanoseconds(t.latency);
  const uint8_t phase = d.tag & 3;
  const bool current = OfCurrentProbe(d);
  const bool probed_path = current && d.cell == probing_ && d.path == Other(probe_regime_);
  if ((!current || phase == kSettle) && !probed_path) {
    AddToMovingMean(ns, &regular_ns_, &regular_seen_);
    AddToMovingMean(ns, &cell.regular_ns, &cell.regular_seen);
    AddToTrend(ns, /*observed=*/true);
  }
  if (!current) return;
  if (probed_path && seen_[1] == 0 && ++other_skipped_ > kAbortWindow &&
      path_observed_[i] > kFreshPathWrites && !backlogged()) {
    // The probed path's last kAbortWindow writes plainly slower than the cell's usual latency:
    // stop early (at a 4 KiB working set a probe of 1 KiB unloaded writes stalls on overlapping
    // offloaded ones throughout). The probe's first kAbortWindow writes do not count: a path's
    // first writes pay one-time costs and queue behind each other.
    double& slot = other_ns_[other_seen_ % kAbortWindow];
    other_sum_ns_ += ns - slot;
    slot = ns;
    // Against the probing cell's own usual latency, and only once kAbortWindow of its
    // regular writes were observed. Cells differ (very hot pages' offloaded writes are fast):
    // the connection's mean would stop a cell's probe of a path that is slower than the other
    // cells' writes but faster than its own (sim, YCSB load, the observed writes being pages'
    // later ones at 2.0-2.3 us: probes of the pages' first writes stopped with those at
    // 2.8-3.1 us unloaded). And a connection whose writes are mostly lazy (a KV client's) may
    // start a probe before then: against an unknown (0) latency every probe of it stopped at
    // its first chance (sim, YCSB A, 8 fresh connections of 1250 writes: each stopped after
    // 80 unloaded writes).
    const Cell& probing = cells_[probing_];
    const double usual = probing.regular_seen >= kAbortWindow ? probing.regular_ns : 0;
    if (++other_seen_ >= kAbortWindow && usual > 0 &&
        other_sum_ns_ > kAbortWindow * usual * options_.abort_margin) {
      cells_[probing_].concluded = true;  // the regime stands
      FinishProbe(ProbeEnd::kStoppedEarly);
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
  held_sum_ns_[block] += absl::ToDoubleNanoseconds(t.held);
  in_flight_sum_[block] += d.ahead;
  ++seen_[block];
  FinishProbeIfComplete();
}

void AdaptivePolicy::AddToTrend(double ns, bool observed) {
  // Is the connection's latency still falling (a translation cache warming up)? Then a
  // comparison now would judge the current regime by a transient. Blocks are counted in
  // writes, so that warming up takes as many writes whether or not each is observed.
  if (observed) {
    trend_sum_ns_ += ns;
    ++trend_observed_;
  }
  if (++trend_seen_ < kTrendBlock) return;
  if (trend_observed_ > 0) {
    const double mean = trend_sum_ns_ / trend_observed_;
    const uint32_t n = options_.trend_blocks;
    double& then = trend_block_ns_[trend_blocks_ % n];  // the block n blocks ago
    settled_ = trend_blocks_ >= n && mean >= then * (1.0 - options_.hysteresis);
    then = mean;
    ++trend_blocks_;
    if (target_ != nullptr) target_->AddTrendBlock(mean, n, options_.hysteresis);
  }
  trend_sum_ns_ = 0;
  trend_seen_ = 0;
  trend_observed_ = 0;
}

void AdaptivePolicy::ObserveRequest(absl::Duration latency) {
  // Only a request that may have waited for a write counts: reads between writes would dilute
  // the difference (sim, YCSB B, 95% reads: 92% of the value writes unloaded by the writes'
  // latencies, 10% by all requests').
  const bool after_write = write_since_request_;
  write_since_request_ = false;
  if (!after_write || probing_ < 0 || probe_pos_ == 0) return;
  const uint32_t b = settle_len_ + measure_len_;
  const uint32_t pos = probe_pos_ - 1;               // the probing cell's write decided last
  if (pos < 2 * b && pos % b < settle_len_) return;  // a settling half
  const int block = pos < b ? 0 : 1;                 // the other path, or the regime
  requests_sum_ns_[block] += absl::ToDoubleNanoseconds(latency);
  ++requests_seen_[block];
}

uint32_t AdaptivePolicy::Spaced(uint32_t writes) const {
  const uint32_t block = settle_len_ + measure_len_;
  return block > options_.probe_block ? std::max(writes, 4 * block) : writes;
}

bool AdaptivePolicy::OfCurrentProbe(const Decision& d) const {
  return probing_ >= 0 && (d.tag & 3) != kRegular &&
         static_cast<uint8_t>(d.tag >> 2) == static_cast<uint8_t>(generation_ & 0x3F);
}

void AdaptivePolicy::FinishProbeIfComplete() {
  const bool routed = probe_pos_ >= 2 * (settle_len_ + measure_len_);
  if (routed && seen_[0] * 10 >= issued_[0] * 9 && seen_[1] * 10 >= issued_[1] * 9) {
    FinishProbe(ProbeEnd::kCompleted);
  }
}

void AdaptivePolicy::Unobserved(const Decision& d) {
  if (in_flight_ > 0) --in_flight_;
  const uint8_t phase = d.tag & 3;
  const bool current = OfCurrentProbe(d);
  if (!current || phase == kSettle) {
    AddToTrend(0, /*observed=*/false);
    return;
  }
  uint64_t& issued = issued_[phase - kMeasureOther];
  if (issued > 0) --issued;
  FinishProbeIfComplete();
}

void AdaptivePolicy::FinishProbe(ProbeEnd end) {
  const int index = probing_;
  Cell& cell = cells_[index];
  probing_ = -1;
  bool clearly_slower = end != ProbeEnd::kCompleted;
  double other = 0, regime = 0;
  if (end == ProbeEnd::kCompleted) {
    // Inconclusive when most of the probe's writes were kept on the regime's path.
    const bool conclusive = seen_[0] > 0 && seen_[1] > 0 && probe_matched_ * 2 >= probe_measured_;
    // Backlogged, the time per write (Observe); else what the application waits for when it
    // says (its requests), else the writes' latencies.
    const bool by_requests = requests_seen_[0] >= kMinRequests && requests_seen_[1] >= kMinRequests;
    const double* sum = by_requests ? requests_sum_ns_ : sum_ns_;
    const uint64_t* n = by_requests ? requests_seen_ : seen_;
    const bool per_write = backlogged() && in_flight_sum_[0] > 0 && in_flight_sum_[1] > 0;
    // Per write: the time from decision to completion (the span in_flight_ counts) over the
    // writes in flight as each was decided.
    const auto per_write_ns = [&](int b) {
      return (sum_ns_[b] + held_sum_ns_[b]) / in_flight_sum_[b];
    };
    other = !conclusive ? 0 : per_write ? per_write_ns(0) : sum[0] / n[0];
    regime = !conclusive ? 0 : per_write ? per_write_ns(1) : sum[1] / n[1];
    cell.concluded |= conclusive;
    if (conclusive && other < regime * (1.0 - options_.hysteresis)) {
      if (++cell.wins < options_.wins_to_switch) {
        cell.until_probe = Spaced(options_.first_probe / 2);  // confirm soon
        PublishProbe(index, /*publish=*/false, 0, 0);         // nothing to share yet
        return;
      }
      cell.wins = 0;
      cell.regime = Other(probe_regime_);
      cell.backoff = 0;
      cell.until_probe = Spaced(options_.probe_interval);
      ++switches_;
      PublishProbe(index, /*publish=*/true, other, regime);
      return;
    }
    clearly_slower = !conclusive || other > regime * options_.backoff_margin;
    if (conclusive && other < regime) {
      // Faster, but within the hysteresis: one probe is noisy, look again soon.
      cell.wins = 0;
      cell.backoff = 0;
      cell.until_probe = Spaced(options_.first_probe);
      PublishProbe(index, /*publish=*/true, other, regime);
      return;
    }
    if (!conclusive) end = ProbeEnd::kAbandoned;  // nothing learned to share
  }
  cell.wins = 0;
  cell.backoff = clearly_slower ? std::min(cell.backoff + 1, options_.max_backoff) : 0;
  cell.until_probe = Spaced(options_.probe_interval << cell.backoff);
  PublishProbe(index, /*publish=*/end != ProbeEnd::kAbandoned, other, regime);
}

void AdaptivePolicy::PublishProbe(int index, bool publish, double other_ns, double regime_ns) {
  if (target_ == nullptr) return;
  if (publish) {
    const bool other_unloaded = Other(probe_regime_) == Path::kUnload;
    target_->Publish(index, cells_[index].regime, other_unloaded ? regime_ns : other_ns,
                     other_unloaded ? other_ns : regime_ns, cells_[index].backoff);
  }
  target_->ReleaseProbe(index, reinterpret_cast<uintptr_t>(this));
}

absl::StatusOr<std::unique_ptr<PathPolicy>> MakePolicy(absl::string_view name) {
  if (name == "offload") return std::unique_ptr<PathPolicy>(new OffloadPolicy());
  if (name == "unload") return std::unique_ptr<PathPolicy>(new UnloadPolicy());
  if (name == "adaptive") return std::unique_ptr<PathPolicy>(new AdaptivePolicy());
  absl::string_view arg = name;
  if (absl::ConsumePrefix(&arg, "split:")) {
    double f;
    if (absl::SimpleAtod(arg, &f) && f >= 0 && f <= 1) {
      return std::unique_ptr<PathPolicy>(new SplitPolicy(f));
    }
  } else if (absl::ConsumePrefix(&arg, "unload_after:")) {
    uint64_t n;
    if (!arg.empty() && std::all_of(arg.begin(), arg.end(), absl::ascii_isdigit) &&
        absl::SimpleAtoi(arg, &n)) {
      return std::unique_ptr<PathPolicy>(new UnloadAfterPolicy(n));
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown write policy '", name,
                   "': choose offload, unload, adaptive, split:F with 0 <= F <= 1 or "
                   "unload_after:N with N >= 0 writes"));
}

}  // namespace unloadkv::engine
