// The out-of-band bootstrap exchange: before an engine connection exists, its two ends swap
// ConnectionInfo over a short-lived TCP connection (the role rdma_cm or perftest's TCP exchange
// plays for verbs), authenticating each other on the way: the three lines of handshake.h
// (challenge, hello, answer). Lines are at most kMaxBootstrapLine bytes; every read and write
// has a deadline, so a silent or slow peer costs its timeout and nothing more.
#ifndef UNLOADKV_TRANSPORT_RPC_BOOTSTRAP_H_
#define UNLOADKV_TRANSPORT_RPC_BOOTSTRAP_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "transport/base/net.h"
#include "transport/rpc/auth_file.h"
#include "transport/rpc/handshake.h"

namespace unloadkv::rpc {

inline constexpr size_t kMaxBootstrapLine = 4096;

// Thread-compatible. Owns the listening socket.
class BootstrapListener {
 public:
  // Listens on "host:port" (port 0 picks a free one). A busy port or bad address is a clear
  // error naming it.
  static absl::StatusOr<std::unique_ptr<BootstrapListener>> Listen(absl::string_view host_port);
  // The bound "host:port".
  const std::string& address() const { return address_; }
  int fd() const { return fd_.get(); }
  // Waits up to `wait` for a client; an invalid ScopedFd when none arrived.
  absl::StatusOr<ScopedFd> Accept(absl::Duration wait);

 private:
  BootstrapListener(ScopedFd fd, std::string address)
      : fd_(std::move(fd)), address_(std::move(address)) {}
  ScopedFd fd_;
  std::string address_;
};

// Connects to "host:port" within `timeout`.
absl::StatusOr<ScopedFd> Dial(absl::string_view host_port, absl::Duration timeout);
// Reads one '\n'-terminated line (without the '\n') of at most `max_bytes`.
absl::StatusOr<std::string> ReadLine(int fd, size_t max_bytes, absl::Duration timeout);
// Writes all of `data`.
absl::Status WriteAll(int fd, absl::string_view data, absl::Duration timeout);

// The client's part of an exchange: given the server's challenge line, its hello line
// (ClientHandshake::HelloFor).
using HelloFn = std::function<absl::StatusOr<std::string>(absl::string_view challenge_line)>;
// How a client reaches the bootstrap of the server at `address`: hands it the hello that
// `hello` makes of the server's challenge, and returns the server's answer line. Over TCP:
// ExchangeOverTcp; a simulation calls its embedded server instead.
using BootstrapDialer = std::function<absl::StatusOr<std::string>(
    const std::string& address, const HelloFn& hello, absl::Duration timeout)>;

// A BootstrapDialer over TCP: dial, read the challenge, send the hello, read the answer.
// `timeout` bounds the whole exchange, not each step.
absl::StatusOr<std::string> ExchangeOverTcp(const std::string& address, const HelloFn& hello,
                                            absl::Duration timeout);

// The whole client side: sends `local_info` to the server at `address` through `dialer`
// (empty: TCP), proving `credentials` (nullable: none), and returns the session (the server's
// info and the stream token). Errors: the dialer's; FailedPrecondition carrying the server's
// refusal; Unauthenticated when the server did not prove the secret (handshake.h).
absl::StatusOr<Session> Bootstrap(const BootstrapDialer& dialer, const std::string& address,
                                  const Credentials* credentials, const std::string& local_info,
                                  absl::Duration timeout);

}  // namespace unloadkv::rpc

#endif  // UNLOADKV_TRANSPORT_RPC_BOOTSTRAP_H_
