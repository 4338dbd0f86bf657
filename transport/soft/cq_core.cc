#include "transport/soft/cq_core.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

namespace unloadkv::soft {

CqCore::CqCore() : efd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
CqCore::~CqCore() { close(efd_); }

void CqCore::PushAll(absl::Span<const rnic::WorkCompletion> wcs) {
  if (wcs.empty()) return;
  bool signal = false;
  {
    MutexLock l(&mu_);
    for (const rnic::WorkCompletion& wc : wcs) queue_.push_back(wc);
    signal = armed_;
    armed_ = false;
  }
  if (signal) {
    uint64_t one = 1;
    (void)!write(efd_, &one, sizeof(one));
  }
}

int CqCore::Poll(absl::Span<rnic::WorkCompletion> out) {
  MutexLock l(&mu_);
  size_t n = std::min(out.size(), queue_.size());
  for (size_t i = 0; i < n; ++i) {
    out[i] = queue_.front();
    queue_.pop_front();
  }
  return static_cast<int>(n);
}

void CqCore::RequestNotify() {
  uint64_t drained;
  (void)!read(efd_, &drained, sizeof(drained));
  MutexLock l(&mu_);
  armed_ = true;
}

}  // namespace unloadkv::soft
