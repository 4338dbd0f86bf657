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
  const Clock& clock = device.clock();
  const absl::Time deadline = clock.Now() + timeout;
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
    absl::Duration left = deadline - clock.Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat("waited ", absl::FormatDuration(timeout),
                                                      " for ", count, " completions, got ",
                                                      out.size()));
    }
    absl::Duration slice = std::min(left, absl::Milliseconds(100));
    if (device.event_fd() >= 0) {
      // Caller-driven device: completions only appear while someone progresses it.
      device.Progress(slice);
    } else if (cq.notify_fd() >= 0) {
      pollfd fd{cq.notify_fd(), POLLIN, 0};
      ::poll(&fd, 1, static_cast<int>(absl::ToInt64Milliseconds(slice)) + 1);
    } else {
      // A backend with neither (sim) advances when progressed.
      device.Progress(slice);
    }
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
