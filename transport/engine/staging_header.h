// The header an initiator puts in front of an unloaded write's payload in the target's staging
// ring slot. 32 bytes, little-endian:
//   0  u8  version (1)        1  u8  kind (1 = write)     2  u16 reserved (0)
//   4  u32 length (payload bytes following the header)
//   8  u64 sequence (per connection, starting at 0, +1 per unloaded write)
//  16  u64 remote_addr (destination in the target's memory)
//  24  u32 rkey (region the destination must lie in)  28  u32 reserved (0)
#ifndef UNLOADKV_TRANSPORT_ENGINE_STAGING_HEADER_H_
#define UNLOADKV_TRANSPORT_ENGINE_STAGING_HEADER_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"

namespace unloadkv::engine {

inline constexpr size_t kStagingHeaderSize = 32;
inline constexpr uint8_t kStagingVersion = 1;

struct StagingHeader {
  uint32_t length = 0;
  uint64_t sequence = 0;
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
};

void EncodeStagingHeader(const StagingHeader& h, char* out);

// Parses the header of a staged write whose WRITE_WITH_IMM delivered `byte_len` bytes into a
// slot that holds at most `slot_bytes`. Rejects (InvalidArgument, naming the field): fewer
// than 32 bytes delivered ("truncated"), unknown version or kind, non-zero reserved fields,
// length != byte_len - 32 ("length mismatch"), or a payload larger than the slot.
absl::StatusOr<StagingHeader> ParseStagingHeader(const char* slot, uint32_t byte_len,
                                                 uint32_t slot_bytes);

}  // namespace unloadkv::engine

#endif  // UNLOADKV_TRANSPORT_ENGINE_STAGING_HEADER_H_
