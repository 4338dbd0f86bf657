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
  const bool request = f.kind == FrameKind::kRequest;
  const size_t header = request ? kRpcRequestHeaderSize : kRpcResponseHeaderSize;
  out.resize(header + f.payload.size());
  StoreLittleEndian<uint8_t>(out.data(), 0, static_cast<uint8_t>(f.kind));
  StoreLittleEndian<uint8_t>(out.data(), 1, kRpcVersion);
  StoreLittleEndian<uint16_t>(out.data(), 2, f.method);
  StoreLittleEndian<uint64_t>(out.data(), 4, f.request_id);
  if (request) {
    StoreLittleEndian<uint32_t>(out.data(), 12, f.timeout_us);
  } else {
    StoreLittleEndian<uint8_t>(out.data(), 12, static_cast<uint8_t>(f.status));
  }
  if (!f.payload.empty()) std::memcpy(out.data() + header, f.payload.data(), f.payload.size());
}

absl::StatusOr<RpcFrame> DecodeRpcFrame(absl::string_view bytes) {
  const char* p = bytes.data();
  if (bytes.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("rpc frame: ", bytes.size(), " bytes hold no kind and version"));
  }
  const uint8_t kind = LoadLittleEndian<uint8_t>(p, 0);
  if (kind != 1 && kind != 2) {
    return absl::InvalidArgumentError(absl::StrCat("rpc frame: unknown kind ", kind));
  }
  if (uint8_t v = LoadLittleEndian<uint8_t>(p, 1); v != kRpcVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("rpc frame: unsupported version ", v, " (this end speaks ", kRpcVersion, ")"));
  }
  RpcFrame f;
  f.kind = static_cast<FrameKind>(kind);
  const bool request = f.kind == FrameKind::kRequest;
  const size_t header = request ? kRpcRequestHeaderSize : kRpcResponseHeaderSize;
  if (bytes.size() < header) {
    return absl::InvalidArgumentError(absl::StrCat("rpc frame: ", bytes.size(), " bytes, a ",
                                                   request ? "request" : "response",
                                                   "'s header needs ", header));
  }
  f.method = LoadLittleEndian<uint16_t>(p, 2);
  f.request_id = LoadLittleEndian<uint64_t>(p, 4);
  if (request) {
    f.timeout_us = LoadLittleEndian<uint32_t>(p, 12);
  } else {
    f.status = LoadLittleEndian<uint8_t>(p, 12);
    if (f.status > static_cast<uint32_t>(absl::StatusCode::kUnauthenticated)) {
      return absl::InvalidArgumentError(absl::StrCat("rpc frame: bad status ", f.status));
    }
  }
  f.payload = bytes.substr(header);
  return f;
}

}  // namespace unloadkv::rpc
