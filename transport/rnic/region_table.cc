#include "transport/rnic/region_table.h"

namespace unloadkv::rnic {

const char* AccessVerdictName(AccessVerdict v) {
  switch (v) {
    case AccessVerdict::kOk:
      return "ok";
    case AccessVerdict::kUnknownKey:
      return "unknown_key";
    case AccessVerdict::kNoPermission:
      return "no_permission";
    case AccessVerdict::kOutOfBounds:
      return "out_of_bounds";
  }
  return "unknown";
}

AccessVerdict RegionTable::Check(uint32_t key, uint64_t addr, uint64_t length,
                                 uint32_t required) const {
  if (length == 0) return AccessVerdict::kOk;
  auto it = regions_.find(key);
  if (it == regions_.end()) return AccessVerdict::kUnknownKey;
  const RegionEntry& r = it->second;
  if ((r.access & required) != required) return AccessVerdict::kNoPermission;
  // Written to avoid overflow: addr + length may wrap for hostile inputs.
  if (addr < r.addr || addr - r.addr > r.length || length > r.length - (addr - r.addr)) {
    return AccessVerdict::kOutOfBounds;
  }
  return AccessVerdict::kOk;
}

}  // namespace unloadkv::rnic
