// Data path of the soft RNIC: posting, the progress loop, and frame handling on both the
// requester and the responder side. Everything here runs with Nic::mu_ held.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "transport/base/logging.h"
#include "transport/rnic/request_checks.h"
#include "transport/soft/nic.h"

namespace unloadkv::soft {
namespace {

constexpr size_t kReadBufferBytes = 256 * 1024;
constexpr size_t kDirectReadThreshold = 64 * 1024;
constexpr size_t kReadBudgetBytes = 4 * 1024 * 1024;  // per stream per Progress: fairness
constexpr int kMaxIov = 64;
// Unrequested ACKs wait at most this long, so unsignaled requests still retire. Requesters
// ask for an ACK often enough (kAckRequestInterval) that this is rarely what sends one.
constexpr absl::Duration kDelayedAck = absl::Milliseconds(5);
// A requester asks for an ACK at least every this many requests.
constexpr uint32_t kAckRequestInterval = 16;

// Serial-number comparison of 32-bit PSNs.
bool PsnLess(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) < 0; }
bool PsnLessEq(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) <= 0; }

FrameType FrameTypeOf(rnic::Opcode op) {
  switch (op) {
    case rnic::Opcode::kWrite:
      return FrameType::kWrite;
    case rnic::Opcode::kWriteWithImm:
      return FrameType::kWriteWithImm;
    case rnic::Opcode::kSend:
      return FrameType::kSend;
    case rnic::Opcode::kSendWithImm:
      return FrameType::kSendWithImm;
    case rnic::Opcode::kRead:
      return FrameType::kReadRequest;
  }
  return FrameType::kSend;
}

PayloadPlan PlaceNothing() { return PayloadPlan{}; }

PayloadPlan PlaceAt(uint64_t addr, uint64_t len) {
  PayloadPlan p;
  if (len > 0) {
    p.iov[0] = {reinterpret_cast<void*>(addr), static_cast<size_t>(len)};
    p.iovcnt = 1;
  }
  return p;
}

// Scatters `len` bytes over the SGEs of a receive or READ request.
template <typename Wr>
PayloadPlan PlaceInto(const Wr& wr, uint64_t len) {
  PayloadPlan p;
  for (int i = 0; i < wr.num_sge && len > 0; ++i) {
    uint64_t n = std::min<uint64_t>(len, wr.sg_list[i].length);
    if (n == 0) continue;
    p.iov[p.iovcnt++] = {reinterpret_cast<void*>(wr.sg_list[i].addr), static_cast<size_t>(n)};
    len -= n;
  }
  return p;
}

PayloadPlan Stall() {
  PayloadPlan p;
  p.kind = PayloadPlan::kStall;
  return p;
}

PayloadPlan Close() {
  PayloadPlan p;
  p.kind = PayloadPlan::kClose;
  return p;
}

}  // namespace

// ---------------------------------------------------------------------------- Stream

Stream::Stream(Nic* n, int f, bool out)
    : nic(n), fd(f), outbound(out), reader(this, n->limits().max_message_bytes) {}

Stream::~Stream() {
  if (fd >= 0) close(fd);
}

PayloadPlan Stream::OnHeader(const FrameHeader& h) {
  if (outbound) return nic->OnResponseHeader(this, h);
  if (qp == nullptr) return nic->OnHello(this, h);
  return nic->OnRequestHeader(this, h);
}

void Stream::OnFrame(const FrameHeader& h) {
  if (h.type == FrameType::kHello) return;
  if (outbound) {
    nic->OnResponseDone(this, h);
  } else {
    nic->OnRequestDone(this, h);
  }
}

// ---------------------------------------------------------------------------- output

void Nic::Enqueue(Stream* s, const FrameHeader& h, const char* payload, size_t payload_len,
                  bool copy_payload) {
  OutSegment& head = s->out.emplace_back();
  EncodeFrameHeader(h, head.inline_bytes);
  head.ptr = head.inline_bytes;
  head.len = kFrameHeaderSize;
  if (payload_len > 0) {
    OutSegment& body = s->out.emplace_back();
    if (copy_payload) {
      body.owned = std::make_unique<char[]>(payload_len);
      std::memcpy(body.owned.get(), payload, payload_len);
      body.ptr = body.owned.get();
    } else {
      body.ptr = payload;
    }
    body.len = payload_len;
  }
  if (!s->in_dirty) {
    s->in_dirty = true;
    dirty_.push_back(s);
  }
}

