// The soft RNIC's progress loop: epoll events dispatched to streams, new connections
// accepted, dials finished, and the timer for RNR waits, delayed ACKs and handshake deadlines.
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
  if (acks_owed_.load(std::memory_order_acquire)) {
    MutexLock l(&mu_);  // an owner that did not flush: they go before this waits
    SendOwedAcks();
    FlushDirty();
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
      uint64_t count;
      (void)!read(wake_fd_, &count, sizeof(count));
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
  in_progress_ = false;
  return std::max(n, 0);
}

void Nic::Interrupt() {
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
}

void Nic::Deliver(CqCore& cq, const rnic::WorkCompletion& wc) {
  cq.Push(wc);
  if (!in_progress_ && !thread_mode_) Interrupt();
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
  std::vector<uint32_t> still;
  for (uint32_t num : awaiting_peer_) {
    auto it = qps_.find(num);
    if (it == qps_.end()) continue;
    QpCore* qp = it->second.get();
    if (qp->peer_deadline == absl::InfiniteFuture()) continue;
    if (qp->peer_deadline > now) {
      still.push_back(num);
      continue;
    }
    FailQp(qp, rnic::WcStatus::kRetryExceeded,
           absl::StrCat("the soft device at ", qp->remote.address, " did not dial in within ",
                        absl::FormatDuration(kConnectTimeout)));
  }
  awaiting_peer_.swap(still);
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

void Nic::ArmStallTimer() {
  absl::Time earliest = absl::InfiniteFuture();
  for (Stream* s : stalled_) {
    if (s->dead || !s->reading_paused || s->qp == nullptr) continue;
    if (s->qp->state != rnic::QpState::kReadyToSend) continue;  // waits for Connect
    earliest = std::min(earliest, s->stall_since + s->qp->config.rnr_timeout);
  }
  for (uint32_t num : awaiting_peer_) {
    auto it = qps_.find(num);
    if (it != qps_.end()) earliest = std::min(earliest, it->second->peer_deadline);
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

void Nic::ArmTimerFor(absl::Time deadline) {
  if (deadline >= timer_deadline_) return;
  itimerspec spec{};
  spec.it_value = absl::ToTimespec(std::max(deadline - absl::Now(), absl::Microseconds(20)));
  timerfd_settime(timer_fd_, 0, &spec, nullptr);
  timer_deadline_ = deadline;
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

}  // namespace unloadkv::soft
