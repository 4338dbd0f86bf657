// The RPC frame: a little-endian header sized to its kind, then the payload (a serialized
// protobuf) up to the end of the engine message that carries the frame.
//   request  (16 bytes): 0 u8 kind (1)  1 u8 version (2)  2 u16 method  4 u64 request id
//                        (chosen by the client)  12 u32 timeout_us (how long the client
//                        waits; 0 = no deadline)
//   response (13 bytes): 0 u8 kind (2)  1 u8 version (2)  2 u16 method  4 u64 request id
//                        (the request's, echoed)  12 u8 status (absl::StatusCode)
// Version 1 had one 24-byte header for both kinds (with a status in requests, a timeout in
// responses and the payload's length, which the message already gives).
#ifndef UNLOADKV_TRANSPORT_RPC_RPC_FRAME_H_
#define UNLOADKV_TRANSPORT_RPC_RPC_FRAME_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace unloadkv::rpc {

inline constexpr uint8_t kRpcVersion = 2;
inline constexpr size_t kRpcRequestHeaderSize = 16;
inline constexpr size_t kRpcResponseHeaderSize = 13;

enum class FrameKind : uint8_t { kRequest = 1, kResponse = 2 };

struct RpcFrame {
  FrameKind kind = FrameKind::kRequest;
  uint16_t method = 0;
  uint32_t status = 0;  // responses only (an absl::StatusCode)
  uint64_t request_id = 0;
  uint32_t timeout_us = 0;    // requests only
  absl::string_view payload;  // points into the decoded buffer
};

std::string EncodeRpcFrame(const RpcFrame& f);
// The same into `*buffer` (resized to the frame; its capacity reused: no allocation once it
// has grown). `f.payload` must not point into `*buffer`.
void EncodeRpcFrame(const RpcFrame& f, std::string* buffer);

// Validates kind, version, the header's length and a response's status. The payload is every
// byte after the header. Error messages name the field.
absl::StatusOr<RpcFrame> DecodeRpcFrame(absl::string_view bytes);

}  // namespace unloadkv::rpc

#endif  // UNLOADKV_TRANSPORT_RPC_RPC_FRAME_H_
