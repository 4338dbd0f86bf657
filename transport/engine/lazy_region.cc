#include "transport/engine/lazy_region.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace unloadkv::engine {

absl::StatusOr<std::unique_ptr<LazyRegion>> LazyRegion::Create(rnic::Device& device, uint32_t items,
                                                               uint32_t item_bytes, uint32_t access,
                                                               bool huge_pages,
                                                               bool modeled_huge_pages) {
  std::unique_ptr<LazyRegion> r(new LazyRegion(device, items, item_bytes));
  r->memory_ = std::make_unique<MappedMemory>(size_t{items} * item_bytes, huge_pages);
  if (items == 0 || item_bytes == 0 || r->memory_->data() == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot map ", items, " x ", item_bytes, " bytes"));
  }
  const bool huge = r->memory_->huge() || (huge_pages && modeled_huge_pages);
  r->access_ = access | (huge ? uint32_t{rnic::kHugePageBacked} : 0u);
  r->mrs_.resize((items + kChunkItems - 1) / kChunkItems);
  return r;
}

absl::Status LazyRegion::Prepare(uint32_t index) {
  const uint32_t chunk = index / kChunkItems;
  if (index >= items_) return absl::OutOfRangeError(absl::StrCat("item ", index, " of ", items_));
  if (mrs_[chunk] != nullptr) return absl::OkStatus();
  const uint32_t first = chunk * kChunkItems;
  const uint32_t n = std::min(kChunkItems, items_ - first);
  absl::StatusOr<std::unique_ptr<rnic::MemoryRegion>> mr =
      device_.RegisterMemory(item(first), size_t{n} * item_bytes_, access_);
  if (!mr.ok()) return mr.status();
  mrs_[chunk] = std::move(*mr);
  return absl::OkStatus();
}

uint32_t LazyRegion::chunks_registered() const {
  uint32_t n = 0;
  for (const auto& mr : mrs_) n += mr != nullptr;
  return n;
}

}  // namespace unloadkv::engine
