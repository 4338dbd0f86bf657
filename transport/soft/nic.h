// Internal state of the soft RNIC, shared by the control path (soft_device.cc: set-up, QPs,
// Connect) and the data path: stream_io.cc (frames in and out of TCP), qp_handshake.cc
// (CONNECT, CONNECT_ACK, DISCONNECT), requester.cc (posting, responses, RNR retries),
// responder.cc (requests, refusals, ACKs), progress.cc (the event loop and its timer),
// qp_teardown.cc (errors, closing); the CQ is cq_core.h; what a device's ports share is
// domain.h. Not part of the public interface.
#ifndef UNLOADKV_TRANSPORT_SOFT_NIC_H_
#define UNLOADKV_TRANSPORT_SOFT_NIC_H_

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/time/time.h"
#include "transport/base/logging.h"
#include "transport/base/mapped_memory.h"
#include "transport/base/mutex.h"
#include "transport/base/ring_queue.h"
#include "transport/rnic/completion_queue.h"
#include "transport/rnic/device.h"
#include "transport/rnic/key_source.h"
#include "transport/rnic/queue_pair.h"
#include "transport/rnic/region_table.h"
#include "transport/rnic/srq_state.h"
#include "transport/soft/cq_core.h"
#include "transport/soft/domain.h"
#include "transport/soft/frame_reader.h"
#include "transport/soft/soft_device.h"

namespace unloadkv::soft {

struct QpCore;

// A run of output bytes: a header held inline, or bytes held elsewhere (a request's SGE, a
// READ response's copy). `owner` is the QP whose request the segment belongs to (null for
// responses and set-up frames): a QP that fails takes its unsent requests off the stream.
struct OutSegment {
  const char* data() const { return is_inline ? inline_bytes : ptr; }

  const char* ptr = nullptr;
  size_t len = 0;
  bool is_inline = false;  // the bytes are inline_bytes
  char inline_bytes[kMaxFrameHeaderSize];
  std::unique_ptr<char[]> owned;  // a copy: READ response data, or a purged frame's rest
  QpCore* owner = nullptr;
  bool frame_start = false;  // the first segment of a frame
};

// A TCP connection between this device and a peer device (docs/wire-soft.md). It carries the
// requests and responses of every QP pair attached to it, each frame naming its QPs.
// Outbound: this device dialed it (and sent the HELLO) and is the dialing end of its QP pairs.
// Inbound: the peer dialed it; QPs attach to it as the peer's CONNECTs name them.
struct Stream : public FrameSink {
  Stream(class Nic* nic, int fd, bool outbound);
  ~Stream() override;

  PayloadPlan OnHeader(const FrameHeader& h) override;
  void OnFrame(const FrameHeader& h) override;

