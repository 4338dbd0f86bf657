#include "client/value_buffers.h"

namespace unloadkv::client_internal {

absl::StatusOr<std::unique_ptr<ValueBuffers>> ValueBuffers::Create(engine::Engine* engine,
                                                                   size_t count) {
  std::unique_ptr<ValueBuffers> b(new ValueBuffers());
  b->memory_ = std::make_unique<MappedMemory>(count * proto::kMaxValueBytes, false);
  if (b->memory_->data() == nullptr) return absl::ResourceExhaustedError("value buffers: mmap");
  auto mr = engine->RegisterMemory(b->memory_->data(), b->memory_->size(), rnic::kLocalWrite);
  if (!mr.ok()) return mr.status();
  b->mr_ = std::move(*mr);
  MutexLock l(&b->mu_);
  for (uint32_t i = 0; i < count; ++i) b->free_.push_back(i);
  return b;
}

std::optional<uint32_t> ValueBuffers::Take() {
  MutexLock l(&mu_);
  if (free_.empty()) return std::nullopt;
  const uint32_t i = free_.back();
  free_.pop_back();
  return i;
}

void ValueBuffers::Release(uint32_t index) {
  MutexLock l(&mu_);
  free_.push_back(index);
}

}  // namespace unloadkv::client_internal
