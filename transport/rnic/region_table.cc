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
    case AccessVerdict::kWrongQp:
      return "wrong_qp";
  }
  return "unknown";
}

namespace {

AccessVerdict CheckEntry(const RegionEntry& r, uint64_t addr, uint64_t length, uint32_t required) {
  if ((r.access & required) != required) return AccessVerdict::kNoPermission;
  // Written to avoid overflow: addr + length may wrap for hostile inputs.
  if (addr < r.addr || addr - r.addr > r.length || length > r.length - (addr - r.addr)) {
    return AccessVerdict::kOutOfBounds;
  }
  return AccessVerdict::kOk;
}

}  // namespace

AccessVerdict RegionTable::Check(uint32_t key, uint64_t addr, uint64_t length, uint32_t required,
                                 uint32_t via) const {
  if (length == 0) return AccessVerdict::kOk;
  auto it = regions_.find(key);
  if (it == regions_.end()) return AccessVerdict::kUnknownKey;
  const RegionEntry& r = it->second;
  if (r.is_window() && r.bound_to != via) return AccessVerdict::kWrongQp;
  return CheckEntry(r, addr, length, required);
}

bool RegionTable::Covers(uint64_t addr, uint64_t length) const {
  for (const auto& [key, r] : regions_) {
    if (!r.is_window() && CheckEntry(r, addr, length, 0) == AccessVerdict::kOk) return true;
  }
  return false;
}

AccessVerdict RegionTable::CheckLocal(uint32_t key, uint64_t addr, uint64_t length,
                                      uint32_t required) const {
  if (length == 0) return AccessVerdict::kOk;
  auto it = regions_.find(key);
  if (it == regions_.end() || it->second.is_window()) return AccessVerdict::kUnknownKey;
  return CheckEntry(it->second, addr, length, required);
}

bool RegionTable::CanBind(uint32_t region_key, uint32_t access, uint64_t addr,
                          uint64_t length) const {
  const RegionEntry* r = Find(region_key);
  if (r == nullptr || r->is_window() || !(r->access & kMwBind)) return false;
  if ((access & kRemoteWrite) && !(r->access & kLocalWrite)) return false;
  // Written to avoid overflow: addr + length may wrap for hostile inputs.
  return addr >= r->addr && addr - r->addr <= r->length && length <= r->length - (addr - r->addr);
}

}  // namespace unloadkv::rnic
