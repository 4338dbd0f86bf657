#include "transport/rpc/bootstrap_acceptor.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "transport/rpc/bootstrap.h"
#include "transport/rpc/handshake.h"

namespace unloadkv::rpc {
namespace {

// Accepted per Poll at most, so one Poll stays short under a connection flood. Large enough to
// drain the kernel's accept queue well before it overflows (a dropped SYN costs the dialer a
// 1 s retransmission); the pending cap decides what stays.
constexpr int kAcceptBatch = 1024;
// How long accepting pauses after it failed for want of descriptors or memory.
constexpr absl::Duration kAcceptPause = absl::Milliseconds(100);

std::string HostOf(const sockaddr_in& sa) {
  char buf[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &sa.sin_addr, buf, sizeof(buf));
  return buf;
}

}  // namespace

absl::Status AnswerNow(int fd, absl::string_view line) {
  std::string data = absl::StrCat(line, "\n");
  ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n == static_cast<ssize_t>(data.size())) return absl::OkStatus();
  return absl::UnavailableError(n < 0 ? absl::StrCat("bootstrap: answering: ", std::strerror(errno))
                                      : "bootstrap: answering: the peer's receive window is full");
}

absl::StatusOr<std::unique_ptr<BootstrapAcceptor>> BootstrapAcceptor::Listen(
    absl::string_view host_port, const Options& options) {
  if (options.max_pending < 1) {
    return absl::InvalidArgumentError("bootstrap: max_pending must be at least 1");
  }
  absl::StatusOr<std::unique_ptr<BootstrapListener>> l = BootstrapListener::Listen(host_port);
  if (!l.ok()) return l.status();
  return std::unique_ptr<BootstrapAcceptor>(new BootstrapAcceptor(std::move(*l), options));
}

BootstrapAcceptor::~BootstrapAcceptor() = default;

std::vector<BootstrapAcceptor::Hello> BootstrapAcceptor::Poll(absl::Duration wait) {
  const absl::Time now = options_.clock->Now();
  absl::Time until = now + std::max(wait, absl::ZeroDuration());
  for (const Pending& p : pending_) until = std::min(until, p.deadline);
  std::vector<pollfd> fds;
  fds.reserve(pending_.size() + 1);
  // While accepting fails for want of descriptors, the listener is left out for a while
  // (a readable listener that cannot be accepted from would make every Poll return at once).
  const bool accepting = now >= accept_paused_until_;
  if (!accepting) until = std::min(until, accept_paused_until_);
  fds.push_back({accepting ? listener_->fd() : -1, POLLIN, 0});
  for (const Pending& p : pending_) fds.push_back({p.fd.get(), POLLIN, 0});
  const int64_t ms =
      std::max<int64_t>(0, absl::ToInt64Milliseconds(until - now + absl::Microseconds(999)));
  int n = poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(ms, 1 << 30)));
  std::vector<Hello> done;
  if (n > 0) {
    // Read first (the indexes match pending_ as it was), then accept.
    std::vector<bool> finished(pending_.size(), false);
    for (size_t i = 0; i < pending_.size(); ++i) {
      if (fds[i + 1].revents != 0) finished[i] = Read(pending_[i], &done);
    }
    size_t i = 0;
    pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                  [&](const Pending&) { return finished[i++]; }),
                   pending_.end());
    if (fds[0].revents != 0) AcceptAll(&done);
  }
  const absl::Time after = options_.clock->Now();
  for (Pending& p : pending_) {
    if (p.deadline > after) continue;
    ++counters_.timed_out;
    Drop(p, absl::StrCat("bootstrap: no complete hello line within ",
                         absl::FormatDuration(options_.line_deadline)));
  }
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                [](const Pending& p) { return !p.fd.valid(); }),
                 pending_.end());
  return done;
}

void BootstrapAcceptor::AcceptAll(std::vector<Hello>* done) {
  for (int i = 0; i < kAcceptBatch; ++i) {
    sockaddr_in peer{};
    socklen_t len = sizeof(peer);
    ScopedFd fd(accept4(listener_->fd(), reinterpret_cast<sockaddr*>(&peer), &len,
                        SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!fd.valid()) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        ++counters_.accept_failed;
        accept_paused_until_ = options_.clock->Now() + kAcceptPause;
      }
      return;  // EAGAIN: all accepted; ECONNABORTED and the like: the next Poll goes on
    }
    sockaddr_in local{};
    len = sizeof(local);
    getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &len);
    ++counters_.accepted;
    Pending p{std::move(fd), NewNonce(),
              std::string(), options_.clock->Now() + options_.line_deadline,
              HostOf(peer),  HostOf(local)};
    // The challenge first: a client says hello only once it has it. A fresh socket's send
    // buffer takes the line whole; one that does not is a socket already failing.
    if (!AnswerNow(p.fd.get(), EncodeChallenge(p.challenge)).ok()) {
      ++counters_.closed;
      continue;
    }
    // A client sends its hello right after connecting, so it is usually here already: a
    // complete line never occupies a pending place, and cannot be pushed out by a flood.
    if (Read(p, done)) continue;
    if (pending_.size() >= options_.max_pending) Evict(done);
    pending_.push_back(std::move(p));
  }
}

void BootstrapAcceptor::Evict(std::vector<Hello>* done) {
  // The oldest socket that has sent nothing at all, else the oldest: a silent flood pushes out
  // its own members before a client that is part way through its line. A candidate is read
  // first: a client accepted a moment before its hello arrived has sent it by now, and one
  // batch of accepts (kAcceptBatch) may hold many sockets of a flood after it.
  auto victim = pending_.end();
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    if (!it->buffer.empty()) continue;
    if (Read(*it, done)) {  // its whole line, or it closed: that made room
      pending_.erase(it);
      return;
    }
    if (it->buffer.empty()) {
      victim = it;
      break;
    }
  }
  if (victim == pending_.end()) victim = pending_.begin();
  ++counters_.evicted;
  Drop(*victim, "bootstrap: server busy (too many connections waiting to say hello); try again");
  pending_.erase(victim);
}

bool BootstrapAcceptor::Read(Pending& p, std::vector<Hello>* done) {
  char buf[1024];
  while (true) {
    ssize_t n = recv(p.fd.get(), buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    if (n <= 0) {
      ++counters_.closed;
      return true;
    }
    const char* nl = static_cast<const char*>(std::memchr(buf, '\n', n));
    p.buffer.append(buf, nl != nullptr ? nl - buf : n);
    if (p.buffer.size() > kMaxBootstrapLine) {
      ++counters_.too_long;
      Drop(p, absl::StrCat("bootstrap: line longer than ", kMaxBootstrapLine, " bytes"));
      return true;
    }
    if (nl != nullptr) {
      done->push_back(Hello{std::move(p.fd), std::move(p.challenge), std::move(p.buffer),
                            std::move(p.peer_host), std::move(p.local_host)});
      return true;
    }
  }
}

void BootstrapAcceptor::Drop(Pending& p, absl::string_view why) {
  (void)AnswerNow(p.fd.get(), absl::StrCat("error ", why));
  p.fd = ScopedFd();
}

}  // namespace unloadkv::rpc
