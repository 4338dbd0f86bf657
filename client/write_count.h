// The SDK's engine metrics sink: counts value writes by path (Client::write_stats), then
// forwards every event to the user's sink, if any. Thread-safe.
#ifndef UNLOADKV_CLIENT_WRITE_COUNT_H_
#define UNLOADKV_CLIENT_WRITE_COUNT_H_

#include <atomic>
#include <cstdint>

#include "client/client.h"
#include "transport/engine/metrics.h"

namespace unloadkv::client_internal {

class WriteCount : public engine::EngineMetrics {
 public:
  // `next` may be null; it must outlive this.
  explicit WriteCount(engine::EngineMetrics* next) : next_(next) {}
  void OnWriteCompleted(engine::Path path, uint32_t bytes, absl::Duration latency,
                        bool ok) override {
    (ok ? writes_[static_cast<int>(path)] : errors_).fetch_add(1, std::memory_order_relaxed);
    if (next_) next_->OnWriteCompleted(path, bytes, latency, ok);
  }
  void OnValidationFailure(engine::ValidationFailure r) override {
    if (next_) next_->OnValidationFailure(r);
  }
  void OnStagedWriteApplied(uint32_t bytes) override {
    if (next_) next_->OnStagedWriteApplied(bytes);
  }
  void OnRingOccupancy(uint32_t used, uint32_t cap) override {
    if (next_) next_->OnRingOccupancy(used, cap);
  }
  void OnPolicySwitch() override {
    if (next_) next_->OnPolicySwitch();
  }
  WriteStats stats() const { return {writes_[0].load(), writes_[1].load(), errors_.load()}; }

 private:
  engine::EngineMetrics* next_;
  std::atomic<uint64_t> writes_[2] = {};
  std::atomic<uint64_t> errors_{0};
};

}  // namespace unloadkv::client_internal

#endif  // UNLOADKV_CLIENT_WRITE_COUNT_H_
