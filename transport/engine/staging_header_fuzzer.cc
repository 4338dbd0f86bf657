// libFuzzer target for the staging header parser: arbitrary slot contents and delivered
// lengths. A parsed header must describe a payload that fits the slot.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "transport/engine/staging_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  uint32_t byte_len, slot_bytes;
  std::memcpy(&byte_len, data, 4);
  std::memcpy(&slot_bytes, data + 4, 4);
  slot_bytes = slot_bytes % 65536;
  std::vector<char> slot(std::max<size_t>(slot_bytes, 32), 0);
  std::memcpy(slot.data(), data + 8, std::min(size - 8, slot.size()));
  absl::StatusOr<unloadkv::engine::StagingHeader> h =
      unloadkv::engine::ParseStagingHeader(slot.data(), byte_len, slot_bytes);
  if (h.ok() && (byte_len > slot_bytes || h->length + 32ull != byte_len)) __builtin_trap();
  return 0;
}

extern "C" void FuzzSeeds(std::vector<std::string>* seeds) {
  for (uint32_t len : {32u, 48u, 4096u}) {
    std::string s(8 + 32, '\0');
    uint32_t slot = 4096;
    std::memcpy(&s[0], &len, 4);
    std::memcpy(&s[4], &slot, 4);
    unloadkv::engine::EncodeStagingHeader({len - 32, 3, 4096, 9}, &s[8]);
    seeds->push_back(s);
  }
}
