#include "transport/engine/metrics.h"

namespace unloadkv::engine {

const char* ValidationFailureName(ValidationFailure f) {
  switch (f) {
    case ValidationFailure::kUnknownKey:
      return "unknown_key";
    case ValidationFailure::kNoPermission:
      return "no_permission";
    case ValidationFailure::kOutOfBounds:
      return "out_of_bounds";
    case ValidationFailure::kBadHeader:
      return "bad_header";
    case ValidationFailure::kBadSequence:
      return "bad_sequence";
    case ValidationFailure::kWrongConnection:
      return "wrong_connection";
    case ValidationFailure::kNotGranted:
      return "not_granted";
  }
  return "unknown";
}

void CountingMetrics::OnWriteCompleted(Path path, uint32_t bytes, absl::Duration latency, bool ok) {
  int p = static_cast<int>(path);
  if (!ok) {
    write_errors.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  writes[p].fetch_add(1, std::memory_order_relaxed);
  write_bytes[p].fetch_add(bytes, std::memory_order_relaxed);
  if (latency == absl::InfiniteDuration()) return;
  latency_ns_sum[p].fetch_add(absl::ToInt64Nanoseconds(latency), std::memory_order_relaxed);
  latency_samples[p].fetch_add(1, std::memory_order_relaxed);
}

void CountingMetrics::OnValidationFailure(ValidationFailure reason) {
  validation_failures[static_cast<int>(reason)].fetch_add(1, std::memory_order_relaxed);
}

void CountingMetrics::OnRingOccupancy(uint32_t used, uint32_t capacity) {
  uint32_t seen = ring_used_max.load(std::memory_order_relaxed);
  while (used > seen && !ring_used_max.compare_exchange_weak(seen, used)) {
  }
}

}  // namespace unloadkv::engine