void Nic::EnqueueGather(Stream* s, const FrameHeader& h, const rnic::SendWorkRequest& wr) {
  Enqueue(s, h, nullptr, 0, false);
  if (wr.opcode == rnic::Opcode::kRead) return;
  for (int i = 0; i < wr.num_sge; ++i) {
    if (wr.sg_list[i].length == 0) continue;
    OutSegment& body = s->out.emplace_back();
    body.ptr = reinterpret_cast<const char*>(wr.sg_list[i].addr);
    body.len = wr.sg_list[i].length;
  }
}

void Nic::FlushStream(Stream* s) {
  if (s->dead) return;
  if (s->connecting) {
    // The dial may have completed since Progress last looked (loopback dials usually have):
    // check without waiting, so output need not wait for the next Progress.
    pollfd p{s->fd, POLLOUT, 0};
    if (::poll(&p, 1, 0) == 1) FinishConnect(s);  // flushes once connected
    return;
  }
  while (!s->out.empty()) {
    iovec iov[kMaxIov];
    int n = 0;
    for (auto it = s->out.begin(); it != s->out.end() && n < kMaxIov; ++it, ++n) {
      size_t skip = n == 0 ? s->out_front_offset : 0;
      iov[n] = {const_cast<char*>(it->ptr) + skip, it->len - skip};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = n;
    ssize_t sent = sendmsg(s->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (!s->want_write) {
          s->want_write = true;
          UpdateInterest(s);
        }
        return;
      }
      if (errno == EINTR) continue;
      if (s->draining) {
        FinishClose(s);
      } else {
        KillStream(s, rnic::WcStatus::kRetryExceeded,
                   absl::StrCat("send failed: ", std::strerror(errno)));
      }
      return;
    }
    size_t left = static_cast<size_t>(sent);
    while (left > 0) {
      OutSegment& front = s->out.front();
      size_t avail = front.len - s->out_front_offset;
      if (left >= avail) {
        left -= avail;
        s->out.pop_front();
        s->out_front_offset = 0;
      } else {
        s->out_front_offset += left;
        left = 0;
      }
    }
  }
  if (s->draining) {
    FinishClose(s);
    return;
  }
  if (s->want_write) {
    s->want_write = false;
    UpdateInterest(s);
  }
}

void Nic::FlushDirty() {
  // FlushStream may kill streams and add to dirty_; iterate by index over a stable copy.
  std::vector<Stream*> dirty;
  dirty.swap(dirty_);
  for (Stream* s : dirty) {
    s->in_dirty = false;
    if (!s->dead) FlushStream(s);
  }
}

void Nic::UpdateInterest(Stream* s) {
  if (s->dead) return;
  epoll_event ev{};
  ev.events = (s->reading_paused || s->draining ? 0 : EPOLLIN) | (s->want_write ? EPOLLOUT : 0);
  ev.data.ptr = s;
  epoll_ctl(epfd_, EPOLL_CTL_MOD, s->fd, &ev);
}

// ---------------------------------------------------------------------------- teardown

void Nic::CompleteSend(QpCore* qp, const Outstanding& o, rnic::WcStatus status) {
  if (status == rnic::WcStatus::kSuccess && !o.wr.signaled) return;
  rnic::WorkCompletion wc;
  wc.wr_id = o.wr.wr_id;
  wc.status = status;
  wc.opcode = rnic::CompletionOpcode(o.wr.opcode);
  wc.qp_num = qp->qp_num;
  if (o.wr.opcode == rnic::Opcode::kRead && status == rnic::WcStatus::kSuccess) {
    wc.byte_len = static_cast<uint32_t>(o.wr.TotalLength());
  }
  qp->send_cq->Push(wc);
}

