// The access check a NIC makes before touching registered memory, as reusable code.
//
// The soft RNIC applies it to every incoming WRITE and READ, and the write engine's unload
// workers apply the very same function to every staged write, which is how the unload path
// stays exactly as strict as the NIC.
#ifndef UNLOADKV_TRANSPORT_RNIC_REGION_TABLE_H_
#define UNLOADKV_TRANSPORT_RNIC_REGION_TABLE_H_

#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "transport/rnic/types.h"

namespace unloadkv::rnic {

struct RegionEntry {
  uint64_t addr = 0;
  uint64_t length = 0;
  uint32_t access = 0;
};

// Why an access was refused; kOk when it was allowed.
enum class AccessVerdict : uint8_t {
  kOk,
  kUnknownKey,    // no region registered under that key
  kNoPermission,  // region lacks the required Access bit
  kOutOfBounds,   // [addr, addr+length) not inside the region (including wrap-around)
};

const char* AccessVerdictName(AccessVerdict v);

// Maps a key to its region. Not thread-safe: the owner serializes access.
class RegionTable {
 public:
  void Insert(uint32_t key, const RegionEntry& entry) { regions_[key] = entry; }
  void Erase(uint32_t key) { regions_.erase(key); }
  bool Contains(uint32_t key) const { return regions_.contains(key); }
  size_t size() const { return regions_.size(); }

  // Checks that [addr, addr+length) lies inside the region named by `key` and that the region
  // grants every bit of `required`. A zero-length access is always allowed, as the InfiniBand
  // specification does not validate the key of a zero-length transfer.
  AccessVerdict Check(uint32_t key, uint64_t addr, uint64_t length, uint32_t required) const;

 private:
  absl::flat_hash_map<uint32_t, RegionEntry> regions_;
};

}  // namespace unloadkv::rnic

#endif  // UNLOADKV_TRANSPORT_RNIC_REGION_TABLE_H_
