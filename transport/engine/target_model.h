// What the adaptive policies of one engine have learned about one target device.
//
// The translation cache that decides which path is faster belongs to the target NIC, so every
// connection of an engine that writes into the same peer device shares one TargetModel
// (TargetModels keys them by the peer's device identity from the bootstrap exchange). Per cell
// (AdaptivePolicy's size class x heat class) it holds the regime the latest concluded probe
// chose, the latencies that probe measured on each regime, when it was published, how many
// probes in a row agreed, and the probe back-off; and for the whole target the trend of the
// connections' latency (is a translation cache still warming up?).
//
// Connections use it three ways (docs/engine.md, "The per-target model"):
//  * warm start: a cell a connection has not probed itself routes like the model's;
//  * coordinated probes: one probe per cell and target at a time (TryClaimProbe), due when the
//    target's writes of that cell since the last probe reach the back-off interval;
//  * a shared trend: a new connection may probe as soon as the target's latency has settled,
//    by any connection's writes.
//
// Thread-safety: every member may be called from any thread. The decision path (Read,
// AddWrites, Due, settled) only loads and adds atomics: no lock, no allocation.
#ifndef UNLOADKV_TRANSPORT_ENGINE_TARGET_MODEL_H_
#define UNLOADKV_TRANSPORT_ENGINE_TARGET_MODEL_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "transport/base/clock.h"
#include "transport/base/mutex.h"
#include "transport/engine/path.h"

namespace unloadkv::engine {

class TargetModel {
 public:
  static constexpr int kCells = 24;  // AdaptivePolicy::kSizeClasses x kHeatClasses
  static constexpr uint32_t kMaxConfidence = 63;
  static constexpr uint32_t kTrendRing = 32;

  // One cell as last published. Latencies are the means (ns) of the probing connection's
  // writes in the probe's two measured blocks; 0 when the probe ended early (the regime
  // stood).
  struct CellState {
    bool known = false;
    Path regime = Path::kOffload;
    uint32_t confidence = 0;  // probes in a row that concluded on this regime (1..63)
    uint32_t backoff = 0;     // the next probe is due after probe_interval << backoff writes
    uint32_t publications = 0;
  };
  struct CellReport {
    CellState state;
    uint32_t offload_ns = 0, unload_ns = 0;
    absl::Duration age = absl::InfiniteDuration();  // since the last publication
    uint64_t writes_since_probe = 0;
    bool probing = false;
  };

  // `clock` (not owned, outlives the model) stamps publications.
  TargetModel(std::string key, const Clock* clock) : key_(std::move(key)), clock_(clock) {}
  TargetModel(const TargetModel&) = delete;
  TargetModel& operator=(const TargetModel&) = delete;

  // The peer device's identity: "transport/address".
  const std::string& key() const { return key_; }

  CellState Read(int cell) const { return Unpack(cells_[cell].state.load(std::memory_order_acquire)); }
  // Counts `n` writes of `cell` (connections add them in batches).
  void AddWrites(int cell, uint32_t n) {
    cells_[cell].writes.fetch_add(n, std::memory_order_relaxed);
  }
  // Whether a probe of `cell` is due target-wide: nothing published yet, or the target's writes
  // of the cell since the last probe began reached `interval << backoff`.
  bool Due(int cell, uint32_t interval) const;

  // One probe per cell at a time: true when `owner` (nonzero, unique per connection) now holds
  // the cell's probe, which also restarts the cell's write count. A claim whose holder went
  // quiet is taken over once the cell's writes since it reach `lease_writes`.
  bool TryClaimProbe(int cell, uint64_t owner, uint64_t lease_writes);
  // Ends `owner`'s claim, if it still holds it.
  void ReleaseProbe(int cell, uint64_t owner);
  // A probe of `cell` concluded on `regime` (latencies as in CellReport) and set the back-off.
  void Publish(int cell, Path regime, double offload_ns, double unload_ns, uint32_t backoff);

  // The shared trend: a connection's mean latency over its last block of regular writes. The
  // target is settled when the latest block is not faster than the one `blocks` earlier by
  // more than `hysteresis`. Blocks of connections with other write sizes mix in: that makes
  // "settled" come sooner, never later, and only lets probes (paired comparisons on one
  // connection) start.
  void AddTrendBlock(double mean_ns, uint32_t blocks, double hysteresis);
  bool settled() const { return settled_.load(std::memory_order_relaxed); }

  CellReport Report(int cell) const;

 private:
  struct alignas(64) Cell {
    std::atomic<uint64_t> state{0};  // packed CellState
    std::atomic<uint64_t> writes{0};
    std::atomic<uint64_t> owner{0};
    std::atomic<uint32_t> offload_ns{0}, unload_ns{0};
    std::atomic<int64_t> published_ns{0};
  };
  static uint64_t Pack(const CellState& s);
  static CellState Unpack(uint64_t v);

  const std::string key_;
  const Clock* const clock_;
  Cell cells_[kCells];
  std::atomic<double> trend_[kTrendRing] = {};
  std::atomic<uint32_t> trend_blocks_{0};
  std::atomic<bool> settled_{false};
};

// The TargetModels of one engine, by peer device identity. For() takes a lock: call it when a
// connection connects, not per write. Thread-safe.
class TargetModels {
 public:
  explicit TargetModels(const Clock* clock) : clock_(clock) {}
  // The model of the device `transport`/`address`, made on first use.
  std::shared_ptr<TargetModel> For(const std::string& transport, const std::string& address);
  // Every model so far (for metrics and status pages).
  std::vector<std::shared_ptr<TargetModel>> All() const;

 private:
  const Clock* const clock_;
  mutable Mutex mu_;
  std::vector<std::shared_ptr<TargetModel>> models_ ABSL_GUARDED_BY(mu_);
};

// Low-cardinality summary of every cell of every model, for gauges: cells by regime (known
// ones), the mean published latencies over known cells, and the oldest publication's age.
struct TargetModelSummary {
  uint64_t targets = 0;
  uint64_t cells[2] = {0, 0};  // by Path
  double mean_ns[2] = {0, 0};  // by Path, over known cells with a measured latency
  double oldest_age_seconds = 0;
  uint64_t probing = 0;
};
TargetModelSummary Summarize(const TargetModels& models);

}  // namespace unloadkv::engine

#endif  // UNLOADKV_TRANSPORT_ENGINE_TARGET_MODEL_H_
