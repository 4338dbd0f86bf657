// Admission of clients to a kvserver, as an event loop step that never blocks.
//
// A client is admitted in two phases, each with a deadline and a cap, so that no set of slow,
// silent or malicious peers can stall admission or hold server memory for long:
//  1. Hello: the bootstrap line, read by an rpc::BootstrapAcceptor (its own cap and deadline:
//     a bounded number of sockets of at most 4 KiB each; the oldest is closed to make room).
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
// Embedded servers (the simulated fabric, server/sim) have no acceptor: Admit() takes the
// client's connection details directly, and phase 2 applies as above.
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
#include "transport/rpc/bootstrap_acceptor.h"
#include "transport/rpc/rpc.h"

namespace unloadkv::server {

class Admission {
 public:
  struct Options {
    std::string policy;  // path policy of each connection
    int max_connections = 256;
    size_t max_half_open = 32;
    absl::Duration handshake_deadline = absl::Seconds(5);
    const Clock* clock = RealClock::Get();
  };
  struct Established {
    uint64_t id = 0;  // the client tag its RPCs are served under
    std::shared_ptr<engine::Connection> conn;
  };

  // Admits through `acceptor` (which listens already, so a busy port fails before the server
  // allocates anything large; null: only through Admit); `engine`, `rpc` and `metrics` must
  // outlive the Admission.
  // `established` returns how many connections the caller holds (against max_connections);
  // `released(id)` is called for every half-open connection given up on, after its handler
  // was detached, so the caller can drop whatever a racing first request gave it.
  Admission(std::unique_ptr<rpc::BootstrapAcceptor> acceptor, const Options& options,
            engine::Engine* engine, rpc::RpcServer* rpc, ServerMetrics* metrics,
            std::function<size_t()> established, std::function<void(uint64_t)> released)
      : options_(options),
        engine_(engine),
        rpc_(rpc),
        metrics_(metrics),
        established_(std::move(established)),
        released_(std::move(released)),
        acceptor_(std::move(acceptor)) {}
  ~Admission();

  // Waits at most `wait` for bootstrap traffic, answers complete hellos, releases half-open
  // connections that failed or are late, and returns those whose first message arrived.
  std::vector<Established> Poll(absl::Duration wait);
  // Admits a client whose connection details are `client` (already checked and, over TCP,
  // pointed at the host it came from): a new half-open connection connected to it. Returns
  // this side's details, or the refusal (counted, logged) with the connection limit as
  // ResourceExhausted.
  absl::StatusOr<engine::ConnectionInfo> Admit(const engine::ConnectionInfo& client);
  size_t pending_hellos() const { return acceptor_ ? acceptor_->pending() : 0; }
  // Safe from any thread.
  size_t half_open() const { return half_open_count_.load(std::memory_order_relaxed); }

 private:
  struct HalfOpen {
    uint64_t id;
    std::shared_ptr<engine::Connection> conn;
    absl::Time deadline;
  };
  // Answers one complete hello: "ok <info>" and a new half-open connection, or "error <why>".
  void Answer(rpc::BootstrapAcceptor::Hello hello);
  void Refuse(int fd, absl::string_view reason, absl::string_view why);
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
  std::function<size_t()> established_;
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
