#include "transport/engine/send_slot_pool.h"

#include "absl/strings/str_cat.h"

namespace unloadkv::engine {

absl::StatusOr<std::unique_ptr<SendSlotPool>> SendSlotPool::Create(rnic::Device& device,
                                                                   const Options& o) {
  const uint64_t capacity = uint64_t{o.connections} * o.reserve + o.shared;
  if (o.slot_bytes == 0 || capacity == 0 || capacity > (uint64_t{1} << 24)) {
    return absl::InvalidArgumentError(
        absl::StrCat("send slots: ", o.connections, " connections x ", o.reserve, " + ", o.shared,
                     " shared = ", capacity, " slots per worker; at most 2^24"));
  }
  std::unique_ptr<SendSlotPool> p(new SendSlotPool(o));
  p->capacity_ = static_cast<uint32_t>(capacity);
  absl::StatusOr<std::unique_ptr<LazyRegion>> region =
      LazyRegion::Create(device, static_cast<uint32_t>(capacity), o.slot_bytes, 0);
  if (!region.ok()) {
    return absl::ResourceExhaustedError(absl::StrCat("send slots: ", region.status().message()));
  }
  p->region_ = std::move(*region);
  return p;
}

absl::StatusOr<uint32_t> SendSlotPool::TakeLocked() {
  if (!free_.empty()) {
    const uint32_t index = free_.back();
    free_.pop_back();
    return index;
  }
  // The callers' counts keep this below the capacity.
  if (absl::Status st = region_->Prepare(untouched_); !st.ok()) return st;
  return untouched_++;
}

absl::StatusOr<std::vector<uint32_t>> SendSlotPool::Admit() {
  MutexLock l(&mu_);
  if (admitted_ >= options_.connections) {
    return absl::ResourceExhaustedError(
        absl::StrCat("send slots: ", admitted_,
                     " connections hold send slots, the most this worker admits "
                     "(max_connections_per_worker)"));
  }
  std::vector<uint32_t> slots;
  for (uint32_t k = 0; k < options_.reserve; ++k) {
    absl::StatusOr<uint32_t> index = TakeLocked();
    if (!index.ok()) {
      for (uint32_t s : slots) free_.push_back(s);
      return index.status();
    }
    slots.push_back(*index);
  }
  ++admitted_;
  return slots;
}

std::optional<uint32_t> SendSlotPool::Borrow() {
  MutexLock l(&mu_);
  if (lent_ >= options_.shared) return std::nullopt;
  absl::StatusOr<uint32_t> index = TakeLocked();
  if (!index.ok()) return std::nullopt;
  ++lent_;
  return *index;
}

void SendSlotPool::Return(absl::Span<const uint32_t> indices) {
  if (indices.empty()) return;
  MutexLock l(&mu_);
  for (uint32_t index : indices) {
    free_.push_back(index);
    if (lent_ > 0) --lent_;
  }
}

void SendSlotPool::Leave(absl::Span<const uint32_t> slots, uint32_t borrowed) {
  MutexLock l(&mu_);
  for (uint32_t index : slots) free_.push_back(index);
  lent_ -= borrowed < lent_ ? borrowed : lent_;
  if (admitted_ > 0) --admitted_;
}

uint32_t SendSlotPool::lent() const {
  MutexLock l(&mu_);
  return lent_;
}

uint32_t SendSlotPool::registered() const {
  MutexLock l(&mu_);
  return region_->chunks_registered() * LazyRegion::kChunkItems;
}

uint32_t SendSlotPool::touched() const {
  MutexLock l(&mu_);
  return untouched_;
}

}  // namespace unloadkv::engine
