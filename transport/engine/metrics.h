// Observability hooks of the write engine. The engine calls them; the server maps them to
// Prometheus (prometheus-cpp), benchmarks and tests use CountingMetrics.
#ifndef UNLOADKV_TRANSPORT_ENGINE_METRICS_H_
#define UNLOADKV_TRANSPORT_ENGINE_METRICS_H_

#include <atomic>
#include <cstdint>

#include "absl/time/time.h"
#include "transport/engine/path.h"

namespace unloadkv::engine {

// Why the unload path refused a staged write. The first three are the NIC's own reasons.
enum class ValidationFailure : uint8_t {
  kUnknownKey,
  kNoPermission,
  kOutOfBounds,
  kBadHeader,        // truncated, unknown version, length mismatch, reserved bits
  kBadSequence,      // not the next sequence number of the connection
  kWrongConnection,  // a memory window bound on another connection
  kNotGranted,       // refused by the connection's StagedWriteCheck (the application's grants)
};
inline constexpr int kValidationFailureKinds = 7;
const char* ValidationFailureName(ValidationFailure f);

// Thread-safety: called from engine worker threads concurrently; implementations must be
// thread-safe and cheap (no locks on the write path).
class EngineMetrics {
 public:
  virtual ~EngineMetrics() = default;
  // A write completed (ok) or failed; latency is post to completion on the engine's clock, or
  // absl::InfiniteDuration() when not measured (a lazy write completed by later evidence).
  virtual void OnWriteCompleted(Path path, uint32_t bytes, absl::Duration latency, bool ok) {}
  virtual void OnValidationFailure(ValidationFailure reason) {}
  // Target side: an unload worker validated and applied a staged write of `bytes`.
  virtual void OnStagedWriteApplied(uint32_t bytes) {}
  // After each unloaded write is posted: staging slots of its connection in use.
  virtual void OnRingOccupancy(uint32_t used, uint32_t capacity) {}
  // A connection's policy changed its preferred path for some class of writes.
  virtual void OnPolicySwitch() {}
};

// Plain counters; every field readable while the engine runs.
class CountingMetrics : public EngineMetrics {
 public:
  void OnWriteCompleted(Path path, uint32_t bytes, absl::Duration latency, bool ok) override;
  void OnValidationFailure(ValidationFailure reason) override;
  void OnRingOccupancy(uint32_t used, uint32_t capacity) override;
  void OnPolicySwitch() override { policy_switches.fetch_add(1, std::memory_order_relaxed); }
  void OnStagedWriteApplied(uint32_t bytes) override {
    staged_writes_applied.fetch_add(1, std::memory_order_relaxed);
  }

  std::atomic<uint64_t> writes[2] = {};  // by Path
  std::atomic<uint64_t> write_bytes[2] = {};
  std::atomic<uint64_t> write_errors = 0;
  std::atomic<uint64_t> latency_ns_sum[2] = {};  // over the writes with a measured latency
  std::atomic<uint64_t> latency_samples[2] = {};
  std::atomic<uint64_t> validation_failures[kValidationFailureKinds] = {};
  std::atomic<uint32_t> ring_used_max = 0;
  std::atomic<uint64_t> policy_switches = 0;
  std::atomic<uint64_t> staged_writes_applied = 0;  // target side
};

}  // namespace unloadkv::engine

#endif  // UNLOADKV_TRANSPORT_ENGINE_METRICS_H_
