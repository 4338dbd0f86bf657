#include "transport/rnic/wait.h"

#include <poll.h>

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace unloadkv::rnic {

absl::StatusOr<std::vector<WorkCompletion>> WaitForCompletions(Device& device, CompletionQueue& cq,
                                                               int count, absl::Duration timeout) {
  std::vector<WorkCompletion> out;
  out.reserve(count);
  const absl::Time deadline = absl::Now() + timeout;
  WorkCompletion batch[16];
  while (static_cast<int>(out.size()) < count) {
    int want = std::min<int>(16, count - static_cast<int>(out.size()));
    int n = cq.Poll(absl::MakeSpan(batch, want));
    if (n > 0) {
      out.insert(out.end(), batch, batch + n);
      continue;
    }
    cq.RequestNotify();
    n = cq.Poll(absl::MakeSpan(batch, want));
    if (n > 0) {
      out.insert(out.end(), batch, batch + n);
      continue;
    }
    absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat("waited ", absl::FormatDuration(timeout),
                                                      " for ", count, " completions, got ",
                                                      out.size()));
    }
    pollfd fds[2];
    int nfds = 0;
    if (cq.notify_fd() >= 0) fds[nfds++] = {cq.notify_fd(), POLLIN, 0};
    if (device.event_fd() >= 0) fds[nfds++] = {device.event_fd(), POLLIN, 0};
    // Without fds (hardware-less backends) fall back to short sleeps between polls.
    int ms = static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 100));
    if (nfds == 0) ms = 0;
    ::poll(fds, nfds, ms);
    device.Progress();
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
