#include "transport/engine/engine_wire.h"

#include "absl/strings/str_cat.h"
#include "transport/base/little_endian.h"

namespace unloadkv::engine {

void EncodeMessageHeader(const MessageHeader& h, int lanes, char* out) {
  StoreLittleEndian<uint64_t>(out, 0, h.messages_seen);
  StoreLittleEndian<uint32_t>(
      out, 8, (h.credits_returned & ~kWantsCreditsBit) | (h.wants_credits ? kWantsCreditsBit : 0u));
  for (int k = 0; k < lanes; ++k) StoreLittleEndian<uint32_t>(out, 12 + 4 * k, h.lane_writes[k]);
}

absl::StatusOr<MessageHeader> ParseMessageHeader(const char* buf, uint32_t byte_len, int lanes) {
  if (lanes < 1 || lanes > kMaxLanes) {
    return absl::InvalidArgumentError(absl::StrCat("message header: ", lanes, " lanes"));
  }
  if (byte_len < MessageHeaderBytes(lanes)) {
    return absl::InvalidArgumentError(absl::StrCat("message header: truncated (", byte_len, " of ",
                                                   MessageHeaderBytes(lanes), " bytes)"));
  }
  MessageHeader h;
  h.messages_seen = LoadLittleEndian<uint64_t>(buf, 0);
  const uint32_t credits = LoadLittleEndian<uint32_t>(buf, 8);
  h.credits_returned = credits & ~kWantsCreditsBit;
  h.wants_credits = (credits & kWantsCreditsBit) != 0;
  for (int k = 0; k < lanes; ++k) h.lane_writes[k] = LoadLittleEndian<uint32_t>(buf, 12 + 4 * k);
  return h;
}

void EncodeAck(const AckPayload& a, char* out) {
  StoreLittleEndian<uint64_t>(out, 0, a.applied);
  StoreLittleEndian<uint64_t>(out, 8, a.limit);
  StoreLittleEndian<uint32_t>(out, 16, static_cast<uint32_t>(a.status));
  StoreLittleEndian<uint32_t>(out, 20, a.credits);
}

absl::StatusOr<AckPayload> ParseAck(const char* buf, uint32_t byte_len) {
  if (byte_len != kAckBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("ack: ", byte_len, " bytes, expected ", kAckBytes));
  }
  AckPayload a;
  a.applied = LoadLittleEndian<uint64_t>(buf, 0);
  a.limit = LoadLittleEndian<uint64_t>(buf, 8);
  const uint32_t status = LoadLittleEndian<uint32_t>(buf, 16);
  a.status = status == 0 ? rnic::WcStatus::kSuccess
             : status == static_cast<uint32_t>(rnic::WcStatus::kRemoteAccessError)
                 ? rnic::WcStatus::kRemoteAccessError
                 : rnic::WcStatus::kRemoteInvalidRequest;
  a.credits = LoadLittleEndian<uint32_t>(buf, 20);
  return a;
}

}  // namespace unloadkv::engine
