// The RPC frame: a 24-byte little-endian header, then the payload (a serialized protobuf).
//   0 u8  kind (1 request, 2 response)      1 u8 version (1)      2 u16 method
//   4 u32 status (responses: absl::StatusCode; requests: 0)
//   8 u64 request id (chosen by the client, echoed by the server)
//  16 u32 timeout_us (requests: how long the client waits, 0 = no deadline; responses: 0)
//  20 u32 payload_len (must equal the bytes that follow)
#ifndef UNLOADKV_TRANSPORT_RPC_RPC_FRAME_H_
#define UNLOADKV_TRANSPORT_RPC_RPC_FRAME_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace unloadkv::rpc {

inline constexpr size_t kRpcHeaderSize = 24;

enum class FrameKind : uint8_t { kRequest = 1, kResponse = 2 };

struct RpcFrame {
  FrameKind kind = FrameKind::kRequest;
  uint16_t method = 0;
  uint32_t status = 0;
  uint64_t request_id = 0;
  uint32_t timeout_us = 0;
  absl::string_view payload;  // points into the decoded buffer
};

std::string EncodeRpcFrame(const RpcFrame& f);
// The same into `*buffer` (resized to the frame; its capacity reused: no allocation once it
// has grown). `f.payload` must not point into `*buffer`.
void EncodeRpcFrame(const RpcFrame& f, std::string* buffer);

// Validates kind, version, status range, payload_len against the bytes present. Error
// messages name the field.
absl::StatusOr<RpcFrame> DecodeRpcFrame(absl::string_view bytes);

}  // namespace unloadkv::rpc

#endif  // UNLOADKV_TRANSPORT_RPC_RPC_FRAME_H_
