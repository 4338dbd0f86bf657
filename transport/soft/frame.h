// Wire format of the soft RNIC: every message on a soft TCP stream is a 32-byte header,
// little-endian, followed by payload_len bytes. docs/wire-soft.md describes each type.
#ifndef UNLOADKV_TRANSPORT_SOFT_FRAME_H_
#define UNLOADKV_TRANSPORT_SOFT_FRAME_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"

namespace unloadkv::soft {

inline constexpr uint16_t kFrameMagic = 0x4B55;  // "UK"
// 2: one stream per QP pair carrying both directions (1 used a stream per direction).
inline constexpr uint8_t kFrameVersion = 2;
inline constexpr size_t kFrameHeaderSize = 32;

enum class FrameType : uint8_t {
  // Dialer -> listener, first frame of a stream. rkey = destination QP number,
  // aux = source QP number, psn = first request PSN the dialer will use.
  kHello = 1,
  // Requests (requester -> responder), each with the next PSN of the stream. For WRITE,
  // WRITE_WITH_IMM, SEND and SEND_WITH_IMM, aux holds flags: kAckRequested or nothing.
  kWrite = 2,         // remote_addr, rkey, payload = data
  kWriteWithImm = 3,  // + imm; consumes a receive at the target
  kSend = 4,          // payload = data; consumes a receive
  kSendWithImm = 5,   // + imm
  kReadRequest = 6,   // remote_addr, rkey, aux = length to read; no payload
  // Responses (responder -> requester).
  kAck = 16,           // every request with PSN <= psn (other than READs) succeeded
  kNak = 17,           // request `psn` failed with status aux (a WcStatus); QP is now in error
  kReadResponse = 18,  // payload = the data READ request `psn` asked for
};

// Request flag (in aux): acknowledge at once. Without it the responder may delay the ACK
// (coalescing it with later ones), like the AckReq bit of an InfiniBand BTH.
inline constexpr uint32_t kAckRequested = 1;

struct FrameHeader {
  FrameType type = FrameType::kAck;
  uint32_t payload_len = 0;
  uint32_t psn = 0;
  uint32_t imm = 0;
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint32_t aux = 0;
};

bool IsRequest(FrameType t);
bool IsResponse(FrameType t);

// Serializes `h` into exactly kFrameHeaderSize bytes at `out`.
void EncodeFrameHeader(const FrameHeader& h, char* out);

// Parses and validates kFrameHeaderSize bytes: magic, version, a known type, payload_len at
// most `max_payload`, and the per-type rules (no payload on HELLO/READ request/ACK/NAK, READ
// length at most `max_payload`, NAK status a remote error code). Error messages name the field.
absl::StatusOr<FrameHeader> DecodeFrameHeader(const char* in, uint64_t max_payload);

}  // namespace unloadkv::soft

#endif  // UNLOADKV_TRANSPORT_SOFT_FRAME_H_
