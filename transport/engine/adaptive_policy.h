// The adaptive path policy.
//
// Every write falls in a cell: (size class, heat class of its page). Size classes are powers
// of four from 256 B to 64 KiB; the heat class comes from a decaying HeatSketch of 4 KiB pages
// (cold, warm, hot, very hot). Each cell sends its writes down one path, its regime.
//
// Very hot pages stay offloaded (Options::hot_stays_offloaded): a page is very hot when its
// decaying count reaches 16 (counts are halved every 16384 updates), i.e. it took about 1/2048
// or more of the recent writes, so at most a few thousand pages are: few enough for a NIC's
// translation cache to hold, and offloading them keeps their translations cached.
//
// A cell that has not finished a probe routes like the nearest colder cell of its size class
// that has (pages warm up through the colder classes), and probes only after those.
//
// Now and then one cell probes the other regime with a paired comparison: a block of its writes
// goes down the other path, then a block stays on its regime. The first half of each block lets
// queues settle; during the second half the policy measures the latency of every write on the
// connection, whatever its cell, and asks the engine to report each of them (Decision::observe:
// a lazy write is then posted signaled; the one lazy write in eight the engine observes anyway
// is not a fair sample, docs/engine.md). When the connection's writes are faster by
// more than the hysteresis margin while the cell uses the other path (in wins_to_switch consecutive
// probes), the cell switches. A probe whose writes the engine mostly kept on the regime's path (it
// routes a write overlapping an in-flight one down that one's path) decides nothing. The two blocks
// run back to back, so what drifts meanwhile (a translation cache warming up, a hot set moving)
// weighs on both alike; one probe runs at a time.
//
// Why regimes and all writes rather than single writes of one path: the paths share resources
// (the initiator's CPU, the NIC, the unload worker), and a write sent alone down a path sees it
// idle. Comparing per-write latencies of the two paths settles where they look equally fast,
// which can be slower than either alone: on the simulated fabric at 4 GiB with 1 KiB writes,
// per-path estimates drifted to 94% unload at 4.19 us while offload-only takes 3.27 us; and a
// cell that only counts its own writes misses what its choice costs the other cells'.
//
// Probes wait while the connection's latency is still falling: a translation cache warming up
// under offloaded writes (at a 4 MiB working set, for about 3000 writes) makes offload look
// slower than it is, and a cell that switched to unload then would never see it warm. And only
// a cell with a fair share of the writes probes: its switch must show in the connection's mean.
//
// A probe that finds the other regime clearly slower (by backoff_margin) doubles the interval
// to the cell's next one, up to 16x; one whose probed writes are plainly slower (abort_margin)
// than the connection's usual latency stops early, and one that does not complete (the cell's
// writes stopped coming) is abandoned. Routing is deterministic; Decide and Observe neither
// block nor allocate.
#ifndef UNLOADKV_TRANSPORT_ENGINE_ADAPTIVE_POLICY_H_
#define UNLOADKV_TRANSPORT_ENGINE_ADAPTIVE_POLICY_H_

#include <array>
#include <cstdint>
#include <memory>

#include "transport/engine/heat_sketch.h"
#include "transport/engine/policy.h"
#include "transport/engine/target_model.h"

namespace unloadkv::engine {

class AdaptivePolicy : public PathPolicy {
 public:
  struct Options {
    double hysteresis = 0.03;         // regimes within this fraction count as equal
    uint32_t warmup_samples = 4;      // first observations of each path and cell, not counted
    uint32_t first_probe = 256;       // writes of a cell before its first probe
    uint32_t probe_interval = 2048;   // writes of a cell between probes (before backing off)
    uint32_t probe_block = 128;       // writes per block (other path, then regime); half settle
    uint32_t max_backoff = 4;         // probe interval grows up to probe_interval << max_backoff
    double backoff_margin = 1.05;     // the other regime this much slower backs off
    double abort_margin = 1.3;        // the other path this much slower ends a probe early
    uint32_t wins_to_switch = 1;      // consecutive probes that must find the other faster
    uint32_t sketch_window = 16384;   // updates between halvings of the heat sketch
    bool hot_stays_offloaded = true;  // very hot pages are never unloaded nor probed
    // Only a cell with at least 1/this of the recent writes probes: a probe measures all the
    // connection's writes, in which a rarer cell's switch would not show beyond the hysteresis.
    uint32_t min_probe_share_inverse = 8;
    // A probe starts only when the connection's mean latency over its last 128 regular writes is
    // not below its mean 128 x trend_blocks writes earlier by more than the hysteresis: while a
    // translation cache warms up, the current regime would be judged by a transient (1..32).
    uint32_t trend_blocks = 12;
    // With a target model (AttachTarget): writes of a cell with nothing observed before its
    // first probe, when the target's latency has already settled by other connections' writes
    // (a short-lived connection must finish its probe while it lives).
    uint32_t first_probe_settled_target = 16;
  };
  static constexpr int kSizeClasses = 6;
  static constexpr int kHeatClasses = 4;
  // Heat-sketch counts from which a page is heat class 1, 2 and 3 (very hot: always offloaded).
  static constexpr uint32_t kHeatThresholds[kHeatClasses - 1] = {2, 6, 16};

