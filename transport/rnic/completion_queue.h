// A completion queue (CQ).
#ifndef UNLOADKV_TRANSPORT_RNIC_COMPLETION_QUEUE_H_
#define UNLOADKV_TRANSPORT_RNIC_COMPLETION_QUEUE_H_

#include "absl/types/span.h"
#include "transport/rnic/types.h"

namespace unloadkv::rnic {

// Collects the work completions of the queue pairs attached to it, in the order each QP
// produced them. Thread-safe: Poll may race with the device adding completions.
//
// Two ways to wait, as with verbs:
//  * busy-poll: call Poll in a loop;
//  * events: RequestNotify(), Poll once more (to close the race), then wait until notify_fd()
//    is readable; the next completion added after RequestNotify() makes it readable.
//    Backends whose progress is driven by the caller (see Device::event_fd) also need the
//    device's event_fd in the same wait.
class CompletionQueue {
 public:
  virtual ~CompletionQueue() = default;

  // Moves up to out.size() completions into `out`, oldest first; returns how many. Never blocks.
  virtual int Poll(absl::Span<WorkCompletion> out) = 0;

  // Arms the notification: the next completion makes notify_fd() readable. Consumes any
  // notification already pending.
  virtual void RequestNotify() = 0;

  // A file descriptor for poll/epoll, owned by the CQ; -1 when the backend has none (sim).
  virtual int notify_fd() const = 0;
};

}  // namespace unloadkv::rnic

#endif  // UNLOADKV_TRANSPORT_RNIC_COMPLETION_QUEUE_H_
