#include "transport/soft/frame.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "transport/rnic/types.h"

namespace unloadkv::soft {
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

bool KnownType(uint8_t t) { return (t >= 1 && t <= 6) || (t >= 16 && t <= 18); }

}  // namespace

bool IsRequest(FrameType t) { return t >= FrameType::kWrite && t <= FrameType::kReadRequest; }

bool IsResponse(FrameType t) { return t >= FrameType::kAck; }

void EncodeFrameHeader(const FrameHeader& h, char* out) {
  Put<uint16_t>(out, 0, kFrameMagic);
  Put<uint8_t>(out, 2, kFrameVersion);
  Put<uint8_t>(out, 3, static_cast<uint8_t>(h.type));
  Put<uint32_t>(out, 4, h.payload_len);
  Put<uint32_t>(out, 8, h.psn);
  Put<uint32_t>(out, 12, h.imm);
  Put<uint64_t>(out, 16, h.remote_addr);
  Put<uint32_t>(out, 24, h.rkey);
  Put<uint32_t>(out, 28, h.aux);
}

absl::StatusOr<FrameHeader> DecodeFrameHeader(const char* in, uint64_t max_payload) {
  if (uint16_t magic = Get<uint16_t>(in, 0); magic != kFrameMagic) {
    return absl::DataLossError(absl::StrCat("frame: bad magic 0x", absl::Hex(magic)));
  }
  if (uint8_t version = Get<uint8_t>(in, 2); version != kFrameVersion) {
    return absl::DataLossError(absl::StrCat("frame: unsupported version ", version));
  }
  uint8_t type = Get<uint8_t>(in, 3);
  if (!KnownType(type)) {
    return absl::DataLossError(absl::StrCat("frame: unknown type ", type));
  }
  FrameHeader h;
  h.type = static_cast<FrameType>(type);
  h.payload_len = Get<uint32_t>(in, 4);
  h.psn = Get<uint32_t>(in, 8);
  h.imm = Get<uint32_t>(in, 12);
  h.remote_addr = Get<uint64_t>(in, 16);
  h.rkey = Get<uint32_t>(in, 24);
  h.aux = Get<uint32_t>(in, 28);
  if (h.payload_len > max_payload) {
    return absl::DataLossError(
        absl::StrCat("frame: payload_len ", h.payload_len, " exceeds the limit ", max_payload));
  }
  switch (h.type) {
    case FrameType::kHello:
    case FrameType::kAck:
      if (h.payload_len != 0) {
        return absl::DataLossError(absl::StrCat("frame: type ", type, " carries payload_len ",
                                                h.payload_len, ", expected 0"));
      }
      break;
    case FrameType::kReadRequest:
      if (h.payload_len != 0) {
        return absl::DataLossError("frame: READ request carries a payload");
      }
      if (h.aux > max_payload) {
        return absl::DataLossError(
            absl::StrCat("frame: READ length ", h.aux, " exceeds the limit ", max_payload));
      }
      break;
    case FrameType::kNak: {
      if (h.payload_len != 0) return absl::DataLossError("frame: NAK carries a payload");
      auto s = static_cast<rnic::WcStatus>(h.aux);
      if (h.aux > 255 ||
          (s != rnic::WcStatus::kRemoteAccessError && s != rnic::WcStatus::kRemoteInvalidRequest &&
           s != rnic::WcStatus::kRnrRetryExceeded)) {
        return absl::DataLossError(absl::StrCat("frame: NAK status ", h.aux, " is not valid"));
      }
      break;
    }
    case FrameType::kWrite:
    case FrameType::kWriteWithImm:
    case FrameType::kSend:
    case FrameType::kSendWithImm:
      if (h.aux & ~kAckRequested) {
        return absl::DataLossError(
            absl::StrCat("frame: unknown request flags 0x", absl::Hex(h.aux)));
      }
      break;
    default:
      break;
  }
  return h;
}

}  // namespace unloadkv::soft
