// Slot allocation for the value arena: size classes of 64 B .. 64 KiB (powers of two), carved
// from 1 MiB chunks. A chunk belongs to a class while any of its slots is allocated; once its
// last slot is freed it goes back to a shared pool that every class draws from, so space freed
// by one size is usable by any other. Offsets only; the memory itself belongs to the caller.
//
// Accounting: every byte of a whole chunk is either in an allocated slot (used_bytes) or free
// (free_bytes = capacity_bytes - used_bytes): in a chunk of the pool, or in a free slot of a
// class's chunk. Allocate(size) fails only when the size's class has no free slot and the pool
// has no chunk.
#ifndef UNLOADKV_SERVER_SLAB_ARENA_H_
#define UNLOADKV_SERVER_SLAB_ARENA_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/limits.h"

namespace unloadkv::server {

struct Slot {
  uint64_t offset = 0;    // from the arena's start
  uint32_t capacity = 0;  // bytes
};

// Thread-compatible (the KV store serializes access).
class SlabArena {
 public:
  static constexpr uint32_t kMinSlotBytes = proto::kMinSlotBytes;
  static constexpr uint32_t kMaxSlotBytes = proto::kMaxValueBytes;
  static constexpr int kClasses = proto::kSlotClasses;
  static constexpr size_t kChunkBytes = size_t{1} << 20;

  // Manages [0, bytes) rounded down to whole chunks.
  explicit SlabArena(size_t bytes);

  // The smallest class holding `size` bytes; -1 when size > kMaxSlotBytes.
  static int ClassOf(uint32_t size) { return proto::SlotClassOf(size); }
  static uint32_t ClassCapacity(int cls) { return proto::SlotClassCapacity(cls); }

  // A free slot of the smallest class holding `size`; ResourceExhausted when that class has
  // no free slot and no chunk is in the pool, InvalidArgument when size > kMaxSlotBytes.
  // O(1).
  absl::StatusOr<Slot> Allocate(uint32_t size);
  // Returns a slot from Allocate. Freeing anything else (a slot never handed out, one already
  // freed, a wrong capacity) is refused: returns false and changes nothing. O(1).
  bool Free(const Slot& slot);
  // Marks `slot` allocated as if Allocate had returned it: how a backup mirrors the slots its
  // primary chose (docs/cluster.md). Refused (false, nothing changed) when the slot is not a
  // slot of a class (capacity, alignment), lies outside the arena, is in use, or lies in a
  // chunk that holds another class. O(carved slots of the chunk) at worst.
  bool Reserve(const Slot& slot);

  size_t capacity_bytes() const { return chunks_.size() * kChunkBytes; }
  size_t used_bytes() const { return used_bytes_; }
  size_t free_bytes() const { return capacity_bytes() - used_bytes_; }
  // Bytes a value of `size` could be stored in right now: the class's free slots plus the
  // pool's chunks. 0 for a size over kMaxSlotBytes.
  size_t free_bytes_for(uint32_t size) const;
  size_t pool_chunks() const { return pool_.size(); }

 private:
  struct Chunk {
    int8_t cls = -1;             // -1 while in the pool
    uint32_t carved = 0;         // slots [0, carved) were handed out at least once
    uint32_t used = 0;           // slots allocated now
    int32_t open_pos = -1;       // index in open_[cls] while the chunk has a free slot
    std::vector<uint32_t> free;  // freed slots (indexes) below `carved`
    std::vector<bool> in_use;    // per carved slot, to refuse double frees
  };
  uint32_t SlotsPerChunk(int cls) const { return kChunkBytes / ClassCapacity(cls); }
  bool HasFreeSlot(const Chunk& c) const;
  void Open(uint32_t chunk);
  void Close(uint32_t chunk);

  std::vector<Chunk> chunks_;
  std::vector<uint32_t> pool_;            // chunks owned by no class
  std::vector<uint32_t> open_[kClasses];  // chunks of the class with a free slot
  size_t free_slots_[kClasses] = {};      // free slots of the class, over its chunks
  size_t used_bytes_ = 0;
};

}  // namespace unloadkv::server

#endif  // UNLOADKV_SERVER_SLAB_ARENA_H_