void Nic::FailQp(QpCore* qp, rnic::WcStatus head_status, absl::string_view reason) {
  if (qp->state == rnic::QpState::kError) return;
  if (qp->state != rnic::QpState::kReset || !qp->outstanding.empty()) {
    // A peer that closes with nothing outstanding is an ordinary disconnect.
    Log(head_status == rnic::WcStatus::kFlushed || qp->outstanding.empty() ? LogLevel::kInfo
                                                                           : LogLevel::kWarning,
        absl::StrCat("soft qp ", qp->qp_num, " -> error: ", reason));
  }
  qp->state = rnic::QpState::kError;
  bool head = true;
  for (const Outstanding& o : qp->outstanding) {
    rnic::WcStatus st = o.local_error != rnic::WcStatus::kSuccess ? o.local_error
                        : head                                    ? head_status
                                                                  : rnic::WcStatus::kFlushed;
    CompleteSend(qp, o, st);
    head = false;
  }
  qp->outstanding.clear();
  for (const rnic::RecvWorkRequest& r : qp->recvs) {
    rnic::WorkCompletion wc;
    wc.wr_id = r.wr_id;
    wc.status = rnic::WcStatus::kFlushed;
    wc.opcode = rnic::WcOpcode::kRecv;
    wc.qp_num = qp->qp_num;
    qp->recv_cq->Push(wc);
  }
  qp->recvs.clear();
  if (qp->out_stream != nullptr) CloseStream(qp->out_stream, /*drain=*/true);
  if (qp->in_stream != nullptr) CloseStream(qp->in_stream, /*drain=*/true);
}

void Nic::KillStream(Stream* s, rnic::WcStatus head_status, absl::string_view reason) {
  if (s->dead || s->draining) return;
  if (s->qp != nullptr) {
    FailQp(s->qp, head_status, reason);
  } else {
    peer_log_.Log(LogLevel::kWarning, absl::StrCat("soft stream closed: ", reason));
  }
  if (!s->dead) FinishClose(s);  // a broken stream is not drained
}

void Nic::PeerClosed(Stream* s, absl::string_view reason) {
  QpCore* qp = s->qp;
  if (!s->outbound && qp != nullptr && qp->out_stream != nullptr && !qp->out_stream->dead &&
      !qp->out_stream->draining) {
    // The peer's request stream ended. Its answers to our requests travel on the other stream,
    // and that stream's end (a NAK, then EOF) decides how our outstanding work completes.
    FinishClose(s);
    return;
  }
  KillStream(s, rnic::WcStatus::kRetryExceeded, reason);
}

void Nic::CloseStream(Stream* s, bool drain) {
  if (s->dead) return;
  if (s->qp != nullptr) {
    if (s->qp->out_stream == s) s->qp->out_stream = nullptr;
    if (s->qp->in_stream == s) s->qp->in_stream = nullptr;
    s->qp = nullptr;
  }
  if (drain && !s->out.empty()) {
    s->draining = true;
    s->drain_deadline = absl::Now() + absl::Seconds(1);
    s->want_write = true;
    UpdateInterest(s);
    ArmStallTimer();
    return;
  }
  FinishClose(s);
}

void Nic::FinishClose(Stream* s) {
  if (s->dead) return;
  if (s->qp != nullptr) CloseStream(s, false);  // detaches, then re-enters here
  if (s->dead) return;
  s->dead = true;
  epoll_ctl(epfd_, EPOLL_CTL_DEL, s->fd, nullptr);
  close(s->fd);
  s->fd = -1;
  s->out.clear();
}

void Nic::Reap() {
  auto is_dead = [](Stream* s) { return s->dead; };
  dirty_.erase(std::remove_if(dirty_.begin(), dirty_.end(), is_dead), dirty_.end());
  stalled_.erase(std::remove_if(stalled_.begin(), stalled_.end(), is_dead), stalled_.end());
  streams_.erase(std::remove_if(streams_.begin(), streams_.end(),
                                [](const std::unique_ptr<Stream>& s) { return s->dead; }),
                 streams_.end());
}

// ---------------------------------------------------------------------------- posting

