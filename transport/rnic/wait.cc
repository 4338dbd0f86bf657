#include "transport/rnic/wait.h"

#include <poll.h>

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace unloadkv::rnic {

void WaitForWork(Device& device, CompletionQueue& cq, absl::Duration max_wait,
                 absl::FunctionRef<bool()> poll_again) {
  if (device.event_fd() >= 0 || cq.notify_fd() < 0) {
    // Caller-driven (soft), or advancing only when progressed (sim): work appears while
    // someone progresses the device.
    device.Progress(max_wait);
    return;
  }
  cq.RequestNotify();
  if (poll_again()) return;  // a completion slipped in before the notification was armed
  pollfd fd{cq.notify_fd(), POLLIN, 0};
  ::poll(&fd, 1, static_cast<int>(absl::ToInt64Milliseconds(max_wait)) + 1);
}

absl::StatusOr<std::vector<WorkCompletion>> WaitForCompletions(Device& device, CompletionQueue& cq,
                                                               int count, absl::Duration timeout) {
  std::vector<WorkCompletion> out;
  out.reserve(count);
  const Clock& clock = device.clock();
  const absl::Time deadline = clock.Now() + timeout;
  WorkCompletion batch[16];
  while (static_cast<int>(out.size()) < count) {
    const int want = std::min<int>(16, count - static_cast<int>(out.size()));
    int n = cq.Poll(absl::MakeSpan(batch, want));
    if (n > 0) {
      out.insert(out.end(), batch, batch + n);
      continue;
    }
    const absl::Duration left = deadline - clock.Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat("waited ", absl::FormatDuration(timeout),
                                                      " for ", count, " completions, got ",
                                                      out.size()));
    }
    WaitForWork(device, cq, std::min(left, absl::Milliseconds(100)), [&] {
      n = cq.Poll(absl::MakeSpan(batch, want));
      out.insert(out.end(), batch, batch + std::max(n, 0));
      return n > 0;
    });
  }
  return out;
}

absl::StatusOr<WorkCompletion> WaitForCompletion(Device& device, CompletionQueue& cq,
                                                 absl::Duration timeout) {
  absl::StatusOr<std::vector<WorkCompletion>> wcs = WaitForCompletions(device, cq, 1, timeout);
  if (!wcs.ok()) return wcs.status();
  return wcs->front();
}

}  // namespace unloadkv::rnic
