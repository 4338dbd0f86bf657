// IPv4 socket helpers shared by the soft RNIC and the bootstrap exchange.
#ifndef UNLOADKV_TRANSPORT_BASE_NET_H_
#define UNLOADKV_TRANSPORT_BASE_NET_H_

#include <netinet/in.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace unloadkv {

// Parses a host (numeric IPv4 or "localhost") into `sa->sin_addr`.
absl::Status ParseHost(absl::string_view host, sockaddr_in* sa);
// Splits "host:port" (any host text, resolved by the caller). Port 0 is accepted only with
// `allow_port_zero` (listen on any port). Errors are InvalidArgument and quote the text.
struct HostPort {
  std::string host;
  uint16_t port = 0;
};
absl::StatusOr<HostPort> SplitHostPort(absl::string_view text, bool allow_port_zero = false);
// Parses "host:port" as SplitHostPort, with the host as ParseHost takes it.
absl::StatusOr<sockaddr_in> ParseHostPort(absl::string_view text, bool allow_port_zero = false);
std::string FormatHostPort(const sockaddr_in& sa);
// Whether `host` ("localhost" or numeric IPv4) is a loopback address (127.0.0.0/8): one only
// this machine can reach.
bool IsLoopbackHost(absl::string_view host);
// Unavailable "<what>: <strerror(errno)>", for a failed system call (reads errno now).
absl::Status ErrnoError(absl::string_view what);

// Sends all of `data` on socket `fd`, retrying partial sends and EINTR; on a non-blocking
// socket, waits (poll) for room until `deadline`. Unavailable on a failed send (the peer gone),
// DeadlineExceeded past the deadline. Never raises SIGPIPE.
absl::Status SendAll(int fd, absl::string_view data, absl::Time deadline = absl::InfiniteFuture());
// Receives exactly `n` bytes into `out`, retrying partial reads and EINTR, waiting as SendAll
// does. Unavailable when the peer closes first.
absl::Status RecvAll(int fd, char* out, size_t n, absl::Time deadline = absl::InfiniteFuture());
// Waits (poll) for `events` on `fd` until `deadline`: DeadlineExceeded naming `what` when it
// passes first.
absl::Status WaitForSocket(int fd, short events, absl::Time deadline, absl::string_view what);

// Owns a file descriptor; closes it on destruction. Movable, not copyable.
class ScopedFd {
 public:
  ScopedFd() = default;
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd();
  ScopedFd(ScopedFd&& o) noexcept : fd_(o.release()) {}
  ScopedFd& operator=(ScopedFd&& o) noexcept;
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace unloadkv

#endif  // UNLOADKV_TRANSPORT_BASE_NET_H_
