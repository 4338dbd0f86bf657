#include "transport/rpc/bootstrap.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace unloadkv::rpc {

absl::StatusOr<std::unique_ptr<BootstrapListener>> BootstrapListener::Listen(
    absl::string_view host_port) {
  absl::StatusOr<sockaddr_in> sa = ParseHostPort(host_port, /*allow_port_zero=*/true);
  if (!sa.ok()) return sa.status();
  ScopedFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return ErrnoError("bootstrap: socket");
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd.get(), reinterpret_cast<const sockaddr*>(&*sa), sizeof(*sa)) != 0) {
    return absl::UnavailableError(absl::StrCat("bootstrap: cannot listen on ", host_port, ": ",
                                               std::strerror(errno),
                                               errno == EADDRINUSE ? " (port in use)" : ""));
  }
  if (listen(fd.get(), SOMAXCONN) != 0) return ErrnoError("bootstrap: listen");
  sockaddr_in bound{};
  socklen_t len = sizeof(bound);
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &len);
  return std::unique_ptr<BootstrapListener>(
      new BootstrapListener(std::move(fd), FormatHostPort(bound)));
}

absl::StatusOr<ScopedFd> BootstrapListener::Accept(absl::Duration wait) {
  pollfd p{fd_.get(), POLLIN, 0};
  int n = poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(wait)));
  if (n < 0 && errno != EINTR) return ErrnoError("bootstrap: poll");
  if (n <= 0) return ScopedFd();
  ScopedFd conn(accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
  if (!conn.valid() && errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
    return ErrnoError("bootstrap: accept");
  }
  return conn;
}

absl::StatusOr<ScopedFd> Dial(absl::string_view host_port, absl::Duration timeout) {
  absl::StatusOr<sockaddr_in> sa = ParseHostPort(host_port);
  if (!sa.ok()) return sa.status();
  const absl::Time deadline = absl::Now() + timeout;
  ScopedFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return ErrnoError("bootstrap: socket");
  if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&*sa), sizeof(*sa)) != 0) {
    if (errno != EINPROGRESS) {
      return absl::UnavailableError(
          absl::StrCat("cannot connect to ", host_port, ": ", std::strerror(errno)));
    }
    if (absl::Status st =
            WaitForSocket(fd.get(), POLLOUT, deadline, absl::StrCat("connecting to ", host_port));
        !st.ok()) {
      return st;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot connect to ", host_port, ": ", std::strerror(err)));
    }
  }
  return fd;
}

absl::StatusOr<std::string> ReadLine(int fd, size_t max_bytes, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::string line;
  char buf[512];
  while (true) {
    // Peek, then consume only up to the newline, so bytes after it stay in the socket.
    ssize_t n = recv(fd, buf, sizeof(buf), MSG_PEEK);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (absl::Status st = WaitForSocket(fd, POLLIN, deadline, "bootstrap: reading a line");
          !st.ok()) {
        return st;
      }
      continue;
    }
    if (n < 0) return ErrnoError("bootstrap: read");
    if (n == 0) return absl::UnavailableError("bootstrap: peer closed before a full line");
    const char* nl = static_cast<const char*>(std::memchr(buf, '\n', n));
    size_t take = nl != nullptr ? static_cast<size_t>(nl - buf) + 1 : static_cast<size_t>(n);
    if (recv(fd, buf, take, 0) != static_cast<ssize_t>(take)) return ErrnoError("bootstrap: read");
    line.append(buf, nl != nullptr ? take - 1 : take);
    if (line.size() > max_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("bootstrap: line longer than ", max_bytes, " bytes"));
    }
    if (nl != nullptr) return line;
  }
}

absl::Status WriteAll(int fd, absl::string_view data, absl::Duration timeout) {
  absl::Status st = SendAll(fd, data, absl::Now() + timeout);
  if (st.ok()) return st;
  return absl::Status(st.code(), absl::StrCat("bootstrap: ", st.message()));
}

absl::StatusOr<std::string> ExchangeOverTcp(const std::string& address, const HelloFn& hello,
                                            absl::Duration timeout) {
  // One deadline for the whole exchange: dial, challenge, hello and answer share `timeout`.
  const absl::Time deadline = absl::Now() + timeout;
  auto left = [deadline] { return std::max(deadline - absl::Now(), absl::ZeroDuration()); };
  absl::StatusOr<ScopedFd> fd = Dial(address, left());
  if (!fd.ok()) return fd.status();
  absl::StatusOr<std::string> challenge = ReadLine(fd->get(), kMaxBootstrapLine, left());
  if (!challenge.ok()) return challenge.status();
  absl::StatusOr<std::string> line = hello(*challenge);
  if (!line.ok()) return line.status();
  if (absl::Status st = WriteAll(fd->get(), absl::StrCat(*line, "\n"), left()); !st.ok()) {
    return st;
  }
  return ReadLine(fd->get(), kMaxBootstrapLine, left());
}

absl::StatusOr<Session> Bootstrap(const BootstrapDialer& dialer, const std::string& address,
                                  const Credentials* credentials, const std::string& local_info,
                                  absl::Duration timeout) {
  ClientHandshake handshake(credentials, local_info);
  HelloFn hello = [&handshake](absl::string_view challenge) {
    return handshake.HelloFor(challenge);
  };
  absl::StatusOr<std::string> answer =
      dialer ? dialer(address, hello, timeout) : ExchangeOverTcp(address, hello, timeout);
  if (!answer.ok()) return answer.status();
  return handshake.Finish(*answer);
}

}  // namespace unloadkv::rpc