  Nic* nic;
  int fd;
  bool outbound;
  std::string peer;       // outbound: the address dialed (its key in Nic::outbound_)
  bool hello_seen;        // inbound: the HELLO arrived (outbound: true)
  bool dead = false;      // closed; freed at the end of the current Progress
  bool draining = false;  // closing: no more input, flushing what is queued (a DISCONNECT)
  // Draining, all output sent and our side shut down: input is read and dropped until the
  // peer closes (or the drain deadline), so that closing never resets a connection whose peer
  // is still sending (a reset can destroy the NAK we sent before the peer reads it).
  bool lingering = false;
  bool in_dirty = false;  // listed in Nic::dirty_
  // Outbound: the TCP connect has not completed yet (output waits for it).
  bool connecting = false;
  // Outbound while connecting: when the dial gives up. Inbound while no QP is attached: when
  // the stream is closed unless a QP attaches. InfiniteFuture() otherwise.
  absl::Time handshake_deadline = absl::InfiniteFuture();
  absl::Time drain_deadline;
  size_t attached = 0;  // QPs whose `stream` is this one
  // The QP of the frame whose payload is being placed (between OnHeader and OnFrame).
  QpCore* current = nullptr;
  FrameReader reader;
  // Mapped on the first read (a silent stream holds none); reads restart at its start whenever
  // it drains, so only the pages that bursts of input reached are resident.
  std::unique_ptr<MappedMemory> rbuf;
  size_t rbeg = 0, rend = 0;
  RingQueue<OutSegment> out;
  size_t out_front_offset = 0;
  bool want_write = false;
  // Options::wait_in_read. The socket is in blocking mode (every other call on it passes
  // MSG_DONTWAIT) and its SO_RCVTIMEO in microseconds (-1: never set).
  bool blocking = false;
  int64_t recv_timeout_us = -1;
  // A Progress is blocked in recv on `fd` without mu_: closing it then shuts the socket down
  // (which ends the recv) and leaves the close to that Progress (close_by_reader), so the
  // number cannot be reused under it.
  bool reading_unlocked = false;
  bool close_by_reader = false;
};

// A send request between post and completion.
struct Outstanding {
  rnic::SendWorkRequest wr;
  uint32_t psn = 0;
  bool ack_requested = false;  // its frame asks for an immediate ACK
  // Set when the request failed a local check at post time; it is never sent, and completes
  // with this status once every earlier request has completed.
  rnic::WcStatus local_error = rnic::WcStatus::kSuccess;
};

// A shared receive queue's receives and the QPs drawing from it; guarded by Nic::mu_.
struct SrqCore {
  explicit SrqCore(const rnic::SrqConfig& config) : state(config) {}
  rnic::SrqState state;
};

struct QpCore {
  uint32_t qp_num = 0;
  rnic::QpConfig config;
  std::shared_ptr<CqCore> send_cq, recv_cq;
  rnic::QpState state = rnic::QpState::kReset;
  rnic::QpAttributes remote;
  uint32_t first_psn = 0;
  uint32_t next_psn = 0;
  // The stream to the peer's device the pair uses: the dialing end attaches at Connect, the
  // other when the peer's CONNECT arrives. Null before, and once the QP failed.
  Stream* stream = nullptr;
  bool dials = false;    // set by Connect: this end sends the CONNECT
  uint32_t peer_qp = 0;  // the peer's QP number, once Connect or a CONNECT named it
  // The connect token a CONNECT carried when it came before this end's Connect (checked then).
  std::string offered_token;
  bool established = false;  // CONNECT and CONNECT_ACK exchanged: requests may be sent
  // Connected but not established: fails unless the handshake completes by then.
  absl::Time peer_deadline = absl::InfiniteFuture();
  RingQueue<Outstanding> outstanding;
  RingQueue<rnic::RecvWorkRequest> recvs;  // without an SRQ
  // With an SRQ: the receive taken from it for the request being placed (taken at its header,
  // so that no other QP's request uses it too), until that request is done.
  std::shared_ptr<SrqCore> srq;
  std::optional<rnic::RecvWorkRequest> taken;
  bool poisoned = false;  // a local_error request is queued: send nothing more
  uint32_t last_ack_request_psn = 0;
  // The rkey and PSN of the WRITE whose payload is being placed (key 0: none). Invalidating
  // that key ends it: the rest is dropped and the WRITE refused.
  uint32_t placing_key = 0;
  uint32_t placing_psn = 0;

  // Responder state.
  uint32_t expected_psn = 0;    // PSN of the next request
  bool rnr_dropping = false;    // an RNR NAK went out for expected_psn: drop until it comes again
  bool ack_pending = false;     // requests processed since the last ACK
  bool ack_now = false;         // one of them asked for an immediate ACK
  bool in_ack_soon = false;     // listed in Nic::ack_soon_
  bool in_ack_touched = false;  // listed in Nic::ack_touched_
  absl::Time ack_deadline = absl::InfiniteFuture();  // delayed ACK due