absl::Status Nic::PostSend(QpCore* qp, absl::Span<const rnic::SendWorkRequest> wrs) {
  MutexLock l(&mu_);
  if (qp->state == rnic::QpState::kReset) {
    return absl::FailedPreconditionError(
        absl::StrCat("PostSend: queue pair ", qp->qp_num, " is not connected"));
  }
  for (size_t i = 0; i < wrs.size(); ++i) {
    const rnic::SendWorkRequest& wr = wrs[i];
    if (absl::Status st = rnic::CheckSendRequest(wr, limits_, i); !st.ok()) {
      FlushDirty();
      return st;
    }
    if (qp->outstanding.size() >= qp->config.max_send_wr) {
      FlushDirty();
      return absl::ResourceExhaustedError(
          absl::StrCat("PostSend: send queue full (", qp->config.max_send_wr, " outstanding)"));
    }
    Outstanding o;
    o.wr = wr;
    if (qp->state == rnic::QpState::kError) {
      CompleteSend(qp, o, rnic::WcStatus::kFlushed);
      continue;
    }
    if (!rnic::LocalBuffersValid(regions_, wr)) {
      o.local_error = rnic::WcStatus::kLocalProtectionError;
    }
    if (o.local_error != rnic::WcStatus::kSuccess || qp->poisoned) {
      if (qp->outstanding.empty()) {
        CompleteSend(qp, o, o.local_error);
        FailQp(qp, rnic::WcStatus::kFlushed, "local protection error in a send request");
        continue;
      }
      qp->poisoned = true;
      qp->outstanding.push_back(o);
      continue;
    }
    o.psn = qp->next_psn++;
    FrameHeader h;
    h.type = FrameTypeOf(wr.opcode);
    h.psn = o.psn;
    h.imm = wr.imm;
    h.remote_addr = wr.remote_addr;
    h.rkey = wr.rkey;
    if (wr.opcode == rnic::Opcode::kRead) {
      h.aux = static_cast<uint32_t>(wr.TotalLength());
    } else {
      h.payload_len = static_cast<uint32_t>(wr.TotalLength());
      if (wr.signaled || o.psn - qp->last_ack_request_psn >= kAckRequestInterval ||
          qp->outstanding.size() + 1 >= qp->config.max_send_wr / 2) {
        h.aux = kAckRequested;
        qp->last_ack_request_psn = o.psn;
      }
    }
    EnqueueGather(qp->out_stream, h, wr);
    qp->outstanding.push_back(o);
  }
  FlushDirty();
  return absl::OkStatus();
}

absl::Status Nic::PostRecv(QpCore* qp, absl::Span<const rnic::RecvWorkRequest> wrs) {
  MutexLock l(&mu_);
  for (size_t i = 0; i < wrs.size(); ++i) {
    const rnic::RecvWorkRequest& wr = wrs[i];
    if (absl::Status st = rnic::CheckRecvRequest(wr, i); !st.ok()) return st;
    if (qp->recvs.size() >= qp->config.max_recv_wr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("PostRecv: receive queue full (", qp->config.max_recv_wr, " posted)"));
    }
    rnic::WorkCompletion wc;
    wc.wr_id = wr.wr_id;
    wc.opcode = rnic::WcOpcode::kRecv;
    wc.qp_num = qp->qp_num;
    if (qp->state == rnic::QpState::kError) {
      wc.status = rnic::WcStatus::kFlushed;
      qp->recv_cq->Push(wc);
      continue;
    }
    if (!rnic::LocalBuffersValid(regions_, wr)) {
      wc.status = rnic::WcStatus::kLocalProtectionError;
    }
    if (wc.status != rnic::WcStatus::kSuccess) {
      qp->recv_cq->Push(wc);
      FailQp(qp, rnic::WcStatus::kFlushed, "local protection error in a receive request");
      continue;
    }
    qp->recvs.push_back(wr);
  }
  if (qp->in_stream != nullptr && qp->in_stream->reading_paused) ResumeStream(qp->in_stream);
  FlushDirty();
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------- progress

int Nic::Progress(absl::Duration max_wait) {
  MutexLock progress(&progress_mu_);
  epoll_event events[64];
  int timeout_ms =
      max_wait <= absl::ZeroDuration()
          ? 0
          : static_cast<int>(std::min<int64_t>(
                absl::ToInt64Milliseconds(max_wait + absl::Microseconds(999)), 1 << 30));
  int n = epoll_wait(epfd_, events, 64, timeout_ms);
  MutexLock l(&mu_);
  for (int i = 0; i < n; ++i) {
    void* tag = events[i].data.ptr;
    if (tag == nullptr) {
      Accept();
      continue;
    }
    if (tag == &timer_fd_) {
      uint64_t expirations;
      (void)!read(timer_fd_, &expirations, sizeof(expirations));
      timer_deadline_ = absl::InfiniteFuture();
      CheckStalls();
      continue;
    }
    auto* s = static_cast<Stream*>(tag);
    if (s->dead) continue;
    if (s->connecting) {
      if (events[i].events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) FinishConnect(s);
      continue;
    }
    if (events[i].events & EPOLLOUT) FlushStream(s);
    if (!s->dead && !s->draining && (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
      ReadStream(s);
    }
  }
  FlushDirty();
  Reap();
  return std::max(n, 0);
}

void Nic::Accept() {
  for (;;) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto awaiting_hello = [](const Stream& s) {
      return !s.outbound && s.qp == nullptr && !s.dead && !s.draining;
    };
    size_t awaiting = 0;
    Stream* oldest = nullptr;
    for (const auto& t : streams_) {
      if (!awaiting_hello(*t)) continue;
      if (oldest == nullptr) oldest = t.get();
      ++awaiting;
    }
    if (awaiting >= kMaxStreamsAwaitingHello) {
      peer_log_.Log(
          LogLevel::kWarning,
          absl::StrCat("soft: ", awaiting, " inbound streams without a HELLO; closing the oldest"));
      FinishClose(oldest);
    }
    auto stream = std::make_unique<Stream>(this, fd, /*outbound=*/false);
    stream->handshake_deadline = absl::Now() + kHelloTimeout;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = stream.get();
    epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev);
    streams_.push_back(std::move(stream));
    ArmStallTimer();
  }
}

