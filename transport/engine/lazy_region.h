// Memory mapped in one piece for a pool of equal items, registered with the device chunk by
// chunk as items are first used: a pool sized for its worst case registers (on verbs: pins)
// only the chunks it has used, and only the pages written become resident.
#ifndef UNLOADKV_TRANSPORT_ENGINE_LAZY_REGION_H_
#define UNLOADKV_TRANSPORT_ENGINE_LAZY_REGION_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "transport/base/mapped_memory.h"
#include "transport/rnic/device.h"

namespace unloadkv::engine {

class LazyRegion {
 public:
  static constexpr uint32_t kChunkItems = 64;

  // ResourceExhausted when the mapping fails. `access`: rnic access flags of the chunks. With
  // `huge_pages`, 2 MiB pages are tried (a touched huge page is resident whole); the chunks are
  // registered as huge-page backed when they are, or when `modeled_huge_pages` says the
  // (simulated) node has them.
  static absl::StatusOr<std::unique_ptr<LazyRegion>> Create(rnic::Device& device, uint32_t items,
                                                            uint32_t item_bytes, uint32_t access,
                                                            bool huge_pages = false,
                                                            bool modeled_huge_pages = false);

  char* item(uint32_t index) const { return memory_->data() + size_t{index} * item_bytes_; }
  // Registers the chunk holding item `index` unless it is. Not thread-safe: the owner
  // serializes calls, and an item is used (Sge) only after Prepare returned ok for it.
  absl::Status Prepare(uint32_t index);
  // The first `length` bytes of prepared item `index`. Any thread.
  rnic::ScatterGatherEntry Sge(uint32_t index, uint32_t length) const {
    const uint32_t chunk = index / kChunkItems;
    return mrs_[chunk]->Sge(size_t{index - chunk * kChunkItems} * item_bytes_, length);
  }
  // Chunks registered so far; the owner's serialization applies.
  uint32_t chunks_registered() const;

 private:
  LazyRegion(rnic::Device& device, uint32_t items, uint32_t item_bytes)
      : device_(device), items_(items), item_bytes_(item_bytes) {}

  rnic::Device& device_;
  const uint32_t items_, item_bytes_;
  uint32_t access_ = 0;
  std::unique_ptr<MappedMemory> memory_;
  // Sized at creation, never resized: Sge reads one element while Prepare sets another.
  std::vector<std::unique_ptr<rnic::MemoryRegion>> mrs_;
};

}  // namespace unloadkv::engine

#endif  // UNLOADKV_TRANSPORT_ENGINE_LAZY_REGION_H_