  AdaptivePolicy() : AdaptivePolicy(Options()) {}
  explicit AdaptivePolicy(const Options& options);
  ~AdaptivePolicy() override;

  absl::string_view name() const override { return "adaptive"; }
  Decision Decide(uint64_t remote_addr, uint32_t length, bool unload_possible) override;
  // While the connection is backlogged (most of its writes wait to be posted: WriteTiming::
  // waited), a write's latency says how many writes were queued ahead of it more than what
  // its path costs, and each path keeps a different number queued (the staging ring 64, the
  // send queue hundreds). A probe then compares the two halves by the time per write: their
  // mean latency over the mean number of writes in flight as each was decided (it waited
  // behind those, itself included: Little's law for a queue, its time counted from the
  // decision: WriteTiming::held), and stops early by nothing. Its halves are then as long as
  // the writes in flight (StartProbe). Sim, a shard's transfer into a fresh arena: the probes'
  // halves had 52-365 writes in flight; judged by latency the copy settled at 94% unloaded
  // (8.70 ms, unload-only 8.75), by time per write at 43% (7.06 ms).
  void Observe(const Decision& d, const WriteTiming& t) override;
  // A probe counts only the writes it will hear about: a measured decision that ends
  // unobserved (a lazy write posted quietly: KV clients post most value writes so) leaves the
  // block's count, or the probe would wait for it until abandoned.
  void Unobserved(const Decision& d) override;
  // With requests reported, a probe compares the requests' latencies in its two measured
  // halves instead of the writes' (at least kMinRequests in each): what the application waits
  // for. A request counts when a write was decided since the previous one ended (it may have
  // waited for it), for the half of the probing cell's write decided last (a closed-loop
  // client's request waits for its own write).
  void ObserveRequest(absl::Duration latency) override;
  // Backlogged, a write the policy unloads waits for a staging slot (it would wait behind the
  // others anyway, and a probe then measures the path it chose); otherwise it goes offload.
  FullRingAction OnRingFull() const override {
    return backlogged() ? FullRingAction::kWait : FullRingAction::kOffload;
  }
  uint64_t switches() const override { return switches_; }
  // Shares what this connection learns with every connection into the same device, and starts
  // from what they learned: a cell this connection has not probed itself routes like the
  // model's, a probe starts only when the model says one is due and this connection holds the
  // cell's probe, and each concluded probe is published.
  void AttachTarget(std::shared_ptr<TargetModel> target) override { target_ = std::move(target); }
  // A peer whose translation cache is full (kFull) is past warming up: this connection may
  // probe without waiting for its own latency to settle (its misses are the working set's).
  void OnTargetHint(rnic::TranslationCacheState cache) override {
    target_cache_full_ = cache == rnic::TranslationCacheState::kFull;
  }

  // For tests and reports: the path a cell's writes take outside probes.
  Path regime(int size_class, int heat_class) const {
    return EffectiveRegime(size_class * kHeatClasses + heat_class);
  }
  static int SizeClass(uint32_t length);
  static int HeatClass(uint32_t count);

 private:
  struct Cell {
    Path regime = Path::kOffload;
    uint32_t warmup[2] = {0, 0};
    uint32_t until_probe = 0;  // this cell's writes before it may probe again
    uint32_t backoff = 0;
    uint32_t wins = 0;
    bool concluded = false;     // a probe of this cell compared the two regimes
    bool waited_first = false;  // its wait before a first probe began (Decide)
    uint64_t recent = 0;        // decisions, halved every kShareWindow decisions of the policy
    double regular_ns = 0;      // moving mean (1/64) of its writes outside measured probe halves
    uint64_t regular_seen = 0;
    uint32_t unflushed = 0;  // decisions not yet added to the target model's count
  };
  static_assert(kSizeClasses * kHeatClasses == TargetModel::kCells);
  static constexpr uint32_t kFlushWrites = 32;
  // A cell's regime is known when this connection's probe concluded it, or the target model's.
  bool Known(int cell) const;
  Path KnownRegime(int cell) const;
  bool backlogged() const { return waited_share_ >= 0.5; }
  bool Settled() const {
    return settled_ || target_cache_full_ || (target_ != nullptr && target_->settled());
  }
  // How a probe ended: compared both regimes, stopped early (the other path plainly slower:
  // the regime stands), or abandoned (its writes or their completions stopped coming).
  enum class ProbeEnd { kCompleted, kStoppedEarly, kAbandoned };
  static constexpr uint64_t kShareWindow = 4096;
  Path EffectiveRegime(int cell) const;
  bool Major(const Cell& cell) const;
  // Starts a probe of `cell` if the target model (when attached) lets it; false if not.
  bool StartProbe(int cell);
  void FinishProbe(ProbeEnd end);
  // With a target model: publishes the probe of `index` (when `publish`: its regime and
  // back-off as now set, the measured blocks' mean latencies, 0 when not measured) and gives
  // up the claim.
  void PublishProbe(int index, bool publish, double other_ns, double regime_ns);
  // The probe just run's cell waits `writes` before its next one, or twice that probe's length
  // when it was lengthened (backlogged): probes keep to a third of the writes.
  uint32_t Spaced(uint32_t writes) const;
  // Whether `d` was a measured decision of the running probe.
  bool OfCurrentProbe(const Decision& d) const;
  // Finishes the probe once it routed all its writes and heard of 90% of each block's.
  void FinishProbeIfComplete();
  // Counts one regular write that ended (with its latency when observed) into the trend.
  void AddToTrend(double ns, bool observed);

