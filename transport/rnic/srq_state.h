// The bookkeeping of a shared receive queue for backends that keep its receives themselves
// (soft, sim): the posted receives, the post-time checks and the low watermark, with the
// semantics of shared_receive_queue.h. Not thread-safe: the backend serializes access.
#ifndef UNLOADKV_TRANSPORT_RNIC_SRQ_STATE_H_
#define UNLOADKV_TRANSPORT_RNIC_SRQ_STATE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "transport/base/ring_queue.h"
#include "transport/rnic/device.h"
#include "transport/rnic/region_table.h"
#include "transport/rnic/shared_receive_queue.h"
#include "transport/rnic/types.h"

namespace unloadkv::rnic {

// CreateSharedReceiveQueue's checks: 1 <= max_wr <= limits.max_qp_wr, limit <= max_wr.
absl::Status CheckSrqConfig(const SrqConfig& config, const DeviceLimits& limits);

class SrqState {
 public:
  explicit SrqState(const SrqConfig& config) : max_wr_(config.max_wr), limit_(config.limit) {}

  // SharedReceiveQueue::PostRecv's checks against `regions`, then appends.
  absl::Status Post(absl::Span<const RecvWorkRequest> wrs, const RegionTable& regions);
  bool empty() const { return recvs_.empty(); }
  size_t size() const { return recvs_.size(); }
  // Removes and returns the oldest receive. Requires !empty().
  RecvWorkRequest Take();

  absl::Status ArmLimit(uint32_t limit);
  bool TakeLimitEvent();

 private:
  void CheckWatermark();

  const uint32_t max_wr_;
  uint32_t limit_;  // 0: disarmed
  bool limit_event_ = false;
  RingQueue<RecvWorkRequest> recvs_;
};

}  // namespace unloadkv::rnic

#endif  // UNLOADKV_TRANSPORT_RNIC_SRQ_STATE_H_
