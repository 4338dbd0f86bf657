// An RDMA device: the factory for memory regions, completion queues and queue pairs.
#ifndef UNLOADKV_TRANSPORT_RNIC_DEVICE_H_
#define UNLOADKV_TRANSPORT_RNIC_DEVICE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "transport/base/clock.h"
#include "transport/rnic/completion_queue.h"
#include "transport/rnic/memory_region.h"
#include "transport/rnic/memory_window.h"
#include "transport/rnic/queue_pair.h"
#include "transport/rnic/shared_receive_queue.h"

namespace unloadkv::rnic {

struct DeviceLimits {
  uint64_t max_message_bytes = 1ull << 30;  // largest single request, bytes
  uint32_t max_qp_wr = 16384;               // max_send_wr / max_recv_wr / SRQ max_wr bound
  int max_cqe = INT32_MAX;                  // entries one completion queue holds at most
  int max_sge = kMaxSge;
  // Host memory the device's own buffers may take per peer device its QPs connect to, bytes
  // (the soft RNIC's stream read buffers, shared by every QP pair between the two devices; 0
  // where the NIC buffers in its own memory). Informational.
  uint64_t host_bytes_per_peer = 0;
};

// The state of a device's page-translation cache (a NIC's MTT cache), a hint for its peers'
// path policies (docs/engine.md, "The per-target model"): kFull once it holds as many
// translations as it can, so that its misses now are those of its working set and not of
// warming up; kWarming before that; kUnknown where the device exposes nothing (verbs, soft).
enum class TranslationCacheState : uint8_t { kUnknown, kWarming, kFull };

// Thread-safety: all methods may be called from any thread. Objects created by a device must be
// destroyed before it. The device never owns registered memory.
class Device {
 public:
  virtual ~Device() = default;

  // Backend name as used in QpAttributes::transport ("soft", "sim", "verbs").
  virtual std::string transport() const = 0;
  virtual DeviceLimits limits() const = 0;
  // This device's translation cache now (cheap; a hint, stale as soon as read). Default: kUnknown.
  virtual TranslationCacheState translation_cache_state() const {
    return TranslationCacheState::kUnknown;
  }

  // The device's ports: devices that share its memory registrations and windows (a key from
  // any port is valid on every port, as the ports of one NIC share its protection domain),
  // each with its own QPs, CQs, SRQs and progress (event_fd, Progress, Interrupt,
  // FlushDeferred), so that threads driving different ports share nothing on the data path.
  // A QP's CQs and SRQ must be its port's. port(0) is this device; the others are owned by
  // it; port(i) is null outside 0..port_count()-1. Default: one port.
  virtual int port_count() const { return 1; }
  virtual Device* port(int i) { return i == 0 ? this : nullptr; }

  // Registers [addr, addr+length) with `access` (Access bits). The memory must stay valid until
  // the returned region is destroyed. Fails on a null address, zero length, or unknown bits.
  virtual absl::StatusOr<std::unique_ptr<MemoryRegion>> RegisterMemory(void* addr, size_t length,
                                                                       uint32_t access) = 0;

  // An unbound type-2 memory window of this device (memory_window.h). Fails when the device
  // has none left (verbs: ENOMEM) or supports none.
  virtual absl::StatusOr<std::unique_ptr<MemoryWindow>> AllocateWindow() = 0;

  // `capacity` is a sizing hint: backends without a hard limit may hold more.
  virtual absl::StatusOr<std::unique_ptr<CompletionQueue>> CreateCompletionQueue(int capacity) = 0;

  virtual absl::StatusOr<std::unique_ptr<QueuePair>> CreateQueuePair(const QpConfig& config) = 0;

  // InvalidArgument when max_wr or limit is out of range (limit <= max_wr).
  virtual absl::StatusOr<std::unique_ptr<SharedReceiveQueue>> CreateSharedReceiveQueue(
      const SrqConfig& config) = 0;

  // Progress contract. Hardware devices make progress on their own: event_fd() is -1 and
  // Progress returns 0 at once. Software devices may be caller-driven: then event_fd() becomes
  // readable when there is network work, and the owner calls Progress, which waits up to
  // `max_wait` for such work, does what is ready, and returns how many events it handled.
  // An event loop passes absl::ZeroDuration() (never blocks); a dedicated waiting thread may
  // pass more. CompletionQueue::Poll on such a device calls Progress(ZeroDuration()) itself
  // when it finds nothing, so busy-polling needs no extra step.
  virtual int event_fd() const { return -1; }

  // The time base of this device: real time, or virtual time on the simulated fabric. Deadlines
  // of code that waits on the device (WaitForCompletions) are measured on it.
  virtual const Clock& clock() const { return *RealClock::Get(); }

  virtual int Progress(absl::Duration max_wait) { return 0; }

  // Waking a caller-driven owner. Interrupt makes a Progress that is waiting (or the next one,
  // if none is) return early, from any thread. A device whose waits it can end says so with
  // interruptible(); an owner may then wait long in Progress and rely on Interrupt to stop
  // it, and on the device to end the wait itself when a completion appears without network
  // work (a post that fails at once, a QP failed by another thread). Elsewhere waits end only
  // at max_wait, so owners keep them short.
  virtual bool interruptible() const { return false; }
  virtual void Interrupt() {}
  // Sends what the device held back to combine with later output of its own (the soft RNIC's
  // ACKs with Options::defer_acks). An owner that handles completions in batches (the write
  // engine) calls it after each batch, so what it posted meanwhile carries those. Default:
  // nothing held back.
  virtual void FlushDeferred() {}
};

}  // namespace unloadkv::rnic

#endif  // UNLOADKV_TRANSPORT_RNIC_DEVICE_H_
