// A registered memory region (MR).
#ifndef UNLOADKV_TRANSPORT_RNIC_MEMORY_REGION_H_
#define UNLOADKV_TRANSPORT_RNIC_MEMORY_REGION_H_

#include <cstddef>
#include <cstdint>

#include "transport/rnic/types.h"

namespace unloadkv::rnic {

// Describes [addr, addr+length) as registered with one device. The memory itself stays owned by
// whoever registered it and must outlive the MemoryRegion. Destroying the MemoryRegion
// deregisters it: later work naming its keys fails with a protection or access error.
// Immutable after creation; safe to read from any thread.
class MemoryRegion {
 public:
  struct Description {
    void* addr = nullptr;
    size_t length = 0;
    uint32_t lkey = 0;
    uint32_t rkey = 0;
    uint32_t access = 0;      // Access bits
    size_t page_size = 4096;  // translation granularity the device uses for this MR, bytes
  };

  explicit MemoryRegion(const Description& d) : d_(d) {}
  virtual ~MemoryRegion() = default;
  MemoryRegion(const MemoryRegion&) = delete;
  MemoryRegion& operator=(const MemoryRegion&) = delete;

  void* addr() const { return d_.addr; }
  char* data() const { return static_cast<char*>(d_.addr); }
  uint64_t address() const { return reinterpret_cast<uint64_t>(d_.addr); }
  size_t length() const { return d_.length; }
  uint32_t lkey() const { return d_.lkey; }
  uint32_t rkey() const { return d_.rkey; }
  uint32_t access() const { return d_.access; }
  size_t page_size() const { return d_.page_size; }

  // An SGE for [offset, offset+length) of this region. Does not check bounds: the device does.
  ScatterGatherEntry Sge(size_t offset, uint32_t length) const {
    return ScatterGatherEntry{address() + offset, length, d_.lkey};
  }

 private:
  Description d_;
};

}  // namespace unloadkv::rnic

#endif  // UNLOADKV_TRANSPORT_RNIC_MEMORY_REGION_H_
