#include "transport/soft/frame.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "transport/base/little_endian.h"
#include "transport/rnic/qp_attributes.h"
#include "transport/rnic/types.h"

namespace unloadkv::soft {
namespace {

bool KnownType(uint8_t t) { return (t >= 1 && t <= 10) || (t >= 16 && t <= 19); }

}  // namespace

bool IsRequest(FrameType t) {
  return (t >= FrameType::kWrite && t <= FrameType::kReadRequest) ||
         t == FrameType::kSendWithInvalidate;
}

bool IsResponse(FrameType t) { return t >= FrameType::kAck; }

void EncodeFrameHeader(const FrameHeader& h, char* out) {
  StoreLittleEndian<uint16_t>(out, 0, kFrameMagic);
  StoreLittleEndian<uint8_t>(out, 2, kFrameVersion);
  StoreLittleEndian<uint8_t>(out, 3, static_cast<uint8_t>(h.type));
  StoreLittleEndian<uint32_t>(out, 4, h.payload_len);
  StoreLittleEndian<uint32_t>(out, 8, h.psn);
  StoreLittleEndian<uint32_t>(out, 12, h.imm);
  StoreLittleEndian<uint64_t>(out, 16, h.remote_addr);
  StoreLittleEndian<uint32_t>(out, 24, h.rkey);
  StoreLittleEndian<uint32_t>(out, 28, h.aux);
  StoreLittleEndian<uint32_t>(out, 32, h.qp);
  StoreLittleEndian<uint32_t>(out, 36, h.src_qp);
}

void SetConnectToken(absl::string_view token, FrameHeader* h) {
  const std::string t = CanonicalConnectToken(token);
  h->remote_addr = LoadLittleEndian<uint64_t>(t.data(), 0);
  h->imm = LoadLittleEndian<uint32_t>(t.data(), 8);
  h->rkey = LoadLittleEndian<uint32_t>(t.data(), 12);
}

std::string ConnectTokenOf(const FrameHeader& h) {
  std::string t(rnic::kConnectTokenBytes, '\0');
  StoreLittleEndian<uint64_t>(t.data(), 0, h.remote_addr);
  StoreLittleEndian<uint32_t>(t.data(), 8, h.imm);
  StoreLittleEndian<uint32_t>(t.data(), 12, h.rkey);
  return t;
}

std::string CanonicalConnectToken(absl::string_view token) {
  std::string t(token);
  t.resize(rnic::kConnectTokenBytes, '\0');
  return t;
}

absl::StatusOr<FrameHeader> DecodeFrameHeader(const char* in, uint64_t max_payload) {
  if (uint16_t magic = LoadLittleEndian<uint16_t>(in, 0); magic != kFrameMagic) {
    return absl::DataLossError(absl::StrCat("frame: bad magic 0x", absl::Hex(magic)));
  }
  if (uint8_t version = LoadLittleEndian<uint8_t>(in, 2); version != kFrameVersion) {
    return absl::DataLossError(absl::StrCat("frame: unsupported version ", version));
  }
  uint8_t type = LoadLittleEndian<uint8_t>(in, 3);
  if (!KnownType(type)) {
    return absl::DataLossError(absl::StrCat("frame: unknown type ", type));
  }
  FrameHeader h;
  h.type = static_cast<FrameType>(type);
  h.payload_len = LoadLittleEndian<uint32_t>(in, 4);
  h.psn = LoadLittleEndian<uint32_t>(in, 8);
  h.imm = LoadLittleEndian<uint32_t>(in, 12);
  h.remote_addr = LoadLittleEndian<uint64_t>(in, 16);
  h.rkey = LoadLittleEndian<uint32_t>(in, 24);
  h.aux = LoadLittleEndian<uint32_t>(in, 28);
  h.qp = LoadLittleEndian<uint32_t>(in, 32);
  h.src_qp = LoadLittleEndian<uint32_t>(in, 36);
  if (h.payload_len > max_payload) {
    return absl::DataLossError(
        absl::StrCat("frame: payload_len ", h.payload_len, " exceeds the limit ", max_payload));
  }
  const bool hello = h.type == FrameType::kHello;
  if (hello != (h.qp == 0) || hello != (h.src_qp == 0)) {
    return absl::DataLossError(absl::StrCat("frame: type ", type, " names QPs ", h.qp, " and ",
                                            h.src_qp,
                                            hello ? ", expected none" : ", expected two"));
  }
  switch (h.type) {
    case FrameType::kHello:
    case FrameType::kConnect:
    case FrameType::kConnectAck:
    case FrameType::kDisconnect:
    case FrameType::kAck:
    case FrameType::kRnrNak:
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
          (s != rnic::WcStatus::kRemoteAccessError && s != rnic::WcStatus::kRemoteInvalidRequest)) {
        return absl::DataLossError(absl::StrCat("frame: NAK status ", h.aux, " is not valid"));
      }
      break;
    }
    case FrameType::kWrite:
    case FrameType::kWriteWithImm:
    case FrameType::kSend:
    case FrameType::kSendWithImm:
    case FrameType::kSendWithInvalidate:
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
