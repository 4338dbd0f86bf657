// The limits kv.proto documents, for code on both sides of the protocol.
#ifndef UNLOADKV_PROTO_LIMITS_H_
#define UNLOADKV_PROTO_LIMITS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace unloadkv::proto {

inline constexpr size_t kMaxKeyBytes = 256;
inline constexpr uint32_t kMaxValueBytes = 64 << 10;
// A PUT may carry a value up to this size inline (PutRequest.value). Larger values go through
// the write engine: inline, the server copies each byte out of the message on its request path.
inline constexpr uint32_t kMaxInlineValueBytes = 4 << 10;
inline constexpr uint32_t kMaxGrantsPerRequest = 64;
inline constexpr size_t kMaxGrantsPerClient = 1024;
inline constexpr uint32_t kMaxScanLimit = 1000;
inline constexpr size_t kScanResponseBudget = 60 << 10;  // keys + values per Scan response
// Arena slot classes: 64 B << c for c in [0, kSlotClasses); the largest holds kMaxValueBytes.
inline constexpr uint32_t kMinSlotBytes = 64;
inline constexpr int kSlotClasses = 11;
inline constexpr uint32_t SlotClassCapacity(int c) { return kMinSlotBytes << c; }
// The smallest class holding `size` bytes; -1 when size > kMaxValueBytes.
inline constexpr int SlotClassOf(uint32_t size) {
  for (int c = 0; c < kSlotClasses; ++c) {
    if (size <= SlotClassCapacity(c)) return c;
  }
  return -1;
}
static_assert(SlotClassCapacity(kSlotClasses - 1) == kMaxValueBytes, "largest class");

// Engine message size both ends configure: the largest response (a Get of the largest value,
// or a Scan page) plus RPC header and protobuf framing.
inline constexpr uint32_t kMaxMessageBytes = kMaxValueBytes + 4096;

// The checks both sides apply: InvalidArgument naming the size and the limit.
absl::Status CheckKey(absl::string_view key);  // 1..kMaxKeyBytes bytes
absl::Status CheckValueSize(size_t size);      // at most kMaxValueBytes

}  // namespace unloadkv::proto

#endif  // UNLOADKV_PROTO_LIMITS_H_
