// The header an initiator puts in front of an unloaded write's payload: the SEND_WITH_IMM of a
// staged write carries header + payload into a buffer of the target's staging pool. 32 bytes,
// little-endian:
//   0  u8  version (2)        1  u8  kind (1 = write)
//   2  u16 flags: bit 0 set: the sender had unloaded writes waiting for staging credits since
//          its previous staged write on the lane (it wants a larger window); other bits 0
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
inline constexpr uint8_t kStagingVersion = 2;

struct StagingHeader {
  uint32_t length = 0;
  uint64_t sequence = 0;
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  bool wants_credits = false;
};

void EncodeStagingHeader(const StagingHeader& h, char* out);

// Parses the header of a staged write whose SEND delivered `byte_len` bytes into a buffer
// that holds at most `slot_bytes`. Rejects (InvalidArgument, naming the field): fewer than 32
// bytes delivered ("truncated"), unknown version or kind, unknown flags or non-zero reserved
// field, length != byte_len - 32 ("length mismatch"), or more than the buffer holds.
absl::StatusOr<StagingHeader> ParseStagingHeader(const char* slot, uint32_t byte_len,
                                                 uint32_t slot_bytes);

}  // namespace unloadkv::engine

#endif  // UNLOADKV_TRANSPORT_ENGINE_STAGING_HEADER_H_
