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

// A region, or a memory window bound to part of one. A window's key works only for requests
// that arrive through what it is bound to (a QP at a device; an engine connection at the
// engine's unload check), and never as an lkey.
struct RegionEntry {
  uint64_t addr = 0;
  uint64_t length = 0;
  uint32_t access = 0;
  uint32_t bound_to = 0;    // windows: the QP number (or connection id); 0 for a region
  uint32_t region_key = 0;  // windows: the key of the region the window lies in
  bool is_window() const { return bound_to != 0; }
};

// Why an access was refused; kOk when it was allowed.
enum class AccessVerdict : uint8_t {
  kOk,
  kUnknownKey,    // no region registered under that key
  kNoPermission,  // region lacks the required Access bit
  kOutOfBounds,   // [addr, addr+length) not inside the region (including wrap-around)
  kWrongQp,       // a window used through another QP (or connection) than its binding's
};

const char* AccessVerdictName(AccessVerdict v);

// Maps a key to its region. Not thread-safe: the owner serializes access.
class RegionTable {
 public:
  void Insert(uint32_t key, const RegionEntry& entry) { regions_[key] = entry; }
  void Erase(uint32_t key) { regions_.erase(key); }
  bool Contains(uint32_t key) const { return regions_.contains(key); }
  const RegionEntry* Find(uint32_t key) const {
    auto it = regions_.find(key);
    return it == regions_.end() ? nullptr : &it->second;
  }
  size_t size() const { return regions_.size(); }

  // The remote check: [addr, addr+length) lies inside the region or window named by `key`,
  // which grants every bit of `required`, and, for a window, `via` (the QP or connection the
  // request arrived through) is the one it is bound to. A zero-length access is always
  // allowed, as the InfiniBand specification does not validate the key of a zero-length
  // transfer.
  AccessVerdict Check(uint32_t key, uint64_t addr, uint64_t length, uint32_t required,
                      uint32_t via = 0) const;

  // Whether a region (not a window) holds all of [addr, addr+length). Scans every entry.
  bool Covers(uint64_t addr, uint64_t length) const;

  // The local check of an SGE's lkey: as Check, but only regions count (a window's key is not
  // an lkey).
  AccessVerdict CheckLocal(uint32_t key, uint64_t addr, uint64_t length, uint32_t required) const;

  // Whether a type-2 window may be bound with `access` over [addr, addr+length) of the region
  // (not a window) under `region_key`: the region allows binding (kMwBind), remote write needs
  // its local write, and the range lies inside it. What the soft and simulated NICs check of a
  // bind's region (the window's own state is theirs to check).
  bool CanBind(uint32_t region_key, uint32_t access, uint64_t addr, uint64_t length) const;

 private:
  absl::flat_hash_map<uint32_t, RegionEntry> regions_;
};

}  // namespace unloadkv::rnic

#endif  // UNLOADKV_TRANSPORT_RNIC_REGION_TABLE_H_
