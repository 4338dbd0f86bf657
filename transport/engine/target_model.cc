#include "transport/engine/target_model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace unloadkv::engine {

// state: bit 0 known, bit 1 regime (1: unload), bits 2-7 confidence, bits 8-11 backoff,
// bits 12-43 publications.
uint64_t TargetModel::Pack(const CellState& s) {
  return uint64_t{s.known} | uint64_t{s.regime == Path::kUnload} << 1 |
         uint64_t{std::min(s.confidence, kMaxConfidence)} << 2 |
         uint64_t{std::min<uint32_t>(s.backoff, 15)} << 8 | uint64_t{s.publications} << 12;
}

TargetModel::CellState TargetModel::Unpack(uint64_t v) {
  CellState s;
  s.known = v & 1;
  s.regime = (v >> 1 & 1) ? Path::kUnload : Path::kOffload;
  s.confidence = static_cast<uint32_t>(v >> 2 & 63);
  s.backoff = static_cast<uint32_t>(v >> 8 & 15);
  s.publications = static_cast<uint32_t>(v >> 12);
  return s;
}

bool TargetModel::Due(int cell, uint32_t interval) const {
  const Cell& c = cells_[cell];
  const CellState s = Unpack(c.state.load(std::memory_order_acquire));
  if (!s.known) return true;
  return c.writes.load(std::memory_order_relaxed) >= (uint64_t{interval} << s.backoff);
}

bool TargetModel::TryClaimProbe(int cell, uint64_t owner, uint64_t lease_writes) {
  Cell& c = cells_[cell];
  uint64_t held = c.owner.load(std::memory_order_acquire);
  // The claim restarts the count, so while it is held `writes` counts the writes since.
  if (held != 0 && held != owner && c.writes.load(std::memory_order_relaxed) < lease_writes) {
    return false;
  }
  if (!c.owner.compare_exchange_strong(held, owner, std::memory_order_acq_rel)) return false;
  c.writes.store(0, std::memory_order_relaxed);
  return true;
}

void TargetModel::ReleaseProbe(int cell, uint64_t owner) {
  uint64_t expected = owner;
  cells_[cell].owner.compare_exchange_strong(expected, 0, std::memory_order_acq_rel);
}

void TargetModel::Publish(int cell, Path regime, double offload_ns, double unload_ns,
                          uint32_t backoff) {
  Cell& c = cells_[cell];
  c.offload_ns.store(static_cast<uint32_t>(std::clamp(offload_ns, 0.0, 4e9)),
                     std::memory_order_relaxed);
  c.unload_ns.store(static_cast<uint32_t>(std::clamp(unload_ns, 0.0, 4e9)),
                    std::memory_order_relaxed);
  c.published_ns.store(absl::ToUnixNanos(clock_->Now()), std::memory_order_relaxed);
  uint64_t old = c.state.load(std::memory_order_relaxed);
  CellState next;
  do {
    const CellState prev = Unpack(old);
    next.known = true;
    next.regime = regime;
    next.confidence = prev.known && prev.regime == regime ? prev.confidence + 1 : 1;
    next.backoff = backoff;
    next.publications = prev.publications + 1;
  } while (!c.state.compare_exchange_weak(old, Pack(next), std::memory_order_acq_rel));
}

void TargetModel::AddTrendBlock(double mean_ns, uint32_t blocks, double hysteresis) {
  blocks = std::clamp<uint32_t>(blocks, 1, kTrendRing - 1);
  const uint32_t n = trend_blocks_.fetch_add(1, std::memory_order_relaxed);
  // Concurrent adders may interleave here: each reads a block some `blocks` earlier, which is
  // all the trend needs.
  const double then = trend_[(n + kTrendRing - blocks) % kTrendRing].load(std::memory_order_relaxed);
  trend_[n % kTrendRing].store(mean_ns, std::memory_order_relaxed);
  settled_.store(n >= blocks && mean_ns >= then * (1.0 - hysteresis), std::memory_order_relaxed);
}

TargetModel::CellReport TargetModel::Report(int cell) const {
  const Cell& c = cells_[cell];
  CellReport r;
  r.state = Read(cell);
  r.offload_ns = c.offload_ns.load(std::memory_order_relaxed);
  r.unload_ns = c.unload_ns.load(std::memory_order_relaxed);
  if (r.state.known) {
    r.age = clock_->Now() - absl::FromUnixNanos(c.published_ns.load(std::memory_order_relaxed));
  }
  r.writes_since_probe = c.writes.load(std::memory_order_relaxed);
  r.probing = c.owner.load(std::memory_order_relaxed) != 0;
  return r;
}

std::shared_ptr<TargetModel> TargetModels::For(const std::string& transport,
                                               const std::string& address) {
  const std::string key = absl::StrCat(transport, "/", address);
  MutexLock l(&mu_);
  for (const std::shared_ptr<TargetModel>& m : models_) {
    if (m->key() == key) return m;
  }
  models_.push_back(std::make_shared<TargetModel>(key, clock_));
  return models_.back();
}

std::vector<std::shared_ptr<TargetModel>> TargetModels::All() const {
  MutexLock l(&mu_);
  return models_;
}

TargetModelSummary Summarize(const TargetModels& models) {
  TargetModelSummary s;
  uint64_t measured[2] = {0, 0};
  for (const std::shared_ptr<TargetModel>& m : models.All()) {
    ++s.targets;
    for (int cell = 0; cell < TargetModel::kCells; ++cell) {
      const TargetModel::CellReport r = m->Report(cell);
      s.probing += r.probing;
      if (!r.state.known) continue;
      ++s.cells[static_cast<int>(r.state.regime)];
      const uint32_t ns[2] = {r.offload_ns, r.unload_ns};
      for (int p = 0; p < 2; ++p) {
        if (ns[p] == 0) continue;
        s.mean_ns[p] += ns[p];
        ++measured[p];
      }
      s.oldest_age_seconds = std::max(s.oldest_age_seconds, absl::ToDoubleSeconds(r.age));
    }
  }
  for (int p = 0; p < 2; ++p) {
    if (measured[p] > 0) s.mean_ns[p] /= measured[p];
  }
  return s;
}

}  // namespace unloadkv::engine
