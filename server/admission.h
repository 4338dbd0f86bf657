// Admission of clients to a kvserver, as an event loop step that never blocks.
//
// A client is admitted in two phases, each with a deadline and a cap, so that no set of slow,
// silent or malicious peers can stall admission or hold server memory for long:
//  1. Hello: the bootstrap challenge and hello line, read by an rpc::BootstrapAcceptor (its
//     own cap and deadline: a bounded number of sockets of at most 4 KiB each; the oldest is
//     closed to make room). The hello must prove a user of the auth file (rpc/handshake.h);
//     a failed proof is refused (UNAUTHENTICATED) before anything is allocated. Without an
//     auth file every client is admitted with every role (protected mode, docs/security.md).
//  2. Half-open: the line was valid, so the server created an engine connection (staging ring
//     and message buffers: this is where the memory is), connected it, answered "ok", and
//     waits for the client's first message (the SDK sends PING at once). A connection that
//     has delivered no message within Options::handshake_deadline is released; at most
//     Options::max_half_open exist at once and the oldest is released to make room.
// A connection whose first message arrived is established: Poll hands it to the caller, which
// owns it from then on. Established plus half-open connections never exceed
// Options::max_connections; beyond it a hello is refused.
//
// Safety: the server dials back only the host a client's bootstrap connection came from
// (backends::DialBackAttributes) and advertises the address the client reached
// (backends::AdvertisedAttributes).
//
// Embedded servers (the simulated fabric, tests/sim) have no acceptor: AdmitEmbedded() runs
// the same exchange in memory, and phase 2 applies as above.
//
// Thread-compatible: one thread (the server's admission loop) calls everything but half_open().
#ifndef UNLOADKV_SERVER_ADMISSION_H_
#define UNLOADKV_SERVER_ADMISSION_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/server_metrics.h"
#include "transport/base/clock.h"
#include "transport/base/logging.h"
#include "transport/engine/engine.h"
#include "transport/rpc/auth_file.h"
#include "transport/rpc/bootstrap_acceptor.h"
#include "transport/rpc/handshake.h"
#include "transport/rpc/rpc.h"

namespace unloadkv::server {

class Admission {
 public:
  struct Options {
    std::string policy;  // path policy of each connection
    int max_connections = 256;
    int max_per_host = 0;  // connections from one host (established + half-open); 0: no cap
    size_t max_half_open = 32;
    absl::Duration handshake_deadline = absl::Seconds(5);
    const Clock* clock = RealClock::Get();
  };
  struct Established {
    std::shared_ptr<const rpc::Peer> peer;  // its id is the tag its RPCs are served under
    std::string host;                       // the host it came from ("" embedded)
    std::shared_ptr<engine::Connection> conn;
  };
  // The auth table in force (null: no authentication); called for every hello.
  using AuthSource = std::function<std::shared_ptr<const rpc::AuthTable>()>;
  // How many established connections the caller holds: in all (host ""), or from `host`.
  using Counter = std::function<size_t(const std::string& host)>;

  // Admits through `acceptor` (which listens already, so a busy port fails before the server
  // allocates anything large; null: only through AdmitEmbedded); `engine`, `rpc` and `metrics`
  // must outlive the Admission.
  // `established` counts the connections the caller holds (against the caps); `released(id)`
  // is called for every half-open connection given up on, after its handler was detached, so
  // the caller can drop whatever a racing first request gave it.
  Admission(std::unique_ptr<rpc::BootstrapAcceptor> acceptor, const Options& options,
            engine::Engine* engine, rpc::RpcServer* rpc, ServerMetrics* metrics, AuthSource auth,
            Counter established, std::function<void(uint64_t)> released)
      : options_(options),
        engine_(engine),
        rpc_(rpc),
        metrics_(metrics),
        auth_(std::move(auth)),
        established_(std::move(established)),
        released_(std::move(released)),
        acceptor_(std::move(acceptor)) {}
  ~Admission();

  // Waits at most `wait` for bootstrap traffic, answers complete hellos, releases half-open
  // connections that failed or are late, and returns those whose first message arrived.
  std::vector<Established> Poll(absl::Duration wait);
  // The bootstrap exchange of an embedded server, in memory: sends `hello` a fresh challenge
  // and answers its hello line as Poll answers one from a socket. Returns the answer line
  // ("ok ..." or "error ...").
  std::string AdmitEmbedded(const rpc::HelloFn& hello);
  size_t pending_hellos() const { return acceptor_ ? acceptor_->pending() : 0; }
  // Safe from any thread.
  size_t half_open() const { return half_open_count_.load(std::memory_order_relaxed); }

 private:
  struct HalfOpen {
    std::shared_ptr<const rpc::Peer> peer;
    std::string host;
    std::shared_ptr<engine::Connection> conn;
    absl::Time deadline;
  };
  // Answers one complete hello from a socket: "ok ..." and a new half-open connection, or
  // "error <why>".
  void Answer(rpc::BootstrapAcceptor::Hello hello);
  // Checks `hello_line` (answering challenge `challenge`) and admits its sender: the answer
  // line, or the refusal (counted and logged). `peer_host` and `local_host`: where the
  // bootstrap connection came from and what it reached ("" embedded: no dial-back rules).
  absl::StatusOr<std::string> Handshake(const std::string& challenge, absl::string_view hello_line,
                                        const std::string& peer_host,
                                        const std::string& local_host);
  // A new half-open connection connected to `client` (already checked and, over TCP, pointed
  // at the host it came from), served as `peer`; returns this side's details, or the refusal
  // with a cap as ResourceExhausted.
  absl::StatusOr<engine::ConnectionInfo> Admit(const engine::ConnectionInfo& client, rpc::Peer peer,
                                               const std::string& host);
  // Counts and logs a refusal; returns it as a status of `code`.
  absl::Status Refused(absl::StatusCode code, absl::string_view reason, absl::string_view why);
  void Release(HalfOpen& h);
  // Hands over connections whose first message arrived; releases failed and late ones.
  void Sweep(std::vector<Established>* out);
  // Makes room for one more half-open connection: releases the oldest that has received
  // nothing (one that has is about to be established and is left alone).
  void MakeRoom();
  // Counts the acceptor's give-ups since the last call as refusals.
  void CountAcceptorRefusals();

  Options options_;
  engine::Engine* engine_;
  rpc::RpcServer* rpc_;
  ServerMetrics* metrics_;
  AuthSource auth_;
  Counter established_;
  std::function<void(uint64_t)> released_;
  std::unique_ptr<rpc::BootstrapAcceptor> acceptor_;
  rpc::BootstrapAcceptor::Counters seen_;   // acceptor counters already counted
  std::deque<HalfOpen> half_open_;          // oldest first
  std::atomic<size_t> half_open_count_{0};  // half_open_.size(), for other threads
  uint64_t next_id_ = 1;
  ThrottledLog refusals_log_{absl::Seconds(1)};
};

}  // namespace unloadkv::server

#endif  // UNLOADKV_SERVER_ADMISSION_H_
