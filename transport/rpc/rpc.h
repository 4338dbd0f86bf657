// Request/response RPC over an engine connection's messages.
//
// A client sends a request frame naming a method; the server dispatches it to the handler
// registered for the method, on the engine worker that received it (the server's event loop),
// and the handler answers through a Responder, now or later. Payloads are opaque bytes
// (serialized protobufs); frames are at most the connection's message size.
//
// Flow control: a client has at most `max_in_flight` calls outstanding; Call beyond that fails
// at once with RESOURCE_EXHAUSTED (the caller backs off), so nothing is buffered without bound.
// Deadlines: a call with a timeout fails with DEADLINE_EXCEEDED once CheckDeadlines runs after
// it passed. The server sees the timeout as Responder::deadline() (arrival + timeout; the
// hosts share no clock), so a handler that queues work can give up on expired requests. A late
// response, or one for a cancelled call, is discarded.
#ifndef UNLOADKV_TRANSPORT_RPC_RPC_H_
#define UNLOADKV_TRANSPORT_RPC_RPC_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "transport/base/clock.h"
#include "transport/base/mutex.h"
#include "transport/engine/engine.h"

namespace unloadkv::rpc {

// Who is at the other end of a served connection, as the server admitted it (the bootstrap
// exchange, handshake.h): a handler checks requests against this, never against what a
// request says about its sender.
struct Peer {
  uint64_t id = 0;     // the server's tag for the connection
  std::string user;    // the authenticated user; without authentication, the name it claimed
  uint32_t roles = 0;  // rpc::Role bits (auth_file.h)
  // The connection the requests arrive on (set by RpcServer::Serve; empty when served without
  // shared ownership): what a handler binds the peer's memory windows on.
  std::weak_ptr<engine::Connection> connection;
};

// An engine that carries RPCs over `device`: `options` (workers, limits, metrics) with
// messages of up to `max_message_bytes`. `simulated`: `device` is a simulation's, which drives
// the engine itself (staging rings asked for on huge pages count as backed by them,
// EngineOptions::modeled_huge_pages), with its invariant `checks` (nullable). The one place
// the server and the SDK set up their engines alike.
absl::StatusOr<std::unique_ptr<engine::Engine>> CreateRpcEngine(rnic::Device* device,
                                                                engine::EngineOptions options,
                                                                uint32_t max_message_bytes,
                                                                bool simulated,
                                                                engine::InvariantChecks* checks);

// Answers one request. Move-only, so that one request has one answer: a second Reply, or one
// on a moved-from Responder, does nothing, and so does a reply after the connection failed. A
// Responder may be moved to and used on any thread, by one thread at a time. Making one
// allocates nothing (issue 39).
class Responder {
 public:
  Responder() = default;
  Responder(Responder&&) noexcept = default;
  Responder& operator=(Responder&&) noexcept = default;

  // `payload` is copied before Reply returns; a failed call's payload is its message.
  void Reply(const absl::Status& status, absl::string_view payload = {});
  // Whether Reply ran (or this one was moved from).
  bool replied() const { return conn_ == nullptr; }
  uint64_t request_id() const { return request_id_; }
  // The tag the connection was served with (RpcServer::Serve): which client asked.
  uint64_t peer() const { return peer_->id; }
  // Everything the server knows of that client.
  const Peer& peer_identity() const { return *peer_; }
  // When the client stops waiting, on the server's clock; InfiniteFuture() without a timeout.
  absl::Time deadline() const { return deadline_; }

