#include "transport/engine/staging_header.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "transport/base/little_endian.h"

namespace unloadkv::engine {
namespace {
constexpr uint16_t kWantsFlag = 1;
}  // namespace

void EncodeStagingHeader(const StagingHeader& h, char* out) {
  StoreLittleEndian<uint8_t>(out, 0, kStagingVersion);
  StoreLittleEndian<uint8_t>(out, 1, 1);
  StoreLittleEndian<uint16_t>(out, 2, h.wants_credits ? kWantsFlag : 0);
  StoreLittleEndian<uint32_t>(out, 4, h.length);
  StoreLittleEndian<uint64_t>(out, 8, h.sequence);
  StoreLittleEndian<uint64_t>(out, 16, h.remote_addr);
  StoreLittleEndian<uint32_t>(out, 24, h.rkey);
  StoreLittleEndian<uint32_t>(out, 28, 0);
}

absl::StatusOr<StagingHeader> ParseStagingHeader(const char* slot, uint32_t byte_len,
                                                 uint32_t slot_bytes) {
  if (byte_len < kStagingHeaderSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("staged write truncated: ", byte_len, " bytes, header needs 32"));
  }
  if (byte_len > slot_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "staged write of ", byte_len, " bytes exceeds the ", slot_bytes, "-byte buffer"));
  }
  if (uint8_t v = LoadLittleEndian<uint8_t>(slot, 0); v != kStagingVersion) {
    return absl::InvalidArgumentError(absl::StrCat("staging header: unknown version ", v));
  }
  if (uint8_t k = LoadLittleEndian<uint8_t>(slot, 1); k != 1) {
    return absl::InvalidArgumentError(absl::StrCat("staging header: unknown kind ", k));
  }
  const uint16_t flags = LoadLittleEndian<uint16_t>(slot, 2);
  if ((flags & ~kWantsFlag) != 0 || LoadLittleEndian<uint32_t>(slot, 28) != 0) {
    return absl::InvalidArgumentError("staging header: unknown flags or reserved field not zero");
  }
  StagingHeader h;
  h.length = LoadLittleEndian<uint32_t>(slot, 4);
  h.sequence = LoadLittleEndian<uint64_t>(slot, 8);
  h.remote_addr = LoadLittleEndian<uint64_t>(slot, 16);
  h.rkey = LoadLittleEndian<uint32_t>(slot, 24);
  h.wants_credits = (flags & kWantsFlag) != 0;
  if (h.length != byte_len - kStagingHeaderSize) {
    return absl::InvalidArgumentError(absl::StrCat("staging header: length mismatch (header ",
                                                   h.length, ", delivered ",
                                                   byte_len - kStagingHeaderSize, ")"));
  }
  return h;
}

}  // namespace unloadkv::engine
