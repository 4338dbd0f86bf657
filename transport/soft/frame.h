// Wire format of the soft RNIC: every message on a soft TCP stream is a header, little-endian,
// of a size fixed per type (4 to 37 bytes: only the fields its type uses), followed by
// payload_len bytes. docs/wire-soft.md describes each type.
#ifndef UNLOADKV_TRANSPORT_SOFT_FRAME_H_
#define UNLOADKV_TRANSPORT_SOFT_FRAME_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace unloadkv::soft {

inline constexpr uint16_t kFrameMagic = 0x4B55;  // "UK"
// 6: headers sized per type. 5: SEND_WITH_INVALIDATE (memory windows). 4: CONNECT carries the
// pair's connect token. 3: one stream per pair of devices, every frame naming its QPs (2 used
// one stream per QP pair, 1 one stream per direction).
inline constexpr uint8_t kFrameVersion = 6;
// Every header starts with magic (2 bytes), version and type: what DecodeFramePrefix reads.
inline constexpr size_t kFramePrefixSize = 4;
// The largest header (WRITE_WITH_IMM).
inline constexpr size_t kMaxFrameHeaderSize = 37;

enum class FrameType : uint8_t {
  // Dialer -> listener, first frame of a stream; names no QP.
  kHello = 1,
  // Requests (requester -> responder), each with the next PSN of the stream. For WRITE,
  // WRITE_WITH_IMM, SEND and SEND_WITH_IMM, aux holds flags: kAckRequested or nothing.
  kWrite = 2,         // remote_addr, rkey, payload = data
  kWriteWithImm = 3,  // + imm; consumes a receive at the target
  kSend = 4,          // payload = data; consumes a receive
  kSendWithImm = 5,   // + imm
  kReadRequest = 6,   // remote_addr, rkey, aux = length to read; no payload
  // QP set-up and teardown, each naming the destination QP (qp) and the sender's (src_qp).
  kConnect = 7,     // dialer -> listener: psn = first request PSN the dialer will use, and
                    // the pair's connect token (SetConnectToken)
  kConnectAck = 8,  // listener -> dialer: both ends are connected; requests may flow
  kDisconnect = 9,  // the sender's QP is gone or in error (or refuses the CONNECT)
  // A request like kSend that also invalidates, at the responder, the memory window whose key
  // is in rkey (bound to the receiving QP), before its receive completes.
  kSendWithInvalidate = 10,
  // Responses (responder -> requester).
  kAck = 16,           // every request with PSN <= psn (other than READs) succeeded
  kNak = 17,           // request `psn` failed with status aux (a WcStatus); QP is now in error
  kReadResponse = 18,  // payload = the data READ request `psn` asked for
  kRnrNak = 19,        // request `psn` found no receive: dropped with every later one, resend
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
  uint32_t qp = 0;      // destination QP number at the receiving device (0 only on HELLO)
  uint32_t src_qp = 0;  // the sending device's QP (0 only on HELLO)
};

// A CONNECT carries the pair's connect token (rnic::QpAttributes::token, kConnectTokenBytes;
// empty means 16 zero bytes) in remote_addr (token bytes 0-7), imm (8-11) and rkey (12-15).
void SetConnectToken(absl::string_view token, FrameHeader* h);
std::string ConnectTokenOf(const FrameHeader& h);  // always kConnectTokenBytes bytes
// The token a QP expects: `token`, or 16 zero bytes when it is empty.
std::string CanonicalConnectToken(absl::string_view token);

bool IsRequest(FrameType t);
bool IsResponse(FrameType t);

// The header size of a frame of type `t` (kFramePrefixSize to kMaxFrameHeaderSize); 0 for a
// value that is not a type.
size_t FrameHeaderSize(FrameType t);

// Serializes `h` into FrameHeaderSize(h.type) bytes at `out` (which has room for
// kMaxFrameHeaderSize) and returns that size. Fields the type does not carry are not sent (the
// receiver reads them as 0). Request flags (aux of WRITE and SEND types) are one byte on the
// wire.
size_t EncodeFrameHeader(const FrameHeader& h, char* out);

// Reads kFramePrefixSize bytes: magic, version and a known type. Returns the size of the whole
// header they start (FrameHeaderSize of the type).
absl::StatusOr<size_t> DecodeFramePrefix(const char* in);

// Parses and validates a whole header at `in`, which holds at least `available` bytes: magic,
// version, a known type, the header complete (else FailedPrecondition: read more), payload_len
// at most `max_payload`, and the per-type rules (READ length at most `max_payload`, NAK status a
// remote error code, QP numbers nonzero, known request flags). Error messages name the field.
// Sets *size to the header's size when it returns a header.
absl::StatusOr<FrameHeader> DecodeFrameHeader(const char* in, size_t available,
                                              uint64_t max_payload, size_t* size);

}  // namespace unloadkv::soft

#endif  // UNLOADKV_TRANSPORT_SOFT_FRAME_H_
