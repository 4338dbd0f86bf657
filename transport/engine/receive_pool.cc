#include "transport/engine/receive_pool.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "transport/base/logging.h"

namespace unloadkv::engine {

absl::StatusOr<std::unique_ptr<ReceivePool>> ReceivePool::Create(rnic::Device& device,
                                                                 const Options& o) {
  const uint64_t capacity = uint64_t{o.connections} * o.reserve + o.shared;
  const uint32_t max_wr = device.limits().max_qp_wr;
  if (o.buffer_bytes == 0 || o.reserve == 0 || capacity > max_wr) {
    return absl::InvalidArgumentError(absl::StrCat(
        o.name, ": ", o.connections, " connections x ", o.reserve, " reserved + ", o.shared,
        " shared = ", capacity, " receive buffers per worker; the device's shared receive ",
        "queue holds at most ", max_wr, ": serve fewer connections per worker"));
  }
  std::unique_ptr<ReceivePool> p(new ReceivePool(o, static_cast<uint32_t>(capacity)));
  absl::StatusOr<std::unique_ptr<LazyRegion>> region = LazyRegion::Create(
      device, p->capacity_, o.buffer_bytes, rnic::kLocalWrite, o.huge_pages, o.modeled_huge_pages);
  if (!region.ok()) {
    return absl::ResourceExhaustedError(absl::StrCat(o.name, ": ", region.status().message()));
  }
  p->region_ = std::move(*region);
  rnic::SrqConfig sc;
  sc.max_wr = p->capacity_;
  absl::StatusOr<std::unique_ptr<rnic::SharedReceiveQueue>> srq =
      device.CreateSharedReceiveQueue(sc);
  if (!srq.ok()) return srq.status();
  p->srq_ = std::move(*srq);
  return p;
}

ReceivePool::~ReceivePool() = default;

absl::Status ReceivePool::PostOne() {
  if (spare_posted_ > 0) {
    --spare_posted_;
    return absl::OkStatus();
  }
  uint32_t index;
  if (!free_.empty()) {
    index = free_.back();
    free_.pop_back();
  } else if (untouched_ < capacity_) {
    index = untouched_++;
  } else {
    // Units never exceed buffers (capacity = connections x reserve + shared).
    return absl::InternalError(absl::StrCat(options_.name, ": no buffer left to post"));
  }
  absl::Status st = region_->Prepare(index);
  if (st.ok()) st = Renew(index);
  if (!st.ok()) free_.push_back(index);
  return st;
}

absl::Status ReceivePool::Admit() {
  MutexLock l(&mu_);
  if (admitted_ >= options_.connections) {
    return absl::ResourceExhaustedError(
        absl::StrCat(options_.name, ": ", admitted_,
                     " connections hold receive buffers, the most this worker "
                     "admits (max_connections_per_worker)"));
  }
  for (uint32_t k = 0; k < options_.reserve; ++k) {
    if (absl::Status st = PostOne(); !st.ok()) {
      spare_posted_ += k;  // what was posted stays, backing nothing
      return st;
    }
  }
  ++admitted_;
  return absl::OkStatus();
}

bool ReceivePool::Borrow() {
  MutexLock l(&mu_);
  if (lent_ >= options_.shared) return false;
  if (absl::Status st = PostOne(); !st.ok()) {
    Log(LogLevel::kWarning, absl::StrCat(options_.name, ": lending a buffer: ", st.message()));
    return false;
  }
  ++lent_;
  return true;
}

absl::Status ReceivePool::Renew(absl::Span<const uint32_t> indices) const {
  rnic::RecvWorkRequest wrs[32];
  while (!indices.empty()) {
    const size_t n = std::min(indices.size(), std::size(wrs));
    for (size_t k = 0; k < n; ++k) {
      wrs[k] = rnic::MakeRecv(options_.wr_id_base | indices[k],
                              region_->Sge(indices[k], options_.buffer_bytes));
    }
    if (absl::Status st = srq_->PostRecv(absl::MakeConstSpan(wrs, n)); !st.ok()) return st;
    indices.remove_prefix(n);
  }
  return absl::OkStatus();
}

void ReceivePool::Return(uint32_t index) {
  MutexLock l(&mu_);
  free_.push_back(index);
  if (lent_ > 0) --lent_;
}

void ReceivePool::Recycle(uint32_t index) {
  if (absl::Status st = Renew(index); !st.ok()) {
    Log(LogLevel::kWarning,
        absl::StrCat(options_.name, ": reposting buffer ", index, ": ", st.message()));
    // Only a dead device refuses; the buffer waits in the free list (the unit it backed is
    // short of a posted buffer until the device, and with it every connection, is gone).
    MutexLock l(&mu_);
    free_.push_back(index);
  }
}

void ReceivePool::Release(uint32_t n) {
  MutexLock l(&mu_);
  spare_posted_ += n;
  lent_ -= n < lent_ ? n : lent_;
}

void ReceivePool::Leave(uint32_t posted, absl::Span<const uint32_t> held, uint32_t borrowed) {
  MutexLock l(&mu_);
  spare_posted_ += posted;
  for (uint32_t index : held) free_.push_back(index);
  lent_ -= borrowed < lent_ ? borrowed : lent_;
  if (admitted_ > 0) --admitted_;
}

ReceivePool::Usage ReceivePool::usage() const {
  MutexLock l(&mu_);
  return {admitted_, lent_, untouched_,
          std::min(capacity_, region_->chunks_registered() * LazyRegion::kChunkItems)};
}

}  // namespace unloadkv::engine
