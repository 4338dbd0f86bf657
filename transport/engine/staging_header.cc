#include "transport/engine/staging_header.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace unloadkv::engine {
namespace {

template <typename T>
void Put(char* out, size_t offset, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out[offset + i] = static_cast<char>(v >> (8 * i));
}

template <typename T>
T Get(const char* in, size_t offset) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) {
    v |= static_cast<T>(static_cast<uint8_t>(in[offset + i])) << (8 * i);
  }
  return v;
}

}  // namespace

void EncodeStagingHeader(const StagingHeader& h, char* out) {
  Put<uint8_t>(out, 0, kStagingVersion);
  Put<uint8_t>(out, 1, 1);
  Put<uint16_t>(out, 2, 0);
  Put<uint32_t>(out, 4, h.length);
  Put<uint64_t>(out, 8, h.sequence);
  Put<uint64_t>(out, 16, h.remote_addr);
  Put<uint32_t>(out, 24, h.rkey);
  Put<uint32_t>(out, 28, 0);
}

absl::StatusOr<StagingHeader> ParseStagingHeader(const char* slot, uint32_t byte_len,
                                                 uint32_t slot_bytes) {
  if (byte_len < kStagingHeaderSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("staged write truncated: ", byte_len, " bytes, header needs 32"));
  }
  if (byte_len > slot_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "staged write of ", byte_len, " bytes exceeds the ", slot_bytes, "-byte slot"));
  }
  if (uint8_t v = Get<uint8_t>(slot, 0); v != kStagingVersion) {
    return absl::InvalidArgumentError(absl::StrCat("staging header: unknown version ", v));
  }
  if (uint8_t k = Get<uint8_t>(slot, 1); k != 1) {
    return absl::InvalidArgumentError(absl::StrCat("staging header: unknown kind ", k));
  }
  if (Get<uint16_t>(slot, 2) != 0 || Get<uint32_t>(slot, 28) != 0) {
    return absl::InvalidArgumentError("staging header: reserved fields are not zero");
  }
  StagingHeader h;
  h.length = Get<uint32_t>(slot, 4);
  h.sequence = Get<uint64_t>(slot, 8);
  h.remote_addr = Get<uint64_t>(slot, 16);
  h.rkey = Get<uint32_t>(slot, 24);
  if (h.length != byte_len - kStagingHeaderSize) {
    return absl::InvalidArgumentError(absl::StrCat("staging header: length mismatch (header ",
                                                   h.length, ", delivered ",
                                                   byte_len - kStagingHeaderSize, ")"));
  }
  return h;
}

}  // namespace unloadkv::engine