  // Requester state after an RNR NAK: nothing is sent until rnr_retry_at, then every
  // outstanding request from rnr_psn again. Fails once rnr_since + rnr_timeout passes.
  bool rnr_wait = false;
  uint32_t rnr_psn = 0;
  bool rnr_seen = false;  // rnr_psn/rnr_since/rnr_backoff describe an RNR episode
  absl::Time rnr_since;
  absl::Time rnr_retry_at = absl::InfiniteFuture();
  absl::Duration rnr_backoff;
};

// One port's state (a device has one Nic per port, SoftDevice::Options::ports). Every field is
// guarded by mu_ but the Domain, which the ports share; handles hold a shared_ptr so any
// destruction order is safe.
class Nic : public std::enable_shared_from_this<Nic> {
 public:
  Nic(int listen_fd, std::string address, rnic::DeviceLimits limits, bool thread_mode,
      bool defer_acks, bool hold_acks_until_wait, bool wait_in_read, bool progress_on_empty_poll,
      std::shared_ptr<Domain> domain);
  ~Nic();

  void StartThread();
  void StopThread();

  // Control path (soft_device.cc).
  absl::StatusOr<uint32_t> Register(void* addr, size_t length, uint32_t access);
  void Deregister(uint32_t key);
  // Memory windows: `handle` is the rnic::MemoryWindow that bind requests name.
  void AddWindow(const rnic::MemoryWindow* handle, WindowCore* window);
  void RemoveWindow(const rnic::MemoryWindow* handle, WindowCore* window);
  absl::StatusOr<QpCore*> CreateQp(const rnic::QpConfig& config, std::shared_ptr<CqCore> scq,
                                   std::shared_ptr<CqCore> rcq, std::shared_ptr<SrqCore> srq);
  absl::Status PostSrqRecv(SrqCore* srq, absl::Span<const rnic::RecvWorkRequest> wrs);
  absl::Status ArmSrqLimit(SrqCore* srq, uint32_t limit);
  bool TakeSrqLimitEvent(SrqCore* srq);
  void DestroyQp(QpCore* qp);
  absl::Status Connect(QpCore* qp, const rnic::QpAttributes& remote);
  rnic::QpState StateOf(const QpCore* qp);
  void SetError(QpCore* qp);

  // Data path (requester.cc: posting; progress.cc: Progress).
  absl::Status PostSend(QpCore* qp, absl::Span<const rnic::SendWorkRequest> wrs);
  absl::Status PostRecv(QpCore* qp, absl::Span<const rnic::RecvWorkRequest> wrs);
  int Progress(absl::Duration max_wait) ABSL_LOCKS_EXCLUDED(mu_, progress_mu_);
  // Progress without waiting, unless another thread is progressing (then 0 at once: a CQ
  // polled while a driver sleeps in epoll_wait must not wait for it).
  int TryProgress() ABSL_LOCKS_EXCLUDED(mu_, progress_mu_);
  // Sends the ACKs held back (Options::defer_acks) that no request carried.
  void FlushDeferred() ABSL_LOCKS_EXCLUDED(mu_);

  // Wakes a caller-driven Progress waiting in epoll_wait (it returns early). Thread-safe.
  void Interrupt();

  int epoll_fd() const { return epfd_; }
  bool thread_mode() const { return thread_mode_; }
  bool wait_in_read() const { return wait_in_read_; }
  bool progress_on_empty_poll() const { return progress_on_empty_poll_; }
  uint64_t waits_in_read() const { return waits_in_read_.load(std::memory_order_relaxed); }
  const std::string& address() const { return address_; }
  const rnic::DeviceLimits& limits() const { return limits_; }

 private:
  friend struct Stream;

