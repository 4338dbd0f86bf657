// NodeClient: connecting, waiting for answers, sending requests.
#include "client/client_impl.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "client/deadline_ticker.h"
#include "client/not_sent.h"
#include "client/value_policy.h"
#include "proto/limits.h"
#include "transport/backends/open_device.h"
#include "transport/rpc/auth_file.h"
#include "transport/rpc/bootstrap.h"

namespace unloadkv {
namespace {

// The client engine's options: one connection, on which every request the caller may have in
// flight can be on the wire (as far as the server's own message_slots grant), with room for
// the credit level to stay above it (twice max_in_flight, as kvserver's slots are twice the
// default max_in_flight), the answers' receive buffers being the shared ones. Simulated, the
// engine's defaults, as kvserver keeps them there.
engine::EngineOptions EngineOptionsFor(const ClientOptions& options, bool simulated) {
  engine::EngineOptions eo;
  eo.max_connections_per_worker = 1;
  if (!simulated) {
    eo.message_slots = std::min<uint32_t>(
        engine::kMaxMessageSlots, std::max<uint32_t>(eo.message_slots, 2 * options.max_in_flight));
    eo.shared_message_buffers = std::max(eo.shared_message_buffers, 2 * eo.message_slots);
  }
  return eo;
}

}  // namespace

absl::StatusOr<std::unique_ptr<NodeClient>> NodeClient::Connect(const ClientOptions& options,
                                                                const ClientHooks& hooks) {
  if (options.max_in_flight < 1 || options.max_in_flight > 1024) {
    return absl::InvalidArgumentError("max_in_flight must be in 1..1024");
  }
  absl::StatusOr<client_internal::ValuePolicy> values =
      client_internal::ParseValuePolicy(options.policy);
  if (!values.ok()) return values.status();
  auto policy = engine::MakePolicy(values->engine_policy);
  if (!policy.ok()) return policy.status();
  std::unique_ptr<NodeClient> c(new NodeClient());
  c->options_ = options;
  c->inline_put_bytes_ = client_internal::InlineBytesOn(
      *values, hooks.embedding != nullptr ? "sim" : options.transport);
  c->hooks_ = hooks;
  const ClientEmbedding* embedded = hooks.embedding;
  if (absl::Status st = c->UseDevice(); !st.ok()) return st;
  c->write_count_ = std::make_unique<client_internal::WriteCount>(hooks.metrics);
  engine::EngineOptions eo = EngineOptionsFor(options, /*simulated=*/embedded != nullptr);
  eo.metrics = c->write_count_.get();
  auto engine = rpc::CreateRpcEngine(c->device_, eo, proto::kMaxMessageBytes,
                                     /*simulated=*/embedded != nullptr,
                                     embedded != nullptr ? embedded->checks : nullptr);
  if (!engine.ok()) return engine.status();
  c->engine_ = std::move(*engine);
  // Twice the requests in flight: a buffer is held until its write completes, which may be
  // after the PUT that follows it was answered.
  auto buffers = client_internal::ValueBuffers::Create(
      c->engine_.get(), 2 * static_cast<size_t>(options.max_in_flight));
  if (!buffers.ok()) return buffers.status();
  c->buffers_ = std::move(*buffers);

  auto conn = c->engine_->CreateConnection(std::move(*policy));
  if (!conn.ok()) return conn.status();
  c->conn_ = std::move(*conn);
  c->rpc_ = std::make_unique<rpc::RpcClient>(  // every answer frees room and wakes Wait
      c->conn_.get(), c->clock_, options.max_in_flight, [raw = c.get()] {
        raw->SendWaitingInline();
        raw->Signal();
      });
  // One deadline for the whole of Connect: the bootstrap exchange and the first round trip.
  const absl::Time deadline = c->clock_->Now() + options.timeout;
  absl::StatusOr<std::optional<rpc::Credentials>> credentials =
      LoadCredentials(options, hooks.embedding);
  if (!credentials.ok()) return credentials.status();
  absl::StatusOr<rpc::Session> session = rpc::Bootstrap(
      embedded != nullptr ? rpc::BootstrapDialer(embedded->bootstrap) : rpc::BootstrapDialer(),
      options.server, credentials->has_value() ? &**credentials : nullptr,
      engine::EncodeConnectionInfo(c->conn_->local_info()), options.timeout);
  if (!session.ok()) {
    return absl::Status(session.status().code(),
                        absl::StrCat("connecting to kvserver at ", options.server, ": ",
                                     session.status().message()));
  }
  auto remote = engine::DecodeConnectionInfo(session->remote_info);
  if (!remote.ok()) return remote.status();
  remote->qp.token = session->token;
  if (absl::Status st = c->conn_->Connect(*remote); !st.ok()) return st;
  NodeClient* self = c.get();
  if (embedded != nullptr) {
    c->poller_ = embedded->add_poller([self] { return self->PollEmbedded(); });
  } else {
    if (!options.caller_progress) c->engine_->Start();
    c->ticker_id_ = DeadlineTicker::Get().Add([self] { self->rpc_->CheckDeadlines(); });
  }
  // The first message proves the data path both ways (the server releases a connection that
  // sends none within its handshake deadline), and a path that does not work fails here.
  const absl::Status ping = c->Ping(std::max(deadline - c->clock_->Now(), absl::Milliseconds(1)));
  if (!ping.ok()) {
    return absl::Status(ping.code(), absl::StrCat("connecting to kvserver at ", options.server,
                                                  ": first round trip: ", ping.message()));
  }
  return c;
}

absl::Status NodeClient::UseDevice() {
  const ClientEmbedding* embedded = hooks_.embedding;
  if (embedded != nullptr) {
    if (embedded->device == nullptr || embedded->clock == nullptr || !embedded->bootstrap ||
        !embedded->wait || !embedded->add_poller || !embedded->remove_poller) {
      return absl::InvalidArgumentError("an embedded client needs every ClientEmbedding field");
    }
    device_ = embedded->device;
    clock_ = embedded->clock;
    return absl::OkStatus();
  }
  backends::DeviceSpec spec =
      backends::DeviceSpec::For(options_.transport, options_.soft_host, options_.verbs_device);
  // The caller waits for an answer, then sends its next request: that request carries the
  // answer's ACK (soft), which would otherwise go in a packet of its own.
  spec.hold_acks_until_wait = options_.caller_progress;
  // The device is this client's alone, and its one connection is all a waiting caller
  // watches: it sleeps in recv on that stream (soft), one system call per answer, not two.
  spec.wait_in_read = options_.caller_progress;
  auto device = backends::OpenDevice(spec);
  if (!device.ok()) return device.status();
  owned_device_ = std::move(*device);
  device_ = owned_device_.get();
  return absl::OkStatus();
}

absl::StatusOr<std::optional<rpc::Credentials>> LoadCredentials(const ClientOptions& options,
                                                                const ClientEmbedding* embedding) {
  if (embedding != nullptr && embedding->credentials != nullptr) {
    return std::optional<rpc::Credentials>(*embedding->credentials);
  }
  if (options.auth_file.empty()) {
    if (!options.user.empty()) {
      return absl::InvalidArgumentError("a user without an auth file: give auth_file too");
    }
    return std::optional<rpc::Credentials>();
  }
  absl::StatusOr<rpc::AuthTable> table = rpc::AuthTable::Load(options.auth_file);
  if (!table.ok()) {
    return absl::Status(table.status().code(),
                        absl::StrCat("auth file: ", table.status().message()));
  }
  absl::StatusOr<rpc::Credentials> c = table->CredentialsOf(options.user);
  if (!c.ok()) {
    return absl::Status(c.status().code(),
                        absl::StrCat(options.auth_file, ": ", c.status().message()));
  }
  return std::optional<rpc::Credentials>(*std::move(c));
}

NodeClient::~NodeClient() {
  if (poller_) hooks_.embedding->remove_poller(*poller_);
  stop_ = true;
  if (ticker_id_ != 0) DeadlineTicker::Get().Remove(ticker_id_);
  if (engine_) engine_->Stop();
  RingQueue<WaitingInline> waiting;
  {
    MutexLock l(&waiting_mu_);
    waiting.swap(waiting_inline_);
    waiting_count_.store(0);
  }
  for (; !waiting.empty(); waiting.pop_front()) {
    waiting.front().done(client_internal::NotSent(absl::CancelledError("client destroyed")));
  }
  rpc_.reset();   // fails calls still outstanding with CANCELLED
  conn_.reset();  // flushes writes still queued
}

namespace {
struct NodeBatch : Client::Batch::State {
  explicit NodeBatch(engine::Connection::Batch b) : batch(std::move(b)) {}
  engine::Connection::Batch batch;
};
}  // namespace

Client::Batch NodeClient::BeginBatch() {
  return Batch(std::make_unique<NodeBatch>(conn_->BeginBatch()));
}

absl::Status NodeClient::ConnectionError() const {
  return absl::UnavailableError(
      absl::StrCat("connection to kvserver at ", options_.server, " lost"));
}

void NodeClient::Signal() {
  {
    std::lock_guard<std::mutex> l(progress_mu_);
    ++progress_epoch_;
  }
  progress_cv_.notify_all();
}

int NodeClient::PollEmbedded() {
  const int work = engine_->PollOnce();
  // Deadlines are checked every 5 ms of the clock, as the ticker thread does in real time.
  if (const absl::Time now = clock_->Now(); now >= next_deadline_check_) {
    next_deadline_check_ = now + absl::Milliseconds(5);
    return work + rpc_->CheckDeadlines();
  }
  return work;
}

void NodeClient::Wait(const std::function<bool()>& done) {
  if (hooks_.embedding != nullptr) return hooks_.embedding->wait(done);
  while (!done()) {
    if (options_.caller_progress) {
      std::unique_lock<std::mutex> drive(drive_mu_, std::try_to_lock);
      if (drive.owns_lock()) {
        // Drive until this caller's own work is done; others' callbacks run here too.
        while (!done() && !stop_.load()) engine_->Drive(absl::Milliseconds(1));
        drive.unlock();
        Signal();  // another waiter may take over
        continue;
      }
    }
    std::unique_lock<std::mutex> l(progress_mu_);
    const uint64_t epoch = progress_epoch_;
    progress_cv_.wait_for(l, std::chrono::milliseconds(options_.caller_progress ? 1 : 100),
                          [&] { return progress_epoch_ != epoch || done(); });
  }
}

absl::Status NodeClient::Call(proto::Method method, const google::protobuf::Message& req,
                              Reply done, const engine::SendOptions& send) {
  // Every answer wakes the threads in Wait after its callback ran (the RpcClient's hook).
  // Serialized into this thread's buffer: RpcClient::Call copies it before returning.
  thread_local std::string request;
  req.SerializeToString(&request);
  absl::StatusOr<uint64_t> id =
      rpc_->Call(method, request, options_.timeout, std::move(done), send);
  if (request.capacity() > 64 * 1024) std::string().swap(request);
  if (id.ok()) return absl::OkStatus();
  return conn_->failed() ? ConnectionError() : id.status();
}

absl::Status NodeClient::Ping(absl::Duration timeout) {
  proto::PingRequest req;
  return Await<absl::StatusOr<std::string>>([&](Reply d) {
           absl::StatusOr<uint64_t> id =
               rpc_->Call(proto::PING, req.SerializeAsString(), timeout, d);
           if (!id.ok()) d(conn_->failed() ? ConnectionError() : id.status());
         })
      .status();
}

}  // namespace unloadkv