void Nic::FinishConnect(Stream* s) {
  int err = 0;
  socklen_t len = sizeof(err);
  if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
  if (err != 0) {
    const std::string peer = s->qp != nullptr ? s->qp->remote.address : "the peer";
    s->connecting = false;  // nothing was sent: close without draining
    KillStream(s, rnic::WcStatus::kRetryExceeded,
               absl::StrCat("no soft device answers at ", peer, ": ", std::strerror(err)));
    return;
  }
  s->connecting = false;
  s->handshake_deadline = absl::InfiniteFuture();
  FlushStream(s);
}

void Nic::ExpireHandshakes(absl::Time now) {
  for (const auto& t : streams_) {
    Stream* s = t.get();
    if (s->dead || s->handshake_deadline > now) continue;
    s->handshake_deadline = absl::InfiniteFuture();
    if (s->outbound) {
      const std::string peer = s->qp != nullptr ? s->qp->remote.address : "the peer";
      s->connecting = false;
      KillStream(s, rnic::WcStatus::kRetryExceeded,
                 absl::StrCat("no soft device answers at ", peer, " within ",
                              absl::FormatDuration(kConnectTimeout)));
      if (!s->dead) FinishClose(s);
    } else if (s->qp == nullptr) {
      peer_log_.Log(LogLevel::kInfo,
                    absl::StrCat("soft: an inbound stream sent no HELLO within ",
                                 absl::FormatDuration(kHelloTimeout), "; closing it"));
      FinishClose(s);
    }
  }
}

