// The software RNIC: RDMA reliable-connected semantics over TCP, for machines without RDMA
// hardware and for tests. Each device port listens on one TCP port; each connected QP pair
// uses one TCP stream between the two ports, dialed by one end, carrying both ends' requests
// and responses (docs/wire-soft.md).
//
// Target-side work (placing WRITEs, serving READs, delivering SENDs) happens in Progress(),
// which runs either on an internal thread (Options::progress_thread) or on the owner's event
// loop when event_fd() is readable. CompletionQueue::Poll drives Progress itself when it finds
// nothing (but with Options::wait_in_read or progress_on_empty_poll false), so a busy-polling
// caller needs no thread at all.
#ifndef UNLOADKV_TRANSPORT_SOFT_SOFT_DEVICE_H_
#define UNLOADKV_TRANSPORT_SOFT_SOFT_DEVICE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "transport/rnic/device.h"

namespace unloadkv::soft {

class Nic;

// Connection set-up limits. Connect never blocks: it starts the TCP dial and returns.
// An outbound stream's TCP connect gives up after this long (the QP goes to the error state).
inline constexpr absl::Duration kConnectTimeout = absl::Seconds(5);
// An inbound stream must send its HELLO within this long of being accepted, else it is closed.
inline constexpr absl::Duration kHelloTimeout = absl::Seconds(5);
// At most this many inbound streams may be waiting for their HELLO; a new one beyond it closes
// the oldest. Each holds a socket and, once it sent a byte, a 256 KiB read buffer.
inline constexpr size_t kMaxStreamsAwaitingHello = 256;
// Options::ports at most.
inline constexpr int kMaxPorts = 64;

class SoftDevice : public rnic::Device {
 public:
  struct Options {
    std::string listen_host = "127.0.0.1";  // numeric IPv4 address or "localhost"
    uint16_t listen_port = 0;               // 0 picks a free port
    bool progress_thread = false;           // run Progress on an internal thread
    // Hold back an ACK the peer asked for until this device's next request on the stream
    // carries it (the answer to that request, usually) or FlushDeferred: one packet less per
    // request and answer. Only for owners that call FlushDeferred after handling each batch
    // of completions (the write engine does); otherwise the ACK waits for the next Progress.
    bool defer_acks = false;
    // Like defer_acks, and FlushDeferred and Progress calls that do not wait leave the held
    // ACKs too: they go with the QP's next request, or before a Progress that may wait (its
    // owner is about to sleep), whichever comes first. For a caller-driven owner that issues
    // its next request right after the answer it waited for (the SDK's caller_progress):
    // that request carries the ACK of the answer, which would otherwise leave alone, in a
    // packet of its own, for every answer the peer asked an ACK for.
    bool hold_acks_until_wait = false;
    // A caller-driven device whose owner has one connection and nothing else to watch (the
    // SDK's caller_progress client): a Progress that may wait, with one stream and nothing
    // else pending (no QP in its handshake, no output queued), blocks in recv on that stream
    // instead of in epoll_wait, as a blocking client does on its socket: one system call per
    // wake-up, not two. Otherwise it waits as usual. And a CQ poll that finds nothing does not
    // progress the device (it would find nothing new, in one more system call, before the owner's
    // wait): the owner must progress it, by waits or by Progress calls that do not wait. The costs:
    // an Interrupt (or a completion pushed by another thread) does not end such a wait, which lasts
    // at most max_wait and 10 ms (the SDK passes 1 ms; a Progress that returns early with nothing
    // done is one any caller handles), so interruptible() is false; and a stream the peer dials
    // meanwhile is accepted by the next Progress that does not wait or that waits in epoll_wait
    // (while a QP is in its handshake every wait does). Timer work (a delayed ACK, an RNR retry)
    // runs around the wait, up to 1 ms late.
    bool wait_in_read = false;
    // A CQ poll that finds nothing progresses a caller-driven device once without waiting, so
    // that a busy-polling owner needs no other call. An owner that, whenever its poll finds
    // nothing, waits in Progress at once (the write engine's worker threads) sets this false:
    // the poll's epoll_wait would find only what the wait's finds, one system call earlier.
    // wait_in_read implies false.
    bool progress_on_empty_poll = true;
    // Ports (1..kMaxPorts): the first listens on listen_port, the others on free ports of the
    // same host; each has its own streams, epoll set, timer and progress (and its own thread
    // with progress_thread), and all share the device's registrations and windows
    // (rnic::Device::port). The write engine gives each worker a port of its own.
    int ports = 1;
    rnic::DeviceLimits limits;
  };

  // Opens the listening sockets. Fails with a clear status on a bad host, a busy port or a
  // number of ports out of range.
  static absl::StatusOr<std::unique_ptr<SoftDevice>> Create(const Options& options);
  ~SoftDevice() override;

  // "host:port" this device (port) listens on; appears in QpAttributes::address.
  std::string address() const;

  int port_count() const override;
  rnic::Device* port(int i) override;

  std::string transport() const override { return "soft"; }
  rnic::DeviceLimits limits() const override;
  absl::StatusOr<std::unique_ptr<rnic::MemoryRegion>> RegisterMemory(void* addr, size_t length,
                                                                     uint32_t access) override;
  absl::StatusOr<std::unique_ptr<rnic::MemoryWindow>> AllocateWindow() override;
  absl::StatusOr<std::unique_ptr<rnic::CompletionQueue>> CreateCompletionQueue(
      int capacity) override;
  absl::StatusOr<std::unique_ptr<rnic::QueuePair>> CreateQueuePair(
      const rnic::QpConfig& config) override;
  absl::StatusOr<std::unique_ptr<rnic::SharedReceiveQueue>> CreateSharedReceiveQueue(
      const rnic::SrqConfig& config) override;
  int event_fd() const override;
  int Progress(absl::Duration max_wait) override;
  bool interruptible() const override;  // caller-driven only: a thread has nothing to wake
  void Interrupt() override;
  void FlushDeferred() override;

  // Progress waits that blocked in recv on the device's one stream (Options::wait_in_read).
  uint64_t waits_in_read() const;

 private:
  explicit SoftDevice(std::shared_ptr<Nic> nic) : nic_(std::move(nic)) {}
  std::shared_ptr<Nic> nic_;
  std::vector<std::unique_ptr<SoftDevice>> ports_;  // ports 1.. (this one is port 0)
};

}  // namespace unloadkv::soft

#endif  // UNLOADKV_TRANSPORT_SOFT_SOFT_DEVICE_H_
