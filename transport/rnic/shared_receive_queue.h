// A shared receive queue (SRQ): one pool of receive buffers that several queue pairs of a
// device draw from (verbs: ibv_create_srq), so receive memory grows with the load, not with
// the number of connections.
#ifndef UNLOADKV_TRANSPORT_RNIC_SHARED_RECEIVE_QUEUE_H_
#define UNLOADKV_TRANSPORT_RNIC_SHARED_RECEIVE_QUEUE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "transport/rnic/types.h"

namespace unloadkv::rnic {

struct SrqConfig {
  uint32_t max_wr = 4096;  // receives posted at most: 1..DeviceLimits::max_qp_wr
  uint32_t limit = 0;      // low watermark armed at creation (see ArmLimit); 0: not armed
};

// Semantics (every backend; the conformance suite checks them):
//  * A QP created with QpConfig::srq takes each receive it needs from the SRQ, oldest first,
//    whichever attached QP the request arrives on; the completion goes to that QP's recv_cq
//    and names that QP (qp_num). Such a QP refuses PostRecv (FailedPrecondition).
//  * When the SRQ is empty, an incoming SEND or WRITE_WITH_IMM waits as on a QP without a
//    posted receive (RNR): a receive posted within the QP's rnr_timeout lets it through,
//    otherwise the sender completes with kRnrRetryExceeded and both QPs fail.
//  * A QP that fails does not flush the SRQ: its receives stay for the other QPs. A receive
//    the QP had already taken for a request still arriving completes on it with kFlushed.
//  * PostRecv has QueuePair::PostRecv's error contract (malformed: InvalidArgument; more than
//    max_wr posted: ResourceExhausted; nothing from the first bad request on is posted), and
//    a receive whose buffers no region registered with kLocalWrite covers is refused at post
//    with InvalidArgument, so that no QP pays for another's bad buffer (verbs cannot check at
//    post: there the QP that takes such a receive fails with a local protection error).
//  * Limit (verbs: IBV_SRQ_LIMIT and IBV_EVENT_SRQ_LIMIT_REACHED): armed with L > 0, the SRQ
//    records one event when taking a receive leaves fewer than L posted, and disarms;
//    TakeLimitEvent reports it once. ArmLimit re-arms (arming alone records nothing).
//
// Thread-safety: all methods may be called from any thread. Every QP attached must be
// destroyed before the SRQ.
class SharedReceiveQueue {
 public:
  virtual ~SharedReceiveQueue() = default;

  virtual absl::Status PostRecv(absl::Span<const RecvWorkRequest> wrs) = 0;

  // Arms the low watermark at `limit` receives (0 disarms). InvalidArgument above max_wr.
  virtual absl::Status ArmLimit(uint32_t limit) = 0;

  // True once per event: fewer than the armed limit were posted since the last call.
  virtual bool TakeLimitEvent() = 0;

  absl::Status PostRecv(const RecvWorkRequest& wr) { return PostRecv({&wr, 1}); }
};

}  // namespace unloadkv::rnic

#endif  // UNLOADKV_TRANSPORT_RNIC_SHARED_RECEIVE_QUEUE_H_
