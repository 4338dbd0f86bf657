// A reliable-connected queue pair (QP).
#ifndef UNLOADKV_TRANSPORT_RNIC_QUEUE_PAIR_H_
#define UNLOADKV_TRANSPORT_RNIC_QUEUE_PAIR_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "transport/rnic/qp_attributes.h"
#include "transport/rnic/types.h"

namespace unloadkv::rnic {

class CompletionQueue;
class SharedReceiveQueue;

// Creation parameters of a queue pair.
struct QpConfig {
  CompletionQueue* send_cq = nullptr;  // required; must outlive the QP
  CompletionQueue* recv_cq = nullptr;  // required; may equal send_cq
  uint32_t max_send_wr = 1024;         // outstanding send requests (posted, not completed)
  uint32_t max_recv_wr = 1024;         // posted receives (ignored with an srq)
  // Receives come from this SRQ (same device; must outlive the QP) instead of PostRecv.
  SharedReceiveQueue* srq = nullptr;
  // How long an incoming SEND or WRITE_WITH_IMM waits for a receive to be posted before the
  // sender gets kRnrRetryExceeded. InfiniteDuration() waits forever (verbs rnr_retry = 7).
  absl::Duration rnr_timeout = absl::Seconds(1);
};

enum class QpState {
  kReset,        // created; Connect not yet called
  kReadyToSend,  // connected (verbs RTS): work flows
  kError,        // failed or closed: all work completes with errors, nothing more is sent
};

// RC semantics (what every backend guarantees and the conformance suite checks):
//  * Requests on one QP are executed at the target in post order; their completions appear on
//    the send CQ in post order.
//  * A successful WRITE/WRITE_WITH_IMM/SEND completion means the bytes are placed in target
//    memory and visible to the target's CPU; a READ completion means the data is in local
//    memory.
//  * A request the target refuses (bad rkey, missing access, out of bounds, receive too
//    small, no receive posted in time) writes nothing, completes with the matching status,
//    and moves both QPs to kError. Later and outstanding work completes with kFlushed.
//  * A vanished peer completes outstanding requests with kRetryExceeded; posted receives and
//    later requests complete with kFlushed. Nothing hangs.
//
// Thread-safety: all methods may be called from any thread. Destroying the QP moves it to
// kError (flushing outstanding work) and disconnects the peer.
class QueuePair {
 public:
  virtual ~QueuePair() = default;

  virtual uint32_t qp_num() const = 0;
  virtual QpState state() const = 0;

  // What the peer needs to connect to this QP; send it out of band.
  virtual QpAttributes local_attributes() const = 0;

  // Connects to the peer described by `remote` (RESET -> READY_TO_SEND). Both ends call it,
  // each with the other's attributes. Fails with a clear status on a bad address, a transport
  // mismatch, or a QP not in kReset; the QP then stays as it was.
  virtual absl::Status Connect(const QpAttributes& remote) = 0;

  // Posts send requests in order. Returns an error (and posts nothing from the first bad one
  // on) for a malformed request: unknown opcode, bad num_sge, message over the device limit,
  // send queue full, QP not connected. Problems the hardware finds while executing
  // (protection errors) are reported as completions instead, as verbs does.
  virtual absl::Status PostSend(absl::Span<const SendWorkRequest> wrs) = 0;

  // Posts receive buffers in order; same error contract as PostSend.
  virtual absl::Status PostRecv(absl::Span<const RecvWorkRequest> wrs) = 0;

  // Moves the QP to kError: outstanding and posted work completes with kFlushed and the peer
  // sees the connection go away. Idempotent.
  virtual void SetError() = 0;

  absl::Status PostSend(const SendWorkRequest& wr) { return PostSend({&wr, 1}); }
  absl::Status PostRecv(const RecvWorkRequest& wr) { return PostRecv({&wr, 1}); }
};

}  // namespace unloadkv::rnic

#endif  // UNLOADKV_TRANSPORT_RNIC_QUEUE_PAIR_H_
