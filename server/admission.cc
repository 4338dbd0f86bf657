#include "server/admission.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "transport/backends/peer_address.h"
#include "transport/rpc/bootstrap.h"

namespace unloadkv::server {
namespace {

// The answer line refusing a client for `st`: its code and message.
std::string Refusal(const absl::Status& st) {
  rpc::AnswerLine a;
  a.code = st.code();
  a.text = std::string(st.message());
  return rpc::EncodeAnswer(a);
}

}  // namespace

Admission::~Admission() {
  for (HalfOpen& h : half_open_) Release(h);
}

void Admission::Release(HalfOpen& h) {
  h.conn->SetMessageHandler(nullptr);  // the RPC server's share; ours goes with `h`
  h.conn.reset();
  if (released_) released_(h.peer->id);
}

std::vector<Admission::Established> Admission::Poll(absl::Duration wait) {
  std::vector<Established> out;
  Sweep(&out);
  // Connections established now go to the caller at once: until it takes them they are
  // counted neither as half-open nor by the caller, so a Stats answer would miss them for as
  // long as the acceptor waited (client_test saw "0 connections" under ASan).
  if (!out.empty()) wait = absl::ZeroDuration();
  // A late half-open connection's deadline bounds the wait, so it is released on time.
  for (const HalfOpen& h : half_open_) {
    wait = std::min(wait, std::max(h.deadline - options_.clock->Now(), absl::ZeroDuration()));
  }
  if (acceptor_ != nullptr) {
    for (rpc::BootstrapAcceptor::Hello& hello : acceptor_->Poll(wait)) Answer(std::move(hello));
    CountAcceptorRefusals();
  }
  Sweep(&out);
  return out;
}

void Admission::Sweep(std::vector<Established>* out) {
  const absl::Time now = options_.clock->Now();
  for (auto it = half_open_.begin(); it != half_open_.end();) {
    if (it->conn->messages_received() > 0) {
      out->push_back(Established{std::move(it->peer), std::move(it->host), std::move(it->conn)});
      metrics_->OnConnectionAccepted();
    } else if (it->conn->failed()) {
      metrics_->OnConnectionRefused("handshake_failed");
      refusals_log_.Log(LogLevel::kWarning, absl::StrCat("kvserver: client ", it->peer->id,
                                                         "'s data path failed before "
                                                         "its first message; released"));
      Release(*it);
    } else if (it->deadline <= now) {
      metrics_->OnConnectionRefused("handshake_timeout");
      refusals_log_.Log(LogLevel::kWarning,
                        absl::StrCat("kvserver: client ", it->peer->id, " sent no message within ",
                                     absl::FormatDuration(options_.handshake_deadline),
                                     " of its hello; released"));
      Release(*it);
    } else {
      ++it;
      continue;
    }
    it = half_open_.erase(it);
  }
  half_open_count_.store(half_open_.size(), std::memory_order_relaxed);
}

void Admission::MakeRoom() {
  auto victim = std::find_if(half_open_.begin(), half_open_.end(),
                             [](const HalfOpen& h) { return h.conn->messages_received() == 0; });
  if (victim == half_open_.end()) return;  // all about to be established: Sweep hands them over
  metrics_->OnConnectionRefused("half_open_evicted");
  refusals_log_.Log(
      LogLevel::kWarning,
      absl::StrCat("kvserver: ", half_open_.size(),
                   " half-open connections; released the oldest (client ", victim->peer->id, ")"));
  Release(*victim);
  half_open_.erase(victim);
}

void Admission::Answer(rpc::BootstrapAcceptor::Hello hello) {
  absl::StatusOr<std::string> answer =
      Handshake(hello.challenge, hello.line, hello.peer_host, hello.local_host);
  if (!answer.ok()) {
    (void)rpc::AnswerNow(hello.fd.get(), Refusal(answer.status()));
    return;
  }
  if (absl::Status st = rpc::AnswerNow(hello.fd.get(), *answer); !st.ok()) {
    // The client is gone: so is the connection just made for it.
    Release(half_open_.back());
    half_open_.pop_back();
    half_open_count_.store(half_open_.size(), std::memory_order_relaxed);
    (void)Refused(absl::StatusCode::kUnavailable, "error", st.message());
  }
}

std::string Admission::AdmitEmbedded(const rpc::HelloFn& hello) {
  const std::string challenge = rpc::NewNonce();
  absl::StatusOr<std::string> line = hello(rpc::EncodeChallenge(challenge));
  absl::StatusOr<std::string> answer =
      line.ok() ? Handshake(challenge, *line, "", "") : line.status();
  if (!answer.ok()) return Refusal(answer.status());
  return *answer;
}

absl::StatusOr<std::string> Admission::Handshake(const std::string& challenge,
                                                 absl::string_view hello_line,
                                                 const std::string& peer_host,
                                                 const std::string& local_host) {
  const std::shared_ptr<const rpc::AuthTable> table = auth_ ? auth_() : nullptr;
  rpc::ServerHandshake hs(challenge);
  if (absl::Status st = hs.Verify(hello_line, table.get()); !st.ok()) {
    return Refused(st.code(), st.code() == absl::StatusCode::kUnauthenticated ? "auth" : "hello",
                   absl::StrCat(st.message(), peer_host.empty() ? "" : " (from ", peer_host,
                                peer_host.empty() ? "" : ")"));
  }
  absl::StatusOr<engine::ConnectionInfo> info = engine::DecodeConnectionInfo(hs.client_info());
  if (!info.ok())
    return Refused(absl::StatusCode::kInvalidArgument, "hello", info.status().message());
  if (!peer_host.empty()) {
    absl::StatusOr<rnic::QpAttributes> dial = backends::DialBackAttributes(info->qp, peer_host);
    if (!dial.ok()) return Refused(dial.status().code(), "address", dial.status().message());
    info->qp = *dial;
  }
  info->qp.token = hs.token();
  absl::StatusOr<engine::ConnectionInfo> local =
      Admit(*info, rpc::Peer{0, hs.user(), hs.roles()}, peer_host);
  if (!local.ok()) return local.status();
  if (!local_host.empty()) local->qp = backends::AdvertisedAttributes(local->qp, local_host);
  return hs.Accept(engine::EncodeConnectionInfo(*local));
}

absl::StatusOr<engine::ConnectionInfo> Admission::Admit(const engine::ConnectionInfo& client,
                                                        rpc::Peer peer, const std::string& host) {
  if (established_("") + half_open_.size() >= static_cast<size_t>(options_.max_connections)) {
    return Refused(
        absl::StatusCode::kResourceExhausted, "limit",
        absl::StrCat("at the connection limit (--max_connections=", options_.max_connections, ")"));
  }
  if (options_.max_per_host > 0 && !host.empty()) {
    size_t from_host = established_(host);
    for (const HalfOpen& h : half_open_) from_host += h.host == host;
    if (from_host >= static_cast<size_t>(options_.max_per_host)) {
      return Refused(absl::StatusCode::kResourceExhausted, "host_limit",
                     absl::StrCat("host ", host, " holds ", from_host,
                                  " connections, the limit (--max_connections_per_host=",
                                  options_.max_per_host, ")"));
    }
  }
  if (half_open_.size() >= options_.max_half_open) MakeRoom();
  absl::StatusOr<std::unique_ptr<engine::PathPolicy>> policy = engine::MakePolicy(options_.policy);
  if (!policy.ok()) return Refused(policy.status().code(), "error", policy.status().message());
  absl::StatusOr<std::unique_ptr<engine::Connection>> created =
      engine_->CreateConnection(std::move(*policy));
  if (!created.ok()) return Refused(created.status().code(), "error", created.status().message());
  peer.id = next_id_++;
  HalfOpen h{std::make_shared<const rpc::Peer>(std::move(peer)), host,
             std::shared_ptr<engine::Connection>(std::move(*created)),
             options_.clock->Now() + options_.handshake_deadline};
  rpc_->Serve(h.conn, *h.peer);
  absl::Status st = h.conn->Connect(client);  // never blocks: a dial nobody answers fails later
  if (!st.ok()) {
    Release(h);
    return Refused(st.code(), "error", st.message());
  }
  engine::ConnectionInfo local = h.conn->local_info();
  half_open_.push_back(std::move(h));
  half_open_count_.store(half_open_.size(), std::memory_order_relaxed);
  return local;
}

absl::Status Admission::Refused(absl::StatusCode code, absl::string_view reason,
                                absl::string_view why) {
  metrics_->OnConnectionRefused(reason);
  refusals_log_.Log(LogLevel::kWarning, absl::StrCat("kvserver: refused a client: ", why));
  return absl::Status(code, why);
}

void Admission::CountAcceptorRefusals() {
  const rpc::BootstrapAcceptor::Counters& c = acceptor_->counters();
  auto count = [&](uint64_t now, uint64_t& seen, absl::string_view reason) {
    if (now > seen) metrics_->OnConnectionRefused(reason, now - seen);
    seen = now;
  };
  count(c.timed_out, seen_.timed_out, "hello_timeout");
  count(c.evicted, seen_.evicted, "hello_evicted");
  count(c.too_long, seen_.too_long, "hello");
  count(c.closed, seen_.closed, "hello_closed");
  count(c.accept_failed, seen_.accept_failed, "accept_failed");
}

}  // namespace unloadkv::server
