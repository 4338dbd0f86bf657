#include "server/admission.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "transport/backends/peer_address.h"
#include "transport/rpc/bootstrap.h"

namespace unloadkv::server {

Admission::~Admission() {
  for (HalfOpen& h : half_open_) Release(h);
}

void Admission::Release(HalfOpen& h) {
  h.conn->SetMessageHandler(nullptr);  // the RPC server's share; ours goes with `h`
  h.conn.reset();
  if (released_) released_(h.id);
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
      out->push_back(Established{it->id, std::move(it->conn)});
      metrics_->OnConnectionAccepted();
    } else if (it->conn->failed()) {
      metrics_->OnConnectionRefused("handshake_failed");
      refusals_log_.Log(LogLevel::kWarning, absl::StrCat("kvserver: client ", it->id,
                                                         "'s data path failed before "
                                                         "its first message; released"));
      Release(*it);
    } else if (it->deadline <= now) {
      metrics_->OnConnectionRefused("handshake_timeout");
      refusals_log_.Log(LogLevel::kWarning,
                        absl::StrCat("kvserver: client ", it->id, " sent no message within ",
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
                   " half-open connections; released the oldest (client ", victim->id, ")"));
  Release(*victim);
  half_open_.erase(victim);
}

void Admission::Answer(rpc::BootstrapAcceptor::Hello hello) {
  const std::string prefix = absl::StrCat(rpc::kBootstrapHello, " ");
  if (!absl::StartsWith(hello.line, prefix)) {
    return Refuse(hello.fd.get(), "hello",
                  absl::StrCat("expected '", rpc::kBootstrapHello, " <connection info>'"));
  }
  absl::StatusOr<engine::ConnectionInfo> info =
      engine::DecodeConnectionInfo(absl::string_view(hello.line).substr(prefix.size()));
  if (!info.ok()) return Refuse(hello.fd.get(), "hello", info.status().message());
  absl::StatusOr<rnic::QpAttributes> dial = backends::DialBackAttributes(info->qp, hello.peer_host);
  if (!dial.ok()) return Refuse(hello.fd.get(), "address", dial.status().message());
  info->qp = *dial;
  absl::StatusOr<engine::ConnectionInfo> local = Admit(*info);
  if (!local.ok()) {
    (void)rpc::AnswerNow(hello.fd.get(), absl::StrCat("error ", local.status().message()));
    return;
  }
  local->qp = backends::AdvertisedAttributes(local->qp, hello.local_host);
  absl::Status st =
      rpc::AnswerNow(hello.fd.get(), absl::StrCat("ok ", engine::EncodeConnectionInfo(*local)));
  if (!st.ok()) {  // the client is gone: so is the connection just made for it
    Release(half_open_.back());
    half_open_.pop_back();
    half_open_count_.store(half_open_.size(), std::memory_order_relaxed);
    Refuse(hello.fd.get(), "error", st.message());
  }
}

absl::StatusOr<engine::ConnectionInfo> Admission::Admit(const engine::ConnectionInfo& client) {
  if (established_() + half_open_.size() >= static_cast<size_t>(options_.max_connections)) {
    return Refused(
        absl::StatusCode::kResourceExhausted, "limit",
        absl::StrCat("at the connection limit (--max_connections=", options_.max_connections, ")"));
  }
  if (half_open_.size() >= options_.max_half_open) MakeRoom();
  absl::StatusOr<std::unique_ptr<engine::PathPolicy>> policy = engine::MakePolicy(options_.policy);
  if (!policy.ok()) return Refused(policy.status().code(), "error", policy.status().message());
  absl::StatusOr<std::unique_ptr<engine::Connection>> created =
      engine_->CreateConnection(std::move(*policy));
  if (!created.ok()) return Refused(created.status().code(), "error", created.status().message());
  HalfOpen h{next_id_++, std::shared_ptr<engine::Connection>(std::move(*created)),
             options_.clock->Now() + options_.handshake_deadline};
  rpc_->Serve(h.conn, h.id);
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

void Admission::Refuse(int fd, absl::string_view reason, absl::string_view why) {
  absl::Status st = Refused(absl::StatusCode::kFailedPrecondition, reason, why);
  (void)rpc::AnswerNow(fd, absl::StrCat("error ", st.message()));
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
