// Pieces shared by the soft RNIC's data-path files: buffer sizes, ACK pacing, PSN arithmetic,
// and how a frame's payload is placed. Internal to transport/soft.
#ifndef UNLOADKV_TRANSPORT_SOFT_DATAPATH_UTIL_H_
#define UNLOADKV_TRANSPORT_SOFT_DATAPATH_UTIL_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "absl/time/time.h"
#include "transport/rnic/types.h"
#include "transport/soft/frame.h"
#include "transport/soft/frame_reader.h"

namespace unloadkv::soft {

inline constexpr size_t kReadBufferBytes = 256 * 1024;
inline constexpr size_t kDirectReadThreshold = 64 * 1024;
inline constexpr size_t kReadBudgetBytes = 4 * 1024 * 1024;  // per stream per Progress: fairness
inline constexpr int kMaxIov = 64;
// Unrequested ACKs wait at most this long, so unsignaled requests still retire. Requesters
// ask for an ACK often enough (kAckRequestInterval) that this is rarely what sends one.
inline constexpr absl::Duration kDelayedAck = absl::Milliseconds(5);
// A requester asks for an ACK at least every this many requests.
inline constexpr uint32_t kAckRequestInterval = 16;
// After an RNR NAK a requester resends this long later, doubling the wait on each NAK for the
// same request up to kRnrMaxRetry (until its QP's rnr_timeout has passed since the first).
inline constexpr absl::Duration kRnrFirstRetry = absl::Microseconds(100);
inline constexpr absl::Duration kRnrMaxRetry = absl::Milliseconds(20);

// Serial-number comparison of 32-bit PSNs.
inline bool PsnLess(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) < 0; }
inline bool PsnLessEq(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) <= 0; }

inline FrameType FrameTypeOf(rnic::Opcode op) {
  switch (op) {
    case rnic::Opcode::kWrite:
      return FrameType::kWrite;
    case rnic::Opcode::kWriteWithImm:
      return FrameType::kWriteWithImm;
    case rnic::Opcode::kSend:
      return FrameType::kSend;
    case rnic::Opcode::kSendWithImm:
      return FrameType::kSendWithImm;
    case rnic::Opcode::kRead:
      return FrameType::kReadRequest;
    case rnic::Opcode::kSendWithInvalidate:
      return FrameType::kSendWithInvalidate;
    case rnic::Opcode::kBindWindow:  // local operations: never framed
    case rnic::Opcode::kLocalInvalidate:
      break;
  }
  return FrameType::kSend;
}

inline PayloadPlan PlaceNothing() { return PayloadPlan{}; }

inline PayloadPlan PlaceAt(uint64_t addr, uint64_t len) {
  PayloadPlan p;
  if (len > 0) {
    p.iov[0] = {reinterpret_cast<void*>(addr), static_cast<size_t>(len)};
    p.iovcnt = 1;
  }
  return p;
}

// Scatters `len` bytes over the SGEs of a receive or READ request.
template <typename Wr>
inline PayloadPlan PlaceInto(const Wr& wr, uint64_t len) {
  PayloadPlan p;
  for (int i = 0; i < wr.num_sge && len > 0; ++i) {
    uint64_t n = std::min<uint64_t>(len, wr.sg_list[i].length);
    if (n == 0) continue;
    p.iov[p.iovcnt++] = {reinterpret_cast<void*>(wr.sg_list[i].addr), static_cast<size_t>(n)};
    len -= n;
  }
  return p;
}

inline PayloadPlan Discard() {
  PayloadPlan p;
  p.kind = PayloadPlan::kDiscard;
  return p;
}

inline PayloadPlan Close() {
  PayloadPlan p;
  p.kind = PayloadPlan::kClose;
  return p;
}

}  // namespace unloadkv::soft

#endif  // UNLOADKV_TRANSPORT_SOFT_DATAPATH_UTIL_H_
