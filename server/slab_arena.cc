#include "server/slab_arena.h"

#include "absl/strings/str_cat.h"

namespace unloadkv::server {

SlabArena::SlabArena(size_t bytes) : chunks_(bytes / kChunkBytes) {
  pool_.reserve(chunks_.size());
  for (size_t i = chunks_.size(); i > 0; --i) pool_.push_back(static_cast<uint32_t>(i - 1));
}

bool SlabArena::HasFreeSlot(const Chunk& c) const {
  return !c.free.empty() || c.carved < SlotsPerChunk(c.cls);
}

void SlabArena::Open(uint32_t chunk) {
  Chunk& c = chunks_[chunk];
  c.open_pos = static_cast<int32_t>(open_[c.cls].size());
  open_[c.cls].push_back(chunk);
}

void SlabArena::Close(uint32_t chunk) {
  Chunk& c = chunks_[chunk];
  std::vector<uint32_t>& open = open_[c.cls];
  const uint32_t last = open.back();
  open[c.open_pos] = last;
  chunks_[last].open_pos = c.open_pos;
  open.pop_back();
  c.open_pos = -1;
}

absl::StatusOr<Slot> SlabArena::Allocate(uint32_t size) {
  const int cls = ClassOf(size);
  if (cls < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("value of ", size, " bytes over the ", kMaxSlotBytes, "-byte limit"));
  }
  if (open_[cls].empty()) {
    if (pool_.empty()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("arena full: no free ", ClassCapacity(cls), "-byte slot"));
    }
    const uint32_t chunk = pool_.back();
    pool_.pop_back();
    chunks_[chunk].cls = static_cast<int8_t>(cls);
    free_slots_[cls] += SlotsPerChunk(cls);
    Open(chunk);
  }
  const uint32_t chunk = open_[cls].back();
  Chunk& c = chunks_[chunk];
  uint32_t index;
  if (!c.free.empty()) {
    index = c.free.back();
    c.free.pop_back();
  } else {
    index = c.carved++;
    c.in_use.push_back(false);
  }
  c.in_use[index] = true;
  ++c.used;
  --free_slots_[cls];
  if (!HasFreeSlot(c)) Close(chunk);
  const uint32_t cap = ClassCapacity(cls);
  used_bytes_ += cap;
  return Slot{uint64_t{chunk} * kChunkBytes + uint64_t{index} * cap, cap};
}

bool SlabArena::Free(const Slot& slot) {
  const uint64_t chunk = slot.offset / kChunkBytes;
  if (chunk >= chunks_.size()) return false;
  Chunk& c = chunks_[chunk];
  if (c.cls < 0 || ClassCapacity(c.cls) != slot.capacity || slot.offset % slot.capacity != 0) {
    return false;
  }
  const uint32_t index = static_cast<uint32_t>((slot.offset % kChunkBytes) / slot.capacity);
  if (index >= c.carved || !c.in_use[index]) return false;
  c.in_use[index] = false;
  const bool was_full = !HasFreeSlot(c);
  c.free.push_back(index);
  --c.used;
  ++free_slots_[c.cls];
  used_bytes_ -= slot.capacity;
  if (was_full) Open(static_cast<uint32_t>(chunk));
  if (c.used == 0) {  // empty: back to the pool, for any class
    Close(static_cast<uint32_t>(chunk));
    free_slots_[c.cls] -= SlotsPerChunk(c.cls);
    c = Chunk();
    pool_.push_back(static_cast<uint32_t>(chunk));
  }
  return true;
}

bool SlabArena::Reserve(const Slot& slot) {
  int cls = -1;
  for (int c = 0; c < kClasses; ++c) {
    if (ClassCapacity(c) == slot.capacity) cls = c;
  }
  const uint64_t chunk = slot.offset / kChunkBytes;
  if (cls < 0 || slot.offset % slot.capacity != 0 || chunk >= chunks_.size()) return false;
  Chunk& c = chunks_[chunk];
  if (c.cls >= 0 && c.cls != cls) return false;
  const uint32_t index = static_cast<uint32_t>((slot.offset % kChunkBytes) / slot.capacity);
  if (index < c.carved && c.in_use[index]) return false;
  if (c.cls < 0) {  // from the pool
    for (size_t i = 0; i < pool_.size(); ++i) {
      if (pool_[i] == chunk) {
        pool_[i] = pool_.back();
        pool_.pop_back();
        break;
      }
    }
    c.cls = static_cast<int8_t>(cls);
    free_slots_[cls] += SlotsPerChunk(cls);
    Open(static_cast<uint32_t>(chunk));
  }
  if (index < c.carved) {  // a freed slot: take it off the free list
    for (size_t i = 0; i < c.free.size(); ++i) {
      if (c.free[i] == index) {
        c.free[i] = c.free.back();
        c.free.pop_back();
        break;
      }
    }
  } else {  // carve up to it; the slots skipped over are free
    while (c.carved < index) {
      c.free.push_back(c.carved++);
      c.in_use.push_back(false);
    }
    c.carved++;
    c.in_use.push_back(false);
  }
  c.in_use[index] = true;
  ++c.used;
  --free_slots_[cls];
  used_bytes_ += slot.capacity;
  if (!HasFreeSlot(c)) Close(static_cast<uint32_t>(chunk));
  return true;
}

size_t SlabArena::free_bytes_for(uint32_t size) const {
  const int cls = ClassOf(size);
  if (cls < 0) return 0;
  return free_slots_[cls] * ClassCapacity(cls) + pool_.size() * kChunkBytes;
}

}  // namespace unloadkv::server
