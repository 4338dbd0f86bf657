#include "transport/rnic/srq_state.h"

#include "absl/strings/str_cat.h"
#include "transport/rnic/request_checks.h"

namespace unloadkv::rnic {

absl::Status CheckSrqConfig(const SrqConfig& config, const DeviceLimits& limits) {
  if (config.max_wr == 0 || config.max_wr > limits.max_qp_wr) {
    return absl::InvalidArgumentError(absl::StrCat("CreateSharedReceiveQueue: max_wr ",
                                                   config.max_wr, " not in 1..", limits.max_qp_wr));
  }
  if (config.limit > config.max_wr) {
    return absl::InvalidArgumentError(absl::StrCat("CreateSharedReceiveQueue: limit ", config.limit,
                                                   " above max_wr ", config.max_wr));
  }
  return absl::OkStatus();
}

absl::Status SrqState::Post(absl::Span<const RecvWorkRequest> wrs, const RegionTable& regions) {
  for (size_t i = 0; i < wrs.size(); ++i) {
    const RecvWorkRequest& wr = wrs[i];
    if (absl::Status st = CheckRecvRequest(wr, i); !st.ok()) return st;
    if (recvs_.size() >= max_wr_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("PostRecv: shared receive queue full (", max_wr_, " posted)"));
    }
    if (!LocalBuffersValid(regions, wr)) {
      return absl::InvalidArgumentError(
          absl::StrCat("PostRecv: request ", i,
                       " has a buffer outside every region registered for local "
                       "write under its lkey"));
    }
    recvs_.push_back(wr);
  }
  return absl::OkStatus();
}

RecvWorkRequest SrqState::Take() {
  RecvWorkRequest r = recvs_.front();
  recvs_.pop_front();
  CheckWatermark();
  return r;
}

absl::Status SrqState::ArmLimit(uint32_t limit) {
  if (limit > max_wr_) {
    return absl::InvalidArgumentError(
        absl::StrCat("ArmLimit: limit ", limit, " above max_wr ", max_wr_));
  }
  limit_ = limit;
  return absl::OkStatus();
}

bool SrqState::TakeLimitEvent() {
  const bool event = limit_event_;
  limit_event_ = false;
  return event;
}

void SrqState::CheckWatermark() {
  if (limit_ > 0 && recvs_.size() < limit_) {
    limit_event_ = true;
    limit_ = 0;
  }
}

}  // namespace unloadkv::rnic
