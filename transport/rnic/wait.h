// Waiting for a device's completions. WaitForWork is the one wait of every thread that owns a
// CQ, the engine's workers included (it is how a worker sleeps when idle); WaitForCompletion(s)
// are blocking helpers for tests, benchmarks and tools. Each blocks the calling thread, so none
// may run inside an event loop that must not block.
#ifndef UNLOADKV_TRANSPORT_RNIC_WAIT_H_
#define UNLOADKV_TRANSPORT_RNIC_WAIT_H_

#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "transport/rnic/completion_queue.h"
#include "transport/rnic/device.h"

namespace unloadkv::rnic {

// Waits at most `max_wait` for new work on `cq`, the way `device` wants to be waited on: a
// caller-driven device (event_fd() >= 0) and a device with neither fd (sim) are progressed for
// up to `max_wait`; otherwise the CQ's notification is armed, `poll_again` runs (true: work
// arrived before the sleep, so skip it), and the thread sleeps on the CQ's notify fd. The one
// place that knows how to wait for a device: the engine's workers, Engine::Drive and the
// blocking helpers below use it. May block; never call it where blocking is not allowed.
void WaitForWork(Device& device, CompletionQueue& cq, absl::Duration max_wait,
                 absl::FunctionRef<bool()> poll_again);

// Waits until `count` completions have been polled from `cq` or `timeout` passes, sleeping in
// poll(2) on the CQ's notify fd and the device's event fd rather than spinning. Returns the
// completions (fewer than `count` only with a DeadlineExceeded error naming how many arrived).
absl::StatusOr<std::vector<WorkCompletion>> WaitForCompletions(Device& device, CompletionQueue& cq,
                                                               int count, absl::Duration timeout);

// Like WaitForCompletions(count = 1).
absl::StatusOr<WorkCompletion> WaitForCompletion(Device& device, CompletionQueue& cq,
                                                 absl::Duration timeout);

}  // namespace unloadkv::rnic

#endif  // UNLOADKV_TRANSPORT_RNIC_WAIT_H_
