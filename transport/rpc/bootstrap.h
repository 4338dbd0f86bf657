// The out-of-band bootstrap exchange: before an engine connection exists, its two ends swap
// ConnectionInfo over a short-lived TCP connection (the role rdma_cm or perftest's TCP exchange
// plays for verbs). One line each way:
//   client -> server   "unloadkv/1 <EncodeConnectionInfo text>\n"
//   server -> client   "ok <EncodeConnectionInfo text>\n"  or  "error <message>\n"
// Lines are at most kMaxBootstrapLine bytes; every read and write has a deadline, so a silent or
// slow peer costs its timeout and nothing more.
#ifndef UNLOADKV_TRANSPORT_RPC_BOOTSTRAP_H_
#define UNLOADKV_TRANSPORT_RPC_BOOTSTRAP_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "transport/base/net.h"

namespace unloadkv::rpc {

inline constexpr size_t kMaxBootstrapLine = 4096;
inline constexpr absl::string_view kBootstrapHello = "unloadkv/1";

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

// Client side of the exchange: sends `local_info`, returns the server's info text, or the
// server's refusal as FailedPrecondition carrying its message. `timeout` bounds the whole
// exchange (connect, send, answer), not each step.
absl::StatusOr<std::string> ExchangeAsClient(absl::string_view host_port,
                                             absl::string_view local_info, absl::Duration timeout);

}  // namespace unloadkv::rpc

#endif  // UNLOADKV_TRANSPORT_RPC_BOOTSTRAP_H_
