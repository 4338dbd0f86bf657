// The soft RNIC's completion queue storage. Internal to transport/soft.
#ifndef UNLOADKV_TRANSPORT_SOFT_CQ_CORE_H_
#define UNLOADKV_TRANSPORT_SOFT_CQ_CORE_H_

#include "absl/base/thread_annotations.h"
#include "absl/types/span.h"
#include "transport/base/mutex.h"
#include "transport/base/ring_queue.h"
#include "transport/rnic/types.h"

namespace unloadkv::soft {

// A completion queue's storage; shared by the CQ handle and the QPs that report to it.
// Thread-safe. notify_fd() (an eventfd) becomes readable after RequestNotify once a completion
// is pushed.
class CqCore {
 public:
  CqCore();
  ~CqCore();
  void Push(const rnic::WorkCompletion& wc) ABSL_LOCKS_EXCLUDED(mu_) { PushAll({&wc, 1}); }
  // Appends `wcs` in order under one acquisition of the lock.
  void PushAll(absl::Span<const rnic::WorkCompletion> wcs) ABSL_LOCKS_EXCLUDED(mu_);
  int Poll(absl::Span<rnic::WorkCompletion> out) ABSL_LOCKS_EXCLUDED(mu_);
  void RequestNotify() ABSL_LOCKS_EXCLUDED(mu_);
  int notify_fd() const { return efd_; }

 private:
  Mutex mu_;
  RingQueue<rnic::WorkCompletion> queue_ ABSL_GUARDED_BY(mu_);
  bool armed_ ABSL_GUARDED_BY(mu_) = false;
  int efd_;
};

}  // namespace unloadkv::soft

#endif  // UNLOADKV_TRANSPORT_SOFT_CQ_CORE_H_
