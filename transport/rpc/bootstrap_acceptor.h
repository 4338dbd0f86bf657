// The server side of the bootstrap exchange (bootstrap.h), event-driven: accepts connections,
// sends each its challenge line (handshake.h; a fresh nonce per connection) and reads its hello
// line without ever blocking, so slow, silent or malicious peers
// cost a bounded amount of memory and their own deadline, never another client's admission.
//
// Limits: at most Options::max_pending connections are read at once (each holds at most
// kMaxBootstrapLine bytes of line and one socket). A new connection's bytes are read as it is
// accepted, so a hello that arrived with it never waits in that set; when a connection that
// must wait finds the set full, the oldest one that has sent nothing is closed to make room
// (the oldest of all if every one has sent something). A flood of idle sockets therefore
// pushes out its own members, not clients whose hello is on its way. A connection whose line is
// not complete within Options::line_deadline of its accept, that sends more than
// kMaxBootstrapLine bytes, or that closes first, is answered "error <why>" (best effort,
// never waiting) and closed.
//
// Thread-compatible: one thread (the server's admission loop) calls everything.
#ifndef UNLOADKV_TRANSPORT_RPC_BOOTSTRAP_ACCEPTOR_H_
#define UNLOADKV_TRANSPORT_RPC_BOOTSTRAP_ACCEPTOR_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "transport/base/clock.h"
#include "transport/base/net.h"
#include "transport/rpc/bootstrap.h"

namespace unloadkv::rpc {

class BootstrapAcceptor {
 public:
  struct Options {
    size_t max_pending = 128;
    absl::Duration line_deadline = absl::Seconds(2);
    const Clock* clock = RealClock::Get();
  };
  // A connection whose hello line is complete. The acceptor no longer tracks it.
  struct Hello {
    ScopedFd fd;             // non-blocking; answer with AnswerNow
    std::string challenge;   // the nonce of the challenge this connection was sent
    std::string line;        // without the '\n'
    std::string peer_host;   // numeric IPv4 address the connection came from
    std::string local_host;  // numeric IPv4 address it reached: one the peer can dial
  };
  // Connections given up on, by reason; monotonic.
  struct Counters {
    uint64_t accepted = 0;
    uint64_t timed_out = 0;      // no complete line within line_deadline
    uint64_t evicted = 0;        // closed to make room at max_pending
    uint64_t too_long = 0;       // line over kMaxBootstrapLine
    uint64_t closed = 0;         // peer closed (or the socket failed) before a full line
    uint64_t accept_failed = 0;  // accept failed for want of descriptors or memory
  };

  // Listens on "host:port" (port 0 picks a free one); a busy port or bad address is a clear
  // error naming it.
  static absl::StatusOr<std::unique_ptr<BootstrapAcceptor>> Listen(absl::string_view host_port,
                                                                   const Options& options);
  ~BootstrapAcceptor();

  // The bound "host:port".
  const std::string& address() const { return listener_->address(); }
  // Waits at most `wait` for activity (less when a pending line's deadline comes first),
  // accepts what is waiting, reads what arrived, expires what is late. Returns the
  // connections whose line became complete.
  std::vector<Hello> Poll(absl::Duration wait);
  size_t pending() const { return pending_.size(); }
  const Counters& counters() const { return counters_; }

 private:
  struct Pending {
    ScopedFd fd;
    std::string challenge;
    std::string buffer;
    absl::Time deadline;
    std::string peer_host, local_host;
  };
  BootstrapAcceptor(std::unique_ptr<BootstrapListener> listener, const Options& options)
      : listener_(std::move(listener)), options_(options) {}
  void AcceptAll(std::vector<Hello>* done);
  // Makes room for a new pending socket: closes one, unless reading the oldest silent ones
  // finds one that finished its line (added to `done`) or closed.
  void Evict(std::vector<Hello>* done);
  // Reads what `p` has; true when it is finished with (complete, failed or closed).
  bool Read(Pending& p, std::vector<Hello>* done);
  void Drop(Pending& p, absl::string_view why);

  std::unique_ptr<BootstrapListener> listener_;
  Options options_;
  std::deque<Pending> pending_;  // oldest first
  absl::Time accept_paused_until_ = absl::InfinitePast();
  Counters counters_;
};

// Sends `line` + '\n' on a non-blocking socket without waiting: the whole line must fit in the
// socket's send buffer at once (true for a fresh bootstrap connection), else Unavailable.
absl::Status AnswerNow(int fd, absl::string_view line);

}  // namespace unloadkv::rpc

#endif  // UNLOADKV_TRANSPORT_RPC_BOOTSTRAP_ACCEPTOR_H_