  // Data-path helpers; all require mu_.
  void Accept() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int ProgressHeld(absl::Duration max_wait) ABSL_EXCLUSIVE_LOCKS_REQUIRED(progress_mu_)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Options::wait_in_read: waits up to `max_wait` (> 0) in recv on the device's one stream
  // and handles what it read, as ProgressHeld would. Returns -1, having done nothing, when
  // the device is not in that state (SoleStream).
  int WaitInRead(absl::Duration max_wait) ABSL_EXCLUSIVE_LOCKS_REQUIRED(progress_mu_)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The one stream a wait may block in recv on: the only live stream, connected, with QPs
  // on it, nothing queued to send, not closing; no QP anywhere in its handshake (a peer's
  // dial must be accepted) and no wake-up pending. Null otherwise.
  Stream* SoleStream() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The timer's work, when its deadline passed, as its expiry in epoll_wait would run it.
  void RunTimersIfDue() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a Progress handled its events: ACKs of what it read, output flushed, closed streams
  // freed.
  void EndProgress() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The live outbound stream to `address`, dialing one (and queuing its HELLO) if there is
  // none.
  absl::StatusOr<Stream*> StreamTo(const std::string& address) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An outbound stream's connect finished (it became writable or failed).
  void FinishConnect(Stream* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails QPs and closes streams whose handshake deadline passed.
  void ExpireHandshakes(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReadStream(Stream* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `got` bytes (> 0) were read into the stream's read buffer at rend: hands them to the
  // frame reader. Returns whether the socket may hold more (the read filled the buffer's
  // room, or a large payload waits for a direct read): ReadStream goes on.
  bool AbsorbBuffered(Stream* s, size_t got, size_t room) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Maps the stream's read buffer if it has none and restarts it at its start when it is
  // drained; false (the stream killed) if it cannot be mapped.
  bool PrepareReadBuffer(Stream* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FeedBuffered(Stream* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A lingering stream's input: read and dropped; closes it at the peer's end of stream.
  void DropInput(Stream* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FlushStream(Stream* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FlushDirty() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateInterest(Stream* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues a frame; `owner` marks a request of that QP (see OutSegment).
  void Enqueue(Stream* s, const FrameHeader& h, const char* payload, size_t payload_len,
               bool copy_payload, QpCore* owner = nullptr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EnqueueGather(Stream* s, const FrameHeader& h, const rnic::SendWorkRequest& wr,
                     QpCore* owner) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues a frame of `qp`'s pair with no payload: `type` from qp to its peer QP.
  void EnqueueControl(QpCore* qp, FrameType type, uint32_t psn = 0, uint32_t aux = 0)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes `qp`'s requests that have not started leaving off its stream; the one partly sent
  // goes on, its bytes copied (their buffers are the caller's again once the QP failed).
  void PurgeRequests(Stream* s, QpCore* qp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues the frame of request `o` on the QP's stream.
  void EnqueueRequest(QpCore* qp, const Outstanding& o) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends every outstanding request of `qp` not known to have arrived, in order (after the
  // handshake, or again after an RNR NAK).
  void SendOutstanding(QpCore* qp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The listening end has the peer's CONNECT and is connected: acknowledges it and starts.
  void Establish(QpCore* qp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendAck(QpCore* qp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The receive the request being placed for `qp` uses (from the QP's queue, or taken from
  // its SRQ), or null when none is posted.
  const rnic::RecvWorkRequest* ReceiveFor(QpCore* qp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes and returns the receive ReceiveFor returned.
  rnic::RecvWorkRequest ConsumeReceive(QpCore* qp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Memory windows (windows.cc). A bind or an invalidation, done at post: kSuccess or why not.
  rnic::WcStatus BindWindow(QpCore* qp, const rnic::WindowBind& bind)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  rnic::WcStatus InvalidateWindow(QpCore* qp, uint32_t key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The local operation `o` of `qp` at post: done and completed.
  void PostLocalOp(QpCore* qp, const Outstanding& o) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends the ACKs in ack_soon_ still owed, and empties it.
  void SendOwedAcks() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a batch of requests read from a stream: for each QP they were for, ACK now if
  // asked to, else schedule a delayed ACK.
  void AckTouched() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AckOrDelay(QpCore* qp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Timer work: delayed ACKs, RNR retries, handshake and drain deadlines.
  void CheckTimers() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Arms the timer for the earliest deadline of every stream and QP (a scan of them all).
  void ArmStallTimer() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One new deadline: re-arms only when it is earlier than the armed one. A later one needs
  // nothing: the armed timer fires first and its CheckTimers rescans (ArmStallTimer), so a
  // request's delayed ACK costs no scan of every QP (which, with thousands of them, took 12%
  // of a kvserver's CPU at 1000 connections).
  void ArmTimerFor(absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Closes the stream (no flush) and fails every QP on it with `head_status` for its oldest
  // outstanding request, as a NIC that lost its link. `reason` is logged.
  void KillStream(Stream* s, rnic::WcStatus head_status, absl::string_view reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The peer closed `s` or it broke.
  void PeerClosed(Stream* s, absl::string_view reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves `qp` to the error state: its work completes (the head with `head_status`), it
  // leaves its stream, and, with `tell_peer`, a DISCONNECT tells the peer QP (not needed
  // when the peer's NAK or DISCONNECT, or a broken stream, is why). `owner` marks the QP
  // owner's own teardown (SetError, DestroyQp): with nothing outstanding nothing is lost, and
  // no line is logged (a client closing is not news on its stderr).
  void FailQp(QpCore* qp, rnic::WcStatus head_status, absl::string_view reason,
              bool tell_peer = true, bool owner = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes `qp` off its stream; the stream closes once its last QP leaves (outbound) or waits
  // kHelloTimeout for another (inbound).
  void Detach(QpCore* qp, bool tell_peer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Closes the stream; with `drain`, queued output (a NAK, a DISCONNECT) is sent first, for
  // at most one second. Every QP must have left it.
  void CloseStream(Stream* s, bool drain) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishClose(Stream* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A closing outbound stream is no longer the one StreamTo hands out.
  void ForgetOutbound(Stream* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Reap() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CompleteAckedThrough(QpCore* qp, uint32_t psn, bool inclusive)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CompleteSend(QpCore* qp, const Outstanding& o, rnic::WcStatus status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Pushes `wc` to `cq`. Inside a Progress it is held until EndProgress pushes what the pass
  // completed, in order, a CQ's run under one acquisition of its lock (one per completion
  // before: the largest of a pipelined request's locks in the soft RNIC). Pushed outside a
  // Progress (a post that fails at once, a QP failed from another thread), it goes at once and
  // also wakes a caller-driven owner waiting in Progress: nothing on the network would.
  void Deliver(const std::shared_ptr<CqCore>& cq, const rnic::WorkCompletion& wc)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Pushes the completions Deliver held during a Progress.
  void PushDelivered() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The QP a frame on `s` is for: it exists, is attached to `s`, is ready to send and paired
  // with the frame's source QP. Null otherwise (the frame is dropped: a QP that failed or
  // went away meanwhile, or a peer naming a QP it has no pair with).
  QpCore* QpFor(Stream* s, const FrameHeader& h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frame handlers, called from Stream's FrameSink methods.
  PayloadPlan OnRequestHeader(Stream* s, const FrameHeader& h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Its WRITE / SEND cases, and the RNR NAK for a request that found no receive.
  PayloadPlan OnWriteHeader(Stream* s, QpCore* qp, const FrameHeader& h)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  PayloadPlan OnSendHeader(Stream* s, QpCore* qp, const FrameHeader& h)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  PayloadPlan NotReady(QpCore* qp, const FrameHeader& h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnRequestDone(QpCore* qp, const FrameHeader& h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  PayloadPlan OnResponseHeader(Stream* s, const FrameHeader& h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnResponseDone(QpCore* qp, const FrameHeader& h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnRnrNak(QpCore* qp, const FrameHeader& h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // QP set-up frames (qp_handshake.cc).
  PayloadPlan OnConnect(Stream* s, const FrameHeader& h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends DISCONNECT for a CONNECT from `src_qp` to `qp` on `s` that is refused for `why`.
  void RefuseConnect(Stream* s, uint32_t qp, uint32_t src_qp, absl::string_view why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  PayloadPlan OnConnectAck(Stream* s, const FrameHeader& h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  PayloadPlan OnDisconnect(Stream* s, const FrameHeader& h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Refuses the request `h` of `qp` with `status`: NAK to the requester, then fail the QP.
  PayloadPlan Refuse(QpCore* qp, const FrameHeader& h, rnic::WcStatus status,
                     absl::string_view reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Serializes Progress calls, so that events fetched by epoll_wait (outside mu_) refer to
  // streams that are still allocated: streams are freed only by Reap, inside Progress. It is
  // held across epoll_wait on purpose, and the cost is that a second thread calling Progress
  // queues behind the first for up to its max_wait. Two epoll_waits on one epoll fd would each
  // see readiness the other consumes, so there is nothing to gain from letting them overlap.
  // Engine workers progress only when their CQ is empty, for at most 1 ms (rnic::WaitForWork),
  // so a worker queues behind another for at most that; an event loop passes 0.
  Mutex progress_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  Mutex mu_;
  const int listen_fd_;
  const int epfd_;
  const int timer_fd_;
  // Thread mode: stops the progress thread. Caller-driven: in the epoll set, written by
  // Interrupt and Deliver to end a Progress's wait.
  const int wake_fd_;
  const std::string address_;
  const rnic::DeviceLimits limits_;
  const bool thread_mode_;
  const bool defer_acks_;  // SoftDevice::Options::defer_acks, or hold_acks_until_wait (which
                           // holds them longer still)
  const bool hold_acks_until_wait_;  // SoftDevice::Options::hold_acks_until_wait
  const bool wait_in_read_;          // SoftDevice::Options::wait_in_read (caller-driven)
  // SoftDevice::Options::progress_on_empty_poll, false with wait_in_read.
  const bool progress_on_empty_poll_;
  // Interrupt was called and its eventfd write not read yet: a wait in recv would miss it.
  std::atomic<bool> wake_pending_{false};
  std::atomic<uint64_t> waits_in_read_{0};
  std::atomic<bool> acks_owed_{false};  // ack_soon_ may be non-empty
  // Lines a remote peer can trigger at will (bad streams, late HELLOs): at most one a second.
  ThrottledLog peer_log_{absl::Seconds(1)};
  std::thread thread_;
  std::atomic<bool> stop_{false};

  // Regions, windows and QP numbers, shared with the device's other ports (domain.h).
  const std::shared_ptr<Domain> domain_;
  absl::flat_hash_map<uint32_t, std::unique_ptr<QpCore>> qps_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Stream>> streams_ ABSL_GUARDED_BY(mu_);
  // Live (not draining) outbound streams by the address dialed.
  absl::flat_hash_map<std::string, Stream*> outbound_ ABSL_GUARDED_BY(mu_);
  std::vector<Stream*> dirty_ ABSL_GUARDED_BY(mu_);        // streams with output to flush
  std::vector<Stream*> dirty_spare_ ABSL_GUARDED_BY(mu_);  // FlushDirty's, empty between
  // defer_acks: QPs owing an ACK their peer asked for, held back for FlushDeferred (or the
  // next Progress) unless a request of ours carries it first.
  std::vector<QpCore*> ack_soon_ ABSL_GUARDED_BY(mu_);
  // QPs that received requests in the read under way (ReadStream), for AckTouched.
  std::vector<QpCore*> ack_touched_ ABSL_GUARDED_BY(mu_);
  absl::Time timer_deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  // A Progress is handling events (between its epoll_wait and its return).
  bool in_progress_ ABSL_GUARDED_BY(mu_) = false;
  // Completions delivered by the Progress under way (Deliver), in order, as runs of one CQ
  // each (the run holds its CQ: a QP reaped in the pass may hold the last reference).
  struct DeliveredRun {
    std::shared_ptr<CqCore> cq;
    size_t count = 0;
  };
  std::vector<DeliveredRun> delivered_runs_ ABSL_GUARDED_BY(mu_);
  std::vector<rnic::WorkCompletion> delivered_ ABSL_GUARDED_BY(mu_);
};

}  // namespace unloadkv::soft

#endif  // UNLOADKV_TRANSPORT_SOFT_NIC_H_