  Options options_;
  std::shared_ptr<TargetModel> target_;  // null: not attached (learns alone)
  bool target_cache_full_ = false;       // OnTargetHint
  HeatSketch sketch_;
  std::array<Cell, kSizeClasses * kHeatClasses> cells_;
  uint64_t switches_ = 0;
  uint64_t decisions_ = 0;  // of cells that may unload
  // The running probe (probing_ < 0: none): the probing cell's writes routed so far (of
  // 2 x (settle_len_ + measure_len_)), its regime when the probe began, a generation that tags the
  // probe's decisions, and per block (0: other path, 1: regime) the measured decisions issued,
  // their observations and the sum of their latencies.
  int probing_ = -1;
  uint32_t probe_pos_ = 0;
  // The running probe's halves, in writes of the probing cell: probe_block / 2 each, longer
  // when the connection is backlogged (StartProbe; at most kMaxProbeDepth x 3 per block).
  static constexpr uint32_t kMaxProbeDepth = 1024;
  uint32_t settle_len_ = 0, measure_len_ = 0;
  uint32_t probe_age_ = 0;  // decisions of any cell since the probe began
  Path probe_regime_ = Path::kOffload;
  uint8_t generation_ = 0;
  uint64_t issued_[2] = {0, 0};
  uint64_t seen_[2] = {0, 0};
  double sum_ns_[2] = {0, 0};

  double regular_ns_ = 0;  // moving mean (1/64) of the writes outside measured probe halves
  uint64_t regular_seen_ = 0;
  // Means of consecutive blocks of kTrendBlock regular observations; settled_: the last one was
  // not faster than the one trend_blocks before by more than the hysteresis.
  static constexpr uint32_t kTrendBlock = 128;
  double trend_sum_ns_ = 0;
  static constexpr uint32_t kMaxTrendBlocks = 32;
  double trend_block_ns_[kMaxTrendBlocks] = {};  // the last trend_blocks block means, a ring
  uint32_t trend_seen_ = 0, trend_blocks_ = 0;
  uint32_t trend_observed_ = 0;  // of the block's trend_seen_ writes
  bool settled_ = false;
  // Observed writes of each path over the connection's life. A path's first kFreshPathWrites
  // on a connection do not count for stopping a probe early: a new connection's first unloaded
  // writes queue for staging credits the target lends as the lane stays busy (sim, 4 GiB, a
  // connection's first probe: 4.8 us over its unloaded writes 17-32 against 3.4 us offloaded,
  // 2.7 us over its measured half).
  static constexpr uint64_t kFreshPathWrites = 64;
  uint64_t path_observed_[2] = {0, 0};
  // The probing cell's last kAbortWindow writes down the other path, settling ones too.
  static constexpr uint32_t kAbortWindow = 16;
  double other_ns_[kAbortWindow] = {};
  double other_sum_ns_ = 0;
  uint32_t other_seen_ = 0;
  uint32_t other_skipped_ = 0;
  // The probing cell's measured other-block writes observed, and how many took that path (the
  // engine routes a write overlapping an in-flight one down that one's path).
  uint32_t probe_measured_ = 0, probe_matched_ = 0;
  // Decisions not yet ended in Observe or Unobserved (the writes in flight, as the engine
  // decides a write when it may be posted); the moving share (1/64) of the observed writes
  // that had waited; per measured half, the sum of in_flight_ as each write was decided
  // (Decision::ahead).
  uint64_t in_flight_ = 0;
  double waited_share_ = 0;
  double in_flight_sum_[2] = {0, 0};
  double held_sum_ns_[2] = {0, 0};  // per measured half, WriteTiming::held
  // Requests that ended during the probe's measured halves (0: other path, 1: regime).
  static constexpr uint64_t kMinRequests = 16;
  uint64_t requests_seen_[2] = {0, 0};
  double requests_sum_ns_[2] = {0, 0};
  bool write_since_request_ = false;  // a write that may unload was decided since the last
};

}  // namespace unloadkv::engine

#endif  // UNLOADKV_TRANSPORT_ENGINE_ADAPTIVE_POLICY_H_
