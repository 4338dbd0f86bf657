// Slot allocation for the value arena: size classes of 64 B .. 64 KiB (powers of two), carved
// from 1 MiB chunks that are given to a class on first need and stay with it. Offsets only;
// the memory itself belongs to the caller.
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

  // A free slot of the smallest class holding `size`; ResourceExhausted when that class and
  // the unassigned chunks are used up, InvalidArgument when size > kMaxSlotBytes.
  absl::StatusOr<Slot> Allocate(uint32_t size);
  // Returns a slot from Allocate. Freeing anything else is a bug (checked: returns false).
  bool Free(const Slot& slot);

  size_t capacity_bytes() const { return chunk_class_.size() * kChunkBytes; }
  size_t used_bytes() const { return used_bytes_; }

 private:
  std::vector<int8_t> chunk_class_;  // per chunk: class, or -1 while unassigned
  size_t next_chunk_ = 0;            // chunks below are assigned
  std::vector<uint64_t> free_[kClasses];
  size_t used_bytes_ = 0;
};

}  // namespace unloadkv::server

#endif  // UNLOADKV_SERVER_SLAB_ARENA_H_
