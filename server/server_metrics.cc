#include "server/server_metrics.h"

#include <string>

#include "absl/strings/ascii.h"
#include "transport/engine/prometheus_metrics.h"

namespace unloadkv::server {
namespace {

std::string MethodLabel(int m) {
  return absl::AsciiStrToLower(proto::Method_Name(static_cast<proto::Method>(m)));
}

std::string CodeLabel(absl::StatusCode code) {
  return absl::AsciiStrToLower(absl::StatusCodeToString(code));
}

}  // namespace

ServerMetrics::ServerMetrics(std::shared_ptr<prometheus::Registry> registry) {
  requests_ = &prometheus::BuildCounter()
                   .Name("unloadkv_rpc_requests_total")
                   .Help("RPC requests answered, by method and canonical status code")
                   .Register(*registry);
  auto& latency = prometheus::BuildHistogram()
                      .Name("unloadkv_rpc_latency_seconds")
                      .Help("RPC handling time from arrival to reply, by method")
                      .Register(*registry);
  for (int m = 0; m < kMethods; ++m) {
    latency_[m] = &latency.Add({{"method", MethodLabel(m)}}, engine::LatencyBuckets());
  }
  auto& writes = prometheus::BuildCounter()
                     .Name("unloadkv_value_writes_total")
                     .Help(
                         "Values PUT requests published, by the path the client posted them on "
                         "(inline: in the PUT)")
                     .Register(*registry);
  value_writes_[proto::PATH_UNKNOWN] = &writes.Add({{"path", "unknown"}});
  value_writes_[proto::OFFLOAD] = &writes.Add({{"path", "offload"}});
  value_writes_[proto::UNLOAD] = &writes.Add({{"path", "unload"}});
  value_writes_[proto::INLINE] = &writes.Add({{"path", "inline"}});
  auto gauge = [&](const char* name, const char* help) {
    return &prometheus::BuildGauge().Name(name).Help(help).Register(*registry).Add({});
  };
  arena_used_ = gauge("unloadkv_arena_used_bytes", "Arena bytes held by values and grants");
  arena_free_ = gauge("unloadkv_arena_free_bytes",
                      "Arena bytes not held: in free chunks or in free slots of a size class");
  keys_ = gauge("unloadkv_keys", "Keys in the index");
  connections_ = gauge("unloadkv_connections", "Client connections open");
  accepted_ = &prometheus::BuildCounter()
                   .Name("unloadkv_connections_accepted_total")
                   .Help("Client connections accepted")
                   .Register(*registry)
                   .Add({});
  refused_ = &prometheus::BuildCounter()
                  .Name("unloadkv_connections_refused_total")
                  .Help("Admission attempts given up on, by reason")
                  .Register(*registry);
  denied_ = &prometheus::BuildCounter()
                 .Name("unloadkv_requests_denied_total")
                 .Help("Requests refused for who sent them, by method and reason")
                 .Register(*registry);
  idle_closed_ = &prometheus::BuildCounter()
                      .Name("unloadkv_connections_closed_idle_total")
                      .Help("Client connections closed after --idle_timeout_s without a request")
                      .Register(*registry)
                      .Add({});
  grants_refused_ = &prometheus::BuildCounter()
                         .Name("unloadkv_grants_refused_total")
                         .Help("GRANT requests refused for a quota, by reason")
                         .Register(*registry);
  pending_hellos_ = gauge("unloadkv_bootstrap_pending",
                          "Bootstrap connections whose hello line is not complete yet");
  half_open_ = gauge("unloadkv_connections_half_open",
                     "Admitted connections the client has sent no message on yet");
}

void ServerMetrics::OnRpc(proto::Method method, const absl::Status& status,
                          absl::Duration latency) {
  const int m = static_cast<int>(method);
  if (m < 0 || m >= kMethods) return;
  const int code = static_cast<int>(status.code());
  if (code >= 0 && code < kCodes) {
    prometheus::Counter* c = request_counters_[m][code].load(std::memory_order_acquire);
    if (c == nullptr) {
      c = &requests_->Add({{"method", MethodLabel(m)}, {"code", CodeLabel(status.code())}});
      request_counters_[m][code].store(c, std::memory_order_release);
    }
    c->Increment();
  }
  latency_[m]->Observe(absl::ToDoubleSeconds(latency));
}

void ServerMetrics::OnValueWrite(proto::WritePath path) {
  const int p = static_cast<int>(path);
  value_writes_[p >= 0 && p < 4 ? p : 0]->Increment();
}

void ServerMetrics::SetArena(uint64_t used_bytes, uint64_t free_bytes) {
  arena_used_->Set(static_cast<double>(used_bytes));
  arena_free_->Set(static_cast<double>(free_bytes));
}
void ServerMetrics::SetKeys(uint64_t keys) { keys_->Set(static_cast<double>(keys)); }
void ServerMetrics::SetConnections(uint64_t n) { connections_->Set(static_cast<double>(n)); }
void ServerMetrics::OnConnectionAccepted() { accepted_->Increment(); }
void ServerMetrics::OnConnectionRefused(absl::string_view reason, uint64_t n) {
  refused_->Add({{"reason", std::string(reason)}}).Increment(static_cast<double>(n));
}
void ServerMetrics::SetAdmission(uint64_t pending_hellos, uint64_t half_open) {
  pending_hellos_->Set(static_cast<double>(pending_hellos));
  half_open_->Set(static_cast<double>(half_open));
}

void ServerMetrics::OnDenied(proto::Method method, absl::string_view reason) {
  denied_->Add({{"method", MethodLabel(static_cast<int>(method))}, {"reason", std::string(reason)}})
      .Increment();
}

void ServerMetrics::OnIdleClosed() { idle_closed_->Increment(); }

void ServerMetrics::OnGrantRefused(absl::string_view reason) {
  grants_refused_->Add({{"reason", std::string(reason)}}).Increment();
}

}  // namespace unloadkv::server
