#include "transport/soft/frame.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "transport/base/little_endian.h"
#include "transport/rnic/qp_attributes.h"
#include "transport/rnic/types.h"

namespace unloadkv::soft {
namespace {

// The fields a header carries after its prefix, in this order on the wire: the destination and
// source QPs (8 bytes), psn (4), request flags (1) or aux (4), payload_len (4), imm (4), rkey
// (4), remote_addr (8).
enum Field : uint8_t {
  kQps = 1,
  kPsn = 2,
  kFlags = 4,
  kAux = 8,
  kLen = 16,
  kImm = 32,
  kRkey = 64,
  kAddr = 128,
};

constexpr uint8_t kRequest = kQps | kPsn | kFlags | kLen;

// The fields of each type (0..19); kNotAType where no type is defined. HELLO's layout is 0: it
// is the prefix alone.
constexpr uint8_t kNotAType = 0xff;
constexpr uint8_t kLayout[20] = {
    kNotAType,
    0,                                   // 1 HELLO
    kRequest | kRkey | kAddr,            // 2 WRITE
    kRequest | kImm | kRkey | kAddr,     // 3 WRITE_WITH_IMM
    kRequest,                            // 4 SEND
    kRequest | kImm,                     // 5 SEND_WITH_IMM
    kQps | kPsn | kAux | kRkey | kAddr,  // 6 READ request: aux = length
    kQps | kPsn | kImm | kRkey | kAddr,  // 7 CONNECT: psn, token in remote_addr, imm, rkey
    kQps,                                // 8 CONNECT_ACK
    kQps,                                // 9 DISCONNECT
    kRequest | kRkey,                    // 10 SEND_WITH_INVALIDATE
    kNotAType,
    kNotAType,
    kNotAType,
    kNotAType,
    kNotAType,
    kQps | kPsn,         // 16 ACK
    kQps | kPsn | kAux,  // 17 NAK: aux = status
    kQps | kPsn | kLen,  // 18 READ response
    kQps | kPsn,         // 19 RNR NAK
};

constexpr size_t SizeOf(uint8_t layout) {
  return kFramePrefixSize + ((layout & kQps) ? 8 : 0) + ((layout & kPsn) ? 4 : 0) +
         ((layout & kFlags) ? 1 : 0) + ((layout & kAux) ? 4 : 0) + ((layout & kLen) ? 4 : 0) +
         ((layout & kImm) ? 4 : 0) + ((layout & kRkey) ? 4 : 0) + ((layout & kAddr) ? 8 : 0);
}

uint8_t LayoutOf(uint8_t type) { return type < sizeof(kLayout) ? kLayout[type] : kNotAType; }

static_assert(SizeOf(kLayout[3]) == kMaxFrameHeaderSize, "WRITE_WITH_IMM is the largest");

// The rules a decoded header of `layout` follows beyond its prefix.
absl::Status Validate(const FrameHeader& h, uint8_t layout, uint64_t max_payload) {
  if (h.payload_len > max_payload) {
    return absl::DataLossError(
        absl::StrCat("frame: payload_len ", h.payload_len, " exceeds the limit ", max_payload));
  }
  if ((layout & kQps) && (h.qp == 0 || h.src_qp == 0)) {
    return absl::DataLossError(absl::StrCat("frame: type ", static_cast<int>(h.type), " names QPs ",
                                            h.qp, " and ", h.src_qp, ", expected two nonzero"));
  }
  switch (h.type) {
    case FrameType::kReadRequest:
      if (h.aux > max_payload) {
        return absl::DataLossError(
            absl::StrCat("frame: READ length ", h.aux, " exceeds the limit ", max_payload));
      }
      return absl::OkStatus();
    case FrameType::kNak: {
      auto s = static_cast<rnic::WcStatus>(h.aux);
      if (h.aux > 255 ||
          (s != rnic::WcStatus::kRemoteAccessError && s != rnic::WcStatus::kRemoteInvalidRequest)) {
        return absl::DataLossError(absl::StrCat("frame: NAK status ", h.aux, " is not valid"));
      }
      return absl::OkStatus();
    }
    default:
      if ((layout & kFlags) && (h.aux & ~kAckRequested)) {
        return absl::DataLossError(
            absl::StrCat("frame: unknown request flags 0x", absl::Hex(h.aux)));
      }
      return absl::OkStatus();
  }
}

}  // namespace

bool IsRequest(FrameType t) {
  return (t >= FrameType::kWrite && t <= FrameType::kReadRequest) ||
         t == FrameType::kSendWithInvalidate;
}

bool IsResponse(FrameType t) { return t >= FrameType::kAck; }

size_t FrameHeaderSize(FrameType t) {
  const uint8_t layout = LayoutOf(static_cast<uint8_t>(t));
  return layout == kNotAType ? 0 : SizeOf(layout);
}

size_t EncodeFrameHeader(const FrameHeader& h, char* out) {
  const uint8_t layout = LayoutOf(static_cast<uint8_t>(h.type));
  StoreLittleEndian<uint16_t>(out, 0, kFrameMagic);
  StoreLittleEndian<uint8_t>(out, 2, kFrameVersion);
  StoreLittleEndian<uint8_t>(out, 3, static_cast<uint8_t>(h.type));
  size_t at = kFramePrefixSize;
  if (layout & kQps) {
    StoreLittleEndian<uint32_t>(out, at, h.qp);
    StoreLittleEndian<uint32_t>(out, at + 4, h.src_qp);
    at += 8;
  }
  if (layout & kPsn) {
    StoreLittleEndian<uint32_t>(out, at, h.psn);
    at += 4;
  }
  if (layout & kFlags) {
    StoreLittleEndian<uint8_t>(out, at, static_cast<uint8_t>(h.aux));
    at += 1;
  }
  if (layout & kAux) {
    StoreLittleEndian<uint32_t>(out, at, h.aux);
    at += 4;
  }
  if (layout & kLen) {
    StoreLittleEndian<uint32_t>(out, at, h.payload_len);
    at += 4;
  }
  if (layout & kImm) {
    StoreLittleEndian<uint32_t>(out, at, h.imm);
    at += 4;
  }
  if (layout & kRkey) {
    StoreLittleEndian<uint32_t>(out, at, h.rkey);
    at += 4;
  }
  if (layout & kAddr) {
    StoreLittleEndian<uint64_t>(out, at, h.remote_addr);
    at += 8;
  }
  return at;
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

absl::StatusOr<size_t> DecodeFramePrefix(const char* in) {
  if (uint16_t magic = LoadLittleEndian<uint16_t>(in, 0); magic != kFrameMagic) {
    return absl::DataLossError(absl::StrCat("frame: bad magic 0x", absl::Hex(magic)));
  }
  if (uint8_t version = LoadLittleEndian<uint8_t>(in, 2); version != kFrameVersion) {
    return absl::DataLossError(absl::StrCat("frame: unsupported version ", version,
                                            " (this end speaks ", kFrameVersion, ")"));
  }
  const uint8_t type = LoadLittleEndian<uint8_t>(in, 3);
  const uint8_t layout = LayoutOf(type);
  if (layout == kNotAType) {
    return absl::DataLossError(absl::StrCat("frame: unknown type ", type));
  }
  return SizeOf(layout);
}

absl::StatusOr<FrameHeader> DecodeFrameHeader(const char* in, size_t available,
                                              uint64_t max_payload, size_t* size) {
  if (available < kFramePrefixSize) {
    return absl::FailedPreconditionError(
        absl::StrCat("frame: ", available, " bytes hold no header prefix"));
  }
  absl::StatusOr<size_t> need = DecodeFramePrefix(in);
  if (!need.ok()) return need.status();
  if (available < *need) {
    return absl::FailedPreconditionError(
        absl::StrCat("frame: header of ", *need, " bytes, ", available, " available"));
  }
  const uint8_t type = LoadLittleEndian<uint8_t>(in, 3);
  const uint8_t layout = kLayout[type];
  FrameHeader h;
  h.type = static_cast<FrameType>(type);
  size_t at = kFramePrefixSize;
  if (layout & kQps) {
    h.qp = LoadLittleEndian<uint32_t>(in, at);
    h.src_qp = LoadLittleEndian<uint32_t>(in, at + 4);
    at += 8;
  }
  if (layout & kPsn) {
    h.psn = LoadLittleEndian<uint32_t>(in, at);
    at += 4;
  }
  if (layout & kFlags) {
    h.aux = LoadLittleEndian<uint8_t>(in, at);
    at += 1;
  }
  if (layout & kAux) {
    h.aux = LoadLittleEndian<uint32_t>(in, at);
    at += 4;
  }
  if (layout & kLen) {
    h.payload_len = LoadLittleEndian<uint32_t>(in, at);
    at += 4;
  }
  if (layout & kImm) {
    h.imm = LoadLittleEndian<uint32_t>(in, at);
    at += 4;
  }
  if (layout & kRkey) {
    h.rkey = LoadLittleEndian<uint32_t>(in, at);
    at += 4;
  }
  if (layout & kAddr) {
    h.remote_addr = LoadLittleEndian<uint64_t>(in, at);
    at += 8;
  }
  if (absl::Status st = Validate(h, layout, max_payload); !st.ok()) return st;
  *size = at;
  return h;
}

}  // namespace unloadkv::soft
