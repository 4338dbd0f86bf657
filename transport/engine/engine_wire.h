// The two other layouts an engine puts on the wire (the staging header is in staging_header.h):
//
// Message header, in front of every engine message (SEND_WITH_IMM kImmMessage on the main QP),
// 12 + 4 x lanes bytes, little-endian:
//   0  u64 messages_seen     messages of the receiver its sender had received (see Quiet)
//   8  u32 credits_returned  message credits handed back (bits 0-30); bit 31 set: the sender
//                            had more messages waiting for credits when it sent this one
//  12  u32 lane_writes[k]    per staging lane, unloaded writes posted on it before this message
//                            (wrapping), which the receiver applies before delivering it
//
// Ack, the payload of SEND_WITH_IMM kImmAck on a staging QP, 24 bytes, little-endian:
//   0  u64 applied   staged writes of the lane the target applied (or refused) so far
//   8  u64 limit     staged writes of the lane the initiator may have sent in all (its staging
//                    credits: sequence numbers below limit); never lower than a previous limit
//  16  u32 status    0, or the rnic::WcStatus of the refused write (remote access error or
//                    remote invalid request)
//  20  u32 credits   message credits handed back
//
// Parsing checks lengths only; whether the counts are plausible (no more acknowledged than
// posted) is the connection's business, because only it knows what it posted.
#ifndef UNLOADKV_TRANSPORT_ENGINE_ENGINE_WIRE_H_
#define UNLOADKV_TRANSPORT_ENGINE_ENGINE_WIRE_H_

#include <array>
#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "transport/rnic/types.h"

namespace unloadkv::engine {

inline constexpr int kMaxLanes = 8;
inline constexpr size_t kAckBytes = 24;

inline constexpr uint32_t MessageHeaderBytes(int lanes) { return 12 + 4 * uint32_t(lanes); }

inline constexpr uint32_t kWantsCreditsBit = 1u << 31;

struct MessageHeader {
  uint64_t messages_seen = 0;
  uint32_t credits_returned = 0;  // below kWantsCreditsBit
  bool wants_credits = false;
  std::array<uint32_t, kMaxLanes> lane_writes = {};  // the first `lanes` are on the wire
};

// Writes MessageHeaderBytes(lanes) bytes at `out`. lanes is in 1..kMaxLanes.
void EncodeMessageHeader(const MessageHeader& h, int lanes, char* out);
// The header of a message of `byte_len` bytes (header included) on a connection with `lanes`
// staging lanes; InvalidArgument when byte_len is shorter than the header.
absl::StatusOr<MessageHeader> ParseMessageHeader(const char* buf, uint32_t byte_len, int lanes);

struct AckPayload {
  uint64_t applied = 0;
  uint64_t limit = 0;
  rnic::WcStatus status = rnic::WcStatus::kSuccess;
  uint32_t credits = 0;
};

// Writes kAckBytes bytes at `out`.
void EncodeAck(const AckPayload& a, char* out);
// An ack of `byte_len` bytes; InvalidArgument unless byte_len == kAckBytes. A status other than
// success, remote access error or remote invalid request reads as remote invalid request (a
// refusal is a refusal; the initiator reports the class a NIC would).
absl::StatusOr<AckPayload> ParseAck(const char* buf, uint32_t byte_len);

}  // namespace unloadkv::engine

#endif  // UNLOADKV_TRANSPORT_ENGINE_ENGINE_WIRE_H_
