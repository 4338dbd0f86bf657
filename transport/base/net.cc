#include "transport/base/net.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace unloadkv {

absl::Status ErrnoError(absl::string_view what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

absl::Status ParseHost(absl::string_view host, sockaddr_in* sa) {
  std::string h = host == "localhost" ? "127.0.0.1" : std::string(host);
  if (inet_pton(AF_INET, h.c_str(), &sa->sin_addr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("address: host '", host, "' must be numeric IPv4 or localhost"));
  }
  return absl::OkStatus();
}

absl::StatusOr<HostPort> SplitHostPort(absl::string_view text, bool allow_port_zero) {
  std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  uint32_t port;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[1], &port) || port > 65535 ||
      (port == 0 && !allow_port_zero)) {
    return absl::InvalidArgumentError(absl::StrCat("address '", text,
                                                   "' is not host:port with a port in ",
                                                   allow_port_zero ? "0" : "1", "..65535"));
  }
  return HostPort{std::string(parts[0]), static_cast<uint16_t>(port)};
}

absl::StatusOr<sockaddr_in> ParseHostPort(absl::string_view text, bool allow_port_zero) {
  absl::StatusOr<HostPort> hp = SplitHostPort(text, allow_port_zero);
  if (!hp.ok()) return hp.status();
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(hp->port);
  if (absl::Status st = ParseHost(hp->host, &sa); !st.ok()) return st;
  return sa;
}

bool IsLoopbackHost(absl::string_view host) {
  sockaddr_in sa{};
  if (!ParseHost(host, &sa).ok()) return false;
  return (ntohl(sa.sin_addr.s_addr) >> 24) == 127;
}

std::string FormatHostPort(const sockaddr_in& sa) {
  char host[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &sa.sin_addr, host, sizeof(host));
  return absl::StrCat(host, ":", ntohs(sa.sin_port));
}

ScopedFd::~ScopedFd() {
  if (fd_ >= 0) close(fd_);
}

ScopedFd& ScopedFd::operator=(ScopedFd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = o.release();
  }
  return *this;
}

absl::Status WaitForSocket(int fd, short events, absl::Time deadline, absl::string_view what) {
  while (true) {
    int timeout_ms = -1;
    if (deadline != absl::InfiniteFuture()) {
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) {
        return absl::DeadlineExceededError(absl::StrCat(what, ": timed out"));
      }
      timeout_ms = static_cast<int>(absl::ToInt64Milliseconds(left)) + 1;
    }
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, timeout_ms);
    if (n > 0) return absl::OkStatus();
    if (n == 0) return absl::DeadlineExceededError(absl::StrCat(what, ": timed out"));
    if (errno != EINTR) return ErrnoError(what);
  }
}

absl::Status SendAll(int fd, absl::string_view data, absl::Time deadline) {
  while (!data.empty()) {
    const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (absl::Status st = WaitForSocket(fd, POLLOUT, deadline, "send"); !st.ok()) return st;
    } else {
      return ErrnoError("send");
    }
  }
  return absl::OkStatus();
}

absl::Status RecvAll(int fd, char* out, size_t n, absl::Time deadline) {
  while (n > 0) {
    const ssize_t k = recv(fd, out, n, 0);
    if (k > 0) {
      out += k;
      n -= static_cast<size_t>(k);
    } else if (k == 0) {
      return absl::UnavailableError("recv: the peer closed the connection");
    } else if (errno == EINTR) {
      continue;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (absl::Status st = WaitForSocket(fd, POLLIN, deadline, "recv"); !st.ok()) return st;
    } else {
      return ErrnoError("recv");
    }
  }
  return absl::OkStatus();
}

}  // namespace unloadkv
