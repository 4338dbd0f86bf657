#include "transport/rpc/rpc_frame.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "transport/base/little_endian.h"

namespace unloadkv::rpc {

std::string EncodeRpcFrame(const RpcFrame& f) {
  std::string out;
  EncodeRpcFrame(f, &out);
  return out;
}

void EncodeRpcFrame(const RpcFrame& f, std::string* buffer) {
  std::string& out = *buffer;
  out.resize(kRpcHeaderSize + f.payload.size());
  StoreLittleEndian<uint8_t>(out.data(), 0, static_cast<uint8_t>(f.kind));
  StoreLittleEndian<uint8_t>(out.data(), 1, 1);
  StoreLittleEndian<uint16_t>(out.data(), 2, f.method);
  StoreLittleEndian<uint32_t>(out.data(), 4, f.status);
  StoreLittleEndian<uint64_t>(out.data(), 8, f.request_id);
  StoreLittleEndian<uint32_t>(out.data(), 16, f.timeout_us);
  StoreLittleEndian<uint32_t>(out.data(), 20, static_cast<uint32_t>(f.payload.size()));
  if (!f.payload.empty())
    std::memcpy(out.data() + kRpcHeaderSize, f.payload.data(), f.payload.size());
}

absl::StatusOr<RpcFrame> DecodeRpcFrame(absl::string_view bytes) {
  if (bytes.size() < kRpcHeaderSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("rpc frame: ", bytes.size(), " bytes, header needs 24"));
  }
  const char* p = bytes.data();
  RpcFrame f;
  uint8_t kind = LoadLittleEndian<uint8_t>(p, 0);
  if (kind != 1 && kind != 2) {
    return absl::InvalidArgumentError(absl::StrCat("rpc frame: unknown kind ", kind));
  }
  if (uint8_t v = LoadLittleEndian<uint8_t>(p, 1); v != 1) {
    return absl::InvalidArgumentError(absl::StrCat("rpc frame: unsupported version ", v));
  }
  f.kind = static_cast<FrameKind>(kind);
  f.method = LoadLittleEndian<uint16_t>(p, 2);
  f.status = LoadLittleEndian<uint32_t>(p, 4);
  f.request_id = LoadLittleEndian<uint64_t>(p, 8);
  f.timeout_us = LoadLittleEndian<uint32_t>(p, 16);
  uint32_t len = LoadLittleEndian<uint32_t>(p, 20);
  if (f.status > static_cast<uint32_t>(absl::StatusCode::kUnauthenticated) ||
      (f.kind == FrameKind::kRequest && f.status != 0)) {
    return absl::InvalidArgumentError(absl::StrCat("rpc frame: bad status ", f.status));
  }
  if (len != bytes.size() - kRpcHeaderSize) {
    return absl::InvalidArgumentError(absl::StrCat("rpc frame: payload_len ", len, " but ",
                                                   bytes.size() - kRpcHeaderSize, " bytes follow"));
  }
  f.payload = bytes.substr(kRpcHeaderSize);
  return f;
}

}  // namespace unloadkv::rpc