void Nic::ReadStream(Stream* s) {
  size_t budget = kReadBudgetBytes;
  while (!s->dead && !s->draining && !s->reading_paused && budget > 0) {
    absl::Span<char> direct = s->reader.DirectTarget();
    ssize_t got;
    if (s->rbeg == s->rend && direct.size() >= kDirectReadThreshold) {
      got = recv(s->fd, direct.data(), std::min(direct.size(), budget), MSG_DONTWAIT);
      if (got > 0) {
        s->reader.AdvanceDirect(static_cast<size_t>(got));
        budget -= std::min<size_t>(budget, got);
        continue;
      }
    } else {
      if (s->rbeg == s->rend) s->rbeg = s->rend = 0;
      if (s->rbuf.empty()) s->rbuf.resize(kReadBufferBytes);
      got = recv(s->fd, s->rbuf.data() + s->rend, s->rbuf.size() - s->rend, MSG_DONTWAIT);
      if (got > 0) {
        size_t room = s->rbuf.size() - s->rend;
        s->rend += static_cast<size_t>(got);
        budget -= std::min<size_t>(budget, got);
        FeedBuffered(s);
        // A short read drained the socket; level-triggered epoll reports anything newer.
        if (static_cast<size_t>(got) < room &&
            s->reader.DirectTarget().size() < kDirectReadThreshold) {
          break;
        }
        continue;
      }
    }
    if (got == 0) {
      PeerClosed(s, "peer closed the connection");
      return;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    if (errno == EINTR) continue;
    PeerClosed(s, absl::StrCat("receive failed: ", std::strerror(errno)));
    return;
  }
  if (!s->dead && s->ack_pending) AckOrDelay(s);
}

void Nic::FeedBuffered(Stream* s) {
  size_t consumed = 0;
  absl::Status st = s->reader.Feed(s->rbuf.data() + s->rbeg, s->rend - s->rbeg, &consumed);
  s->rbeg += consumed;
  if (!st.ok()) {
    KillStream(s, rnic::WcStatus::kRetryExceeded, absl::StrCat("bad frame: ", st.message()));
    return;
  }
  if (s->reader.stalled() && !s->reading_paused) {
    s->reading_paused = true;
    s->stall_since = absl::Now();
    UpdateInterest(s);
    stalled_.push_back(s);
    ArmStallTimer();
  }
  if (s->rbeg == s->rend) s->rbeg = s->rend = 0;
}

void Nic::ResumeStream(Stream* s) {
  if (s->dead || !s->reading_paused) return;
  s->reading_paused = false;
  s->reader.Resume();
  stalled_.erase(std::remove(stalled_.begin(), stalled_.end(), s), stalled_.end());
  FeedBuffered(s);
  if (!s->dead && !s->reading_paused) UpdateInterest(s);
  if (!s->dead && s->ack_pending) AckOrDelay(s);
}

void Nic::ArmStallTimer() {
  absl::Time earliest = absl::InfiniteFuture();
  for (Stream* s : stalled_) {
    if (s->dead || !s->reading_paused || s->qp == nullptr) continue;
    if (s->qp->state != rnic::QpState::kReadyToSend) continue;  // waits for Connect
    earliest = std::min(earliest, s->stall_since + s->qp->config.rnr_timeout);
  }
  for (const auto& s : streams_) {
    if (s->dead) continue;
    earliest = std::min(earliest, s->handshake_deadline);
    if (s->draining) earliest = std::min(earliest, s->drain_deadline);
    if (s->ack_pending) earliest = std::min(earliest, s->ack_deadline);
  }
  // Re-arming costs a system call: skip it when the armed deadline is already the earliest
  // (a timer firing early is harmless; CheckStalls re-arms for what is left).
  absl::Time now = absl::Now();
  if (earliest == timer_deadline_ || (earliest > timer_deadline_ && timer_deadline_ > now)) {
    return;
  }
  itimerspec spec{};
  if (earliest != absl::InfiniteFuture()) {
    spec.it_value = absl::ToTimespec(std::max(earliest - now, absl::Microseconds(20)));
  }
  timerfd_settime(timer_fd_, 0, &spec, nullptr);
  timer_deadline_ = earliest;
}

void Nic::CheckStalls() {
  absl::Time now = absl::Now();
  std::vector<Stream*> expired;
  for (Stream* s : stalled_) {
    if (s->dead || !s->reading_paused || s->qp == nullptr) continue;
    if (s->qp->state != rnic::QpState::kReadyToSend) continue;
    if (now - s->stall_since >= s->qp->config.rnr_timeout) expired.push_back(s);
  }
  for (Stream* s : expired) {
    Refuse(s, s->reader.pending_header(), rnic::WcStatus::kRnrRetryExceeded,
           "no receive posted within rnr_timeout");
  }
  ExpireHandshakes(now);
  for (const auto& s : streams_) {
    if (s->dead) continue;
    if (s->draining && now >= s->drain_deadline) {
      FinishClose(s.get());
    } else if (s->ack_pending && now >= s->ack_deadline) {
      SendAck(s.get());
    }
  }
  ArmStallTimer();
}

void Nic::AckOrDelay(Stream* s) {
  if (s->ack_now) {
    SendAck(s);
  } else if (s->ack_deadline == absl::InfiniteFuture()) {
    s->ack_deadline = absl::Now() + kDelayedAck;
    ArmStallTimer();
  }
}

void Nic::SendAck(Stream* s) {
  FrameHeader ack;
  ack.type = FrameType::kAck;
  ack.psn = s->expected_psn - 1;
  Enqueue(s, ack, nullptr, 0, false);
  s->ack_pending = false;
  s->ack_now = false;
  s->ack_deadline = absl::InfiniteFuture();
}

// ---------------------------------------------------------------------------- responder

PayloadPlan Nic::OnHello(Stream* s, const FrameHeader& h) {
  if (h.type != FrameType::kHello) {
    peer_log_.Log(LogLevel::kWarning, "soft: inbound stream did not start with HELLO; closing it");
    return Close();
  }
  auto it = qps_.find(h.rkey);
  if (it == qps_.end() || it->second->state == rnic::QpState::kError ||
      it->second->in_stream != nullptr) {
    peer_log_.Log(LogLevel::kWarning,
                  absl::StrCat("soft: HELLO for QP ", h.rkey, " which does not exist or is taken"));
    return Close();
  }
  QpCore* qp = it->second.get();
  if (qp->state == rnic::QpState::kReadyToSend && qp->remote.qp_num != h.aux) {
    peer_log_.Log(LogLevel::kWarning,
                  absl::StrCat("soft: HELLO from QP ", h.aux, " but QP ", qp->qp_num,
                               " is connected to ", qp->remote.qp_num));
    return Close();
  }
  s->qp = qp;
  s->handshake_deadline = absl::InfiniteFuture();
  s->expected_psn = h.psn;
  qp->in_stream = s;
  qp->in_stream_src_qp = h.aux;
  return PlaceNothing();
}

PayloadPlan Nic::Refuse(Stream* s, const FrameHeader& h, rnic::WcStatus status,
                        absl::string_view reason) {
  FrameHeader nak;
  nak.type = FrameType::kNak;
  nak.psn = h.psn;
  nak.aux = static_cast<uint32_t>(status);
  if (s->ack_pending) SendAck(s);
  Enqueue(s, nak, nullptr, 0, false);
  QpCore* qp = s->qp;
  if (qp != nullptr) {
    FailQp(qp, rnic::WcStatus::kFlushed,
           absl::StrCat("refused request psn ", h.psn, " (", rnic::WcStatusName(status),
                        "): ", reason));
  }
  return Close();
}

PayloadPlan Nic::OnRequestHeader(Stream* s, const FrameHeader& h) {
  QpCore* qp = s->qp;
  if (!IsRequest(h.type)) {
    KillStream(s, rnic::WcStatus::kRetryExceeded,
               absl::StrCat("frame type ", static_cast<int>(h.type), " on a request stream"));
    return Close();
  }
  if (qp->state == rnic::QpState::kReset) return Stall();  // peer was quicker than Connect
  if (qp->state == rnic::QpState::kError) return Close();
  if (h.psn != s->expected_psn) {
    KillStream(s, rnic::WcStatus::kRetryExceeded,
               absl::StrCat("request psn ", h.psn, ", expected ", s->expected_psn));
    return Close();
  }
  switch (h.type) {
    case FrameType::kWrite:
    case FrameType::kWriteWithImm: {
      rnic::AccessVerdict v =
          regions_.Check(h.rkey, h.remote_addr, h.payload_len, rnic::kRemoteWrite);
      if (v != rnic::AccessVerdict::kOk) {
        return Refuse(
            s, h, rnic::WcStatus::kRemoteAccessError,
            absl::StrCat("WRITE rkey 0x", absl::Hex(h.rkey), " addr 0x", absl::Hex(h.remote_addr),
                         " len ", h.payload_len, ": ", rnic::AccessVerdictName(v)));
      }
      if (h.type == FrameType::kWriteWithImm && qp->recvs.empty()) return Stall();
      return PlaceAt(h.remote_addr, h.payload_len);
    }
    case FrameType::kSend:
    case FrameType::kSendWithImm: {
      if (qp->recvs.empty()) return Stall();
      const rnic::RecvWorkRequest& r = qp->recvs.front();
      if (h.payload_len > r.TotalLength()) {
        rnic::WorkCompletion wc;
        wc.wr_id = r.wr_id;
        wc.status = rnic::WcStatus::kLocalLengthError;
        wc.opcode = rnic::WcOpcode::kRecv;
        wc.qp_num = qp->qp_num;
        qp->recvs.pop_front();
        qp->recv_cq->Push(wc);
        return Refuse(s, h, rnic::WcStatus::kRemoteInvalidRequest,
                      absl::StrCat("SEND of ", h.payload_len, " bytes into a ", r.TotalLength(),
                                   "-byte receive"));
      }
      return PlaceInto(r, h.payload_len);
    }
    case FrameType::kReadRequest: {
      rnic::AccessVerdict v = regions_.Check(h.rkey, h.remote_addr, h.aux, rnic::kRemoteRead);
      if (v != rnic::AccessVerdict::kOk) {
        return Refuse(
            s, h, rnic::WcStatus::kRemoteAccessError,
            absl::StrCat("READ rkey 0x", absl::Hex(h.rkey), " addr 0x", absl::Hex(h.remote_addr),
                         " len ", h.aux, ": ", rnic::AccessVerdictName(v)));
      }
      return PlaceNothing();
    }
    default:
      return Close();
  }
}

void Nic::OnRequestDone(Stream* s, const FrameHeader& h) {
  QpCore* qp = s->qp;
  ++s->expected_psn;
  switch (h.type) {
    case FrameType::kWrite:
      break;
    case FrameType::kWriteWithImm:
    case FrameType::kSend:
    case FrameType::kSendWithImm: {
      rnic::WorkCompletion wc;
      wc.wr_id = qp->recvs.front().wr_id;
      wc.opcode = h.type == FrameType::kWriteWithImm ? rnic::WcOpcode::kRecvRdmaWithImm
                                                     : rnic::WcOpcode::kRecv;
      wc.byte_len = h.payload_len;
      wc.has_imm = h.type != FrameType::kSend;
      wc.imm = wc.has_imm ? h.imm : 0;
      wc.qp_num = qp->qp_num;
      qp->recvs.pop_front();
      qp->recv_cq->Push(wc);
      break;
    }
    case FrameType::kReadRequest: {
      // The response acknowledges every earlier request implicitly.
      FrameHeader resp;
      resp.type = FrameType::kReadResponse;
      resp.psn = h.psn;
      resp.payload_len = h.aux;
      Enqueue(s, resp, reinterpret_cast<const char*>(h.remote_addr), h.aux, /*copy=*/true);
      return;
    }
    default:
      return;
  }
  s->ack_pending = true;
  if (h.aux & kAckRequested) s->ack_now = true;
}

// ---------------------------------------------------------------------------- requester

void Nic::CompleteAckedThrough(QpCore* qp, uint32_t psn, bool inclusive) {
  while (!qp->outstanding.empty()) {
    const Outstanding& o = qp->outstanding.front();
    if (o.local_error != rnic::WcStatus::kSuccess) {
      FailQp(qp, rnic::WcStatus::kFlushed, "local protection error in a send request");
      return;
    }
    if (inclusive ? !PsnLessEq(o.psn, psn) : !PsnLess(o.psn, psn)) break;
    if (o.wr.opcode == rnic::Opcode::kRead) break;  // completes on its response only
    CompleteSend(qp, o, rnic::WcStatus::kSuccess);
    qp->outstanding.pop_front();
  }
  // A poisoned request now at the head fails the QP without waiting for more responses.
  if (!qp->outstanding.empty() && qp->outstanding.front().local_error != rnic::WcStatus::kSuccess) {
    FailQp(qp, rnic::WcStatus::kFlushed, "local protection error in a send request");
  }
}

PayloadPlan Nic::OnResponseHeader(Stream* s, const FrameHeader& h) {
  QpCore* qp = s->qp;
  if (qp == nullptr || qp->state == rnic::QpState::kError) return Close();
  if (!IsResponse(h.type)) {
    KillStream(s, rnic::WcStatus::kRetryExceeded,
               absl::StrCat("frame type ", static_cast<int>(h.type), " on a response stream"));
    return Close();
  }
  if (h.type != FrameType::kReadResponse) return PlaceNothing();
  CompleteAckedThrough(qp, h.psn, /*inclusive=*/false);
  if (qp->state == rnic::QpState::kError) return Close();
  if (qp->outstanding.empty() || qp->outstanding.front().psn != h.psn ||
      qp->outstanding.front().wr.opcode != rnic::Opcode::kRead ||
      qp->outstanding.front().wr.TotalLength() != h.payload_len) {
    KillStream(s, rnic::WcStatus::kRetryExceeded,
               absl::StrCat("READ response psn ", h.psn, " matches no outstanding READ"));
    return Close();
  }
  return PlaceInto(qp->outstanding.front().wr, h.payload_len);
}

void Nic::OnResponseDone(Stream* s, const FrameHeader& h) {
  QpCore* qp = s->qp;
  if (qp == nullptr) return;
  switch (h.type) {
    case FrameType::kAck:
      if (!qp->outstanding.empty() && qp->outstanding.front().wr.opcode == rnic::Opcode::kRead &&
          PsnLessEq(qp->outstanding.front().psn, h.psn)) {
        KillStream(s, rnic::WcStatus::kRetryExceeded, "ACK covers an unanswered READ");
        return;
      }
      CompleteAckedThrough(qp, h.psn, /*inclusive=*/true);
      return;
    case FrameType::kNak:
      CompleteAckedThrough(qp, h.psn, /*inclusive=*/false);
      FailQp(qp, static_cast<rnic::WcStatus>(h.aux),
             absl::StrCat("peer refused request psn ", h.psn, ": ",
                          rnic::WcStatusName(static_cast<rnic::WcStatus>(h.aux))));
      return;
    case FrameType::kReadResponse:
      CompleteSend(qp, qp->outstanding.front(), rnic::WcStatus::kSuccess);
      qp->outstanding.pop_front();
      CompleteAckedThrough(qp, h.psn, /*inclusive=*/true);
      return;
    default:
      return;
  }
}

}  // namespace unloadkv::soft