 private:
  friend class RpcServer;
  std::shared_ptr<engine::Connection> conn_;  // null once replied
  uint64_t request_id_ = 0;
  uint16_t method_ = 0;
  std::shared_ptr<const Peer> peer_;  // shared by every request of the connection
  absl::Time deadline_ = absl::InfiniteFuture();
};

using Handler = std::function<void(absl::string_view request, Responder responder)>;

// Thread-safety: Register before Serve; everything else from any thread.
class RpcServer {
 public:
  explicit RpcServer(const Clock* clock) : clock_(clock) {}
  void Register(uint16_t method, Handler handler);
  // Serves requests arriving on `conn` (takes over its message handler); responders see
  // `peer`. The handler and every Responder share ownership of `conn`, so a reply after the
  // owner let go is safe; to release it, the owner calls conn->SetMessageHandler(nullptr).
  void Serve(std::shared_ptr<engine::Connection> conn, Peer peer);
  // As above for a connection the caller keeps alive for as long as it may receive.
  void Serve(engine::Connection* conn, Peer peer);

  uint64_t malformed_frames() const { return malformed_.load(); }

 private:
  const Clock* clock_;
  absl::flat_hash_map<uint16_t, Handler> handlers_;
  std::atomic<uint64_t> malformed_{0};
};

class RpcClient {
 public:
  using Callback = std::function<void(absl::StatusOr<std::string>)>;

  // Takes over `conn`'s message handler. `conn` must outlive the client. `after_callback`
  // (may be empty) runs after each call's `done`, whichever way it ended: a caller that
  // wakes its waiters then needs no wrapper around each callback (one allocation each). It
  // must stay valid after a `done` that destroys this client.
  RpcClient(engine::Connection* conn, const Clock* clock, int max_in_flight = 64,
            std::function<void()> after_callback = nullptr);
  ~RpcClient();

  // Starts a call; `done` runs exactly once (on an engine worker, or inside CheckDeadlines or
  // Cancel). Fails at once (and never runs `done`) when over max_in_flight, when the payload
  // is too large, or when the connection cannot send.
  // `send` goes to the request's Connection::Send (a window the request invalidates).
  // `request` is copied before Call returns.
  absl::StatusOr<uint64_t> Call(uint16_t method, absl::string_view request, absl::Duration timeout,
                                Callback done, const engine::SendOptions& send = {});
  // Fails the call with CANCELLED if it is still outstanding.
  void Cancel(uint64_t call_id);
  // Fails every call whose deadline has passed with DEADLINE_EXCEEDED, or, once the
  // connection has failed, every call with UNAVAILABLE (no answer can arrive; a call that
  // changes state may or may not have been applied). Returns how many.
  int CheckDeadlines();
  int in_flight() const;

  // Blocking convenience for tools and tests (never inside an event loop).
  absl::StatusOr<std::string> CallAndWait(uint16_t method, std::string request,
                                          absl::Duration timeout,
                                          const engine::SendOptions& send = {});
  // The same where answers arrive only while someone moves the world (a simulation): `wait`
  // returns once its argument holds, running the world meanwhile.
  using Waiter = std::function<void(const std::function<bool()>& done)>;
  absl::StatusOr<std::string> CallAndWait(uint16_t method, std::string request,
                                          absl::Duration timeout, const Waiter& wait);

 private:
  struct Pending {
    absl::Time deadline;
    absl::Time sent;  // its round trip goes to the connection's path policy
    Callback done;
  };
  void OnMessage(absl::Span<const char> bytes);

  // Runs `done` with `result`, then `after` (a copy of after_callback_ made before any
  // callback ran: one may destroy this client). Touches nothing of the client.
  static void Finish(Callback& done, absl::StatusOr<std::string> result,
                     const std::function<void()>& after);

  engine::Connection* conn_;
  const Clock* clock_;
  const int max_in_flight_;
  const std::function<void()> after_callback_;
  mutable Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  // A hash map, which allocates nothing once grown (a btree allocates nodes as call ids move
  // on). Calls that fail together (a lost connection, a closing client) are sorted by id
  // first: they fail in the order they were made, the same in every run.
  absl::flat_hash_map<uint64_t, Pending> pending_ ABSL_GUARDED_BY(mu_);
  // Takes every pending call for which `take(pending)` holds, in call id order.
  std::vector<Callback> TakeInOrder(const std::function<bool(const Pending&)>& take)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
};

}  // namespace unloadkv::rpc

#endif  // UNLOADKV_TRANSPORT_RPC_RPC_H_
