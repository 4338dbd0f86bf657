// The soft RNIC's progress loop: epoll events dispatched to streams, new connections
// accepted, dials finished, and the timer for RNR retries, delayed ACKs and handshake
// deadlines.
#include <fcntl.h>
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
#include "transport/soft/datapath_util.h"
#include "transport/soft/nic.h"

namespace unloadkv::soft {

int Nic::Progress(absl::Duration max_wait) {
  MutexLock progress(&progress_mu_);
  return ProgressHeld(max_wait);
}

int Nic::TryProgress() {
  if (!progress_mu_.TryLock()) return 0;
  const int n = ProgressHeld(absl::ZeroDuration());
  progress_mu_.Unlock();
  return n;
}

int Nic::ProgressHeld(absl::Duration max_wait) {
  epoll_event events[64];
  int timeout_ms =
      max_wait <= absl::ZeroDuration()
          ? 0
          : static_cast<int>(std::min<int64_t>(
                absl::ToInt64Milliseconds(max_wait + absl::Microseconds(999)), 1 << 30));
  if (acks_owed_.load(std::memory_order_acquire) && (timeout_ms > 0 || !hold_acks_until_wait_)) {
    MutexLock l(&mu_);  // an owner that did not flush: they go before this waits
    SendOwedAcks();
    FlushDirty();
  }
  if (wait_in_read_ && timeout_ms > 0) {
    if (const int n = WaitInRead(max_wait); n >= 0) return n;
  }
  int n = epoll_wait(epfd_, events, 64, timeout_ms);
  MutexLock l(&mu_);
  in_progress_ = true;
  for (int i = 0; i < n; ++i) {
    void* tag = events[i].data.ptr;
    if (tag == nullptr) {
      Accept();
      continue;
    }
    if (tag == &wake_fd_) {
      wake_pending_.store(false, std::memory_order_relaxed);  // before the read: a later
      uint64_t count;                                         // Interrupt sets it again
      (void)!read(wake_fd_, &count, sizeof(count));
      continue;
    }
    if (tag == &timer_fd_) {
      uint64_t expirations;
      (void)!read(timer_fd_, &expirations, sizeof(expirations));
      timer_deadline_ = absl::InfiniteFuture();
      CheckTimers();
      continue;
    }
    auto* s = static_cast<Stream*>(tag);
    if (s->dead) continue;
    if (s->connecting) {
      if (events[i].events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) FinishConnect(s);
      continue;
    }
    if (events[i].events & EPOLLOUT) FlushStream(s);
    if (!s->dead && s->lingering && (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
      DropInput(s);
    } else if (!s->dead && !s->draining && (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
      ReadStream(s);
    }
  }
  EndProgress();
  return std::max(n, 0);
}

void Nic::RunTimersIfDue() {
  if (absl::Now() < timer_deadline_) return;
  timer_deadline_ = absl::InfiniteFuture();
  CheckTimers();
}

void Nic::EndProgress() {
  PushDelivered();
  AckTouched();
  FlushDirty();
  Reap();
  in_progress_ = false;
}

Stream* Nic::SoleStream() {
  if (wake_pending_.load(std::memory_order_relaxed) || !dirty_.empty()) return nullptr;
  Stream* sole = nullptr;
  for (const auto& s : streams_) {
    if (s->dead) continue;
    if (sole != nullptr) return nullptr;
    sole = s.get();
  }
  if (sole == nullptr || sole->connecting || sole->draining || sole->want_write ||
      !sole->out.empty() || sole->attached == 0 ||
      sole->handshake_deadline != absl::InfiniteFuture()) {
    return nullptr;
  }
  for (const auto& [num, qp] : qps_) {
    if (qp->peer_deadline != absl::InfiniteFuture()) return nullptr;
  }
  return sole;
}

// A wait in recv ends at most this late after an Interrupt it cannot see (callers wait again).
constexpr absl::Duration kMaxWaitInRead = absl::Milliseconds(10);

int Nic::WaitInRead(absl::Duration max_wait) {
  int fd;
  char* into;
  size_t room;
  Stream* s;
  {
    MutexLock l(&mu_);
    RunTimersIfDue();  // first: the timerfd is not watched
    FlushDirty();
    const absl::Time now = absl::Now();
    s = SoleStream();
    if (s == nullptr || !PrepareReadBuffer(s)) return -1;
    room = s->rbuf->size() - s->rend;
    if (room < kMaxFrameHeaderSize) return -1;  // a frame's rest waits to be consumed
    // Whole milliseconds, as epoll_wait's, so that the timeout is set once, not per wait
    // (the SDK's: always 1 ms). A timer due sooner cuts it to its millisecond: the timer's
    // work (a delayed ACK, an RNR retry) runs up to 1 ms late, never early.
    const absl::Duration wait = std::min({max_wait, timer_deadline_ - now, kMaxWaitInRead});
    const int64_t us = absl::ToInt64Milliseconds(wait + absl::Microseconds(999)) * 1000;
    if (!s->blocking) {
      const int flags = fcntl(s->fd, F_GETFL);
      if (flags < 0 || fcntl(s->fd, F_SETFL, flags & ~O_NONBLOCK) != 0) return -1;
      s->blocking = true;
    }
    if (s->recv_timeout_us != us) {
      timeval tv{static_cast<time_t>(us / 1000000), static_cast<suseconds_t>(us % 1000000)};
      if (setsockopt(s->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0) return -1;
      s->recv_timeout_us = us;
    }
    fd = s->fd;
    into = s->rbuf->data() + s->rend;
    // Never a payload's final place (DirectTarget): another thread may deregister that
    // memory while this recv runs without mu_. The read buffer is the stream's own.
    s->reading_unlocked = true;
  }
  waits_in_read_.fetch_add(1, std::memory_order_relaxed);
  const ssize_t got = recv(fd, into, room, 0);
  const int err = errno;
  MutexLock l(&mu_);
  s->reading_unlocked = false;
  in_progress_ = true;
  if (s->close_by_reader) {
    close(fd);  // closed meanwhile (FinishClose): what was read goes with it
  } else if (s->draining) {
    // Closing since (CloseStream from another thread): input is dropped, as DropInput does,
    // and the epoll path finishes the close.
    if (got == 0 && s->lingering) FinishClose(s);
  } else if (got > 0) {
    if (AbsorbBuffered(s, static_cast<size_t>(got), room)) ReadStream(s);
  } else if (got == 0) {
    PeerClosed(s, "peer closed the connection");
  } else if (err != EAGAIN && err != EWOULDBLOCK && err != EINTR) {
    PeerClosed(s, absl::StrCat("receive failed: ", std::strerror(err)));
  }
  RunTimersIfDue();
  EndProgress();
  return got > 0 ? 1 : 0;
}

void Nic::Interrupt() {
  wake_pending_.store(true, std::memory_order_relaxed);
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
}

void Nic::Deliver(const std::shared_ptr<CqCore>& cq, const rnic::WorkCompletion& wc) {
  if (!in_progress_) {
    cq->Push(wc);
    if (!thread_mode_) Interrupt();
    return;
  }
  if (delivered_runs_.empty() || delivered_runs_.back().cq != cq) {
    delivered_runs_.push_back({cq, 0});
  }
  ++delivered_runs_.back().count;
  delivered_.push_back(wc);
}

void Nic::PushDelivered() {
  size_t first = 0;
  for (const DeliveredRun& run : delivered_runs_) {
    run.cq->PushAll(absl::MakeConstSpan(delivered_).subspan(first, run.count));
    first += run.count;
  }
  delivered_runs_.clear();
  delivered_.clear();
}

void Nic::Accept() {
  for (;;) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto awaiting_hello = [](const Stream& s) {
      return !s.outbound && s.attached == 0 && !s.dead && !s.draining;
    };
    size_t awaiting = 0;
    Stream* oldest = nullptr;
    for (const auto& t : streams_) {
      if (!awaiting_hello(*t)) continue;
      if (oldest == nullptr) oldest = t.get();
      ++awaiting;
    }
    if (awaiting >= kMaxStreamsAwaitingHello) {
      peer_log_.Log(LogLevel::kWarning,
                    absl::StrCat("soft: ", awaiting,
                                 " inbound streams without a connected QP; closing the oldest"));
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
    s->connecting = false;  // nothing was sent: close without draining
    KillStream(s, rnic::WcStatus::kRetryExceeded,
               absl::StrCat("no soft device answers at ", s->peer, ": ", std::strerror(err)));
    return;
  }
  s->connecting = false;
  s->handshake_deadline = absl::InfiniteFuture();
  FlushStream(s);
}

void Nic::ExpireHandshakes(absl::Time now) {
  std::vector<QpCore*> late;
  for (const auto& [num, qp] : qps_) {
    if (qp->peer_deadline <= now) late.push_back(qp.get());
  }
  for (QpCore* qp : late) {
    FailQp(
        qp, rnic::WcStatus::kRetryExceeded,
        absl::StrCat("the QP at ", qp->remote.address, " did not complete the connection within ",
                     absl::FormatDuration(kConnectTimeout)));
  }
  for (size_t i = 0; i < streams_.size(); ++i) {
    Stream* s = streams_[i].get();
    if (s->dead || s->handshake_deadline > now) continue;
    s->handshake_deadline = absl::InfiniteFuture();
    if (s->outbound) {
      s->connecting = false;
      KillStream(s, rnic::WcStatus::kRetryExceeded,
                 absl::StrCat("no soft device answers at ", s->peer, " within ",
                              absl::FormatDuration(kConnectTimeout)));
    } else if (s->attached == 0) {
      peer_log_.Log(LogLevel::kInfo,
                    absl::StrCat("soft: an inbound stream connected no QP within ",
                                 absl::FormatDuration(kHelloTimeout), "; closing it"));
      FinishClose(s);
    }
  }
}

void Nic::ArmStallTimer() {
  absl::Time earliest = absl::InfiniteFuture();
  for (const auto& [num, qp] : qps_) {
    earliest = std::min({earliest, qp->peer_deadline, qp->ack_deadline, qp->rnr_retry_at});
  }
  for (const auto& s : streams_) {
    if (s->dead) continue;
    earliest = std::min(earliest, s->handshake_deadline);
    if (s->draining) earliest = std::min(earliest, s->drain_deadline);
  }
  // Re-arming costs a system call: skip it when the armed deadline is already the earliest
  // (a timer firing early is harmless; CheckTimers re-arms for what is left).
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

void Nic::ArmTimerFor(absl::Time deadline) {
  if (deadline >= timer_deadline_) return;
  itimerspec spec{};
  spec.it_value = absl::ToTimespec(std::max(deadline - absl::Now(), absl::Microseconds(20)));
  timerfd_settime(timer_fd_, 0, &spec, nullptr);
  timer_deadline_ = deadline;
}

void Nic::CheckTimers() {
  absl::Time now = absl::Now();
  std::vector<QpCore*> due;
  for (const auto& [num, qp] : qps_) {
    if (qp->stream == nullptr) continue;
    if (qp->ack_pending && now >= qp->ack_deadline) SendAck(qp.get());
    if (qp->rnr_wait && now >= qp->rnr_retry_at) due.push_back(qp.get());
  }
  for (QpCore* qp : due) {
    qp->rnr_wait = false;
    qp->rnr_retry_at = absl::InfiniteFuture();
    if (now - qp->rnr_since >= qp->config.rnr_timeout) {
      FailQp(qp, rnic::WcStatus::kRnrRetryExceeded,
             absl::StrCat("request psn ", qp->rnr_psn, " found no receive within rnr_timeout (",
                          absl::FormatDuration(qp->config.rnr_timeout), ")"));
    } else {
      SendOutstanding(qp);
    }
  }
  ExpireHandshakes(now);
  for (size_t i = 0; i < streams_.size(); ++i) {
    Stream* s = streams_[i].get();
    if (!s->dead && s->draining && now >= s->drain_deadline) FinishClose(s);
  }
  ArmStallTimer();
}

}  // namespace unloadkv::soft
