#include "server/slab_arena.h"

#include "absl/strings/str_cat.h"

namespace unloadkv::server {

SlabArena::SlabArena(size_t bytes) : chunk_class_(bytes / kChunkBytes, -1) {}

absl::StatusOr<Slot> SlabArena::Allocate(uint32_t size) {
  const int cls = ClassOf(size);
  if (cls < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("value of ", size, " bytes over the ", kMaxSlotBytes, "-byte limit"));
  }
  std::vector<uint64_t>& list = free_[cls];
  if (list.empty()) {
    if (next_chunk_ == chunk_class_.size()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("arena full: no free ", ClassCapacity(cls), "-byte slot"));
    }
    const size_t chunk = next_chunk_++;
    chunk_class_[chunk] = static_cast<int8_t>(cls);
    const uint32_t cap = ClassCapacity(cls);
    // Pushed high to low so the chunk is handed out from its start.
    for (size_t off = kChunkBytes; off >= cap; off -= cap) {
      list.push_back(chunk * kChunkBytes + off - cap);
    }
  }
  Slot s{list.back(), ClassCapacity(cls)};
  list.pop_back();
  used_bytes_ += s.capacity;
  return s;
}

bool SlabArena::Free(const Slot& slot) {
  const size_t chunk = slot.offset / kChunkBytes;
  if (chunk >= next_chunk_) return false;
  const int cls = chunk_class_[chunk];
  if (ClassCapacity(cls) != slot.capacity || slot.offset % slot.capacity != 0) return false;
  free_[cls].push_back(slot.offset);
  used_bytes_ -= slot.capacity;
  return true;
}

}  // namespace unloadkv::server
