#include "transport/engine/prometheus_metrics.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "CivetServer.h"
#include "absl/strings/str_cat.h"
#include "prometheus/text_serializer.h"
#include "transport/base/net.h"

namespace unloadkv::engine {

prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  prometheus::Histogram::BucketBoundaries b;
  for (double s = 1e-6; s < 1.5; s *= 2) b.push_back(s);
  return b;
}

PrometheusEngineMetrics::PrometheusEngineMetrics(std::shared_ptr<prometheus::Registry> registry)
    : registry_(std::move(registry)) {
  auto& writes = prometheus::BuildCounter()
                     .Name("unloadkv_engine_writes_total")
                     .Help("Writes this node initiated, by path and result")
                     .Register(*registry_);
  auto& bytes = prometheus::BuildCounter()
                    .Name("unloadkv_engine_write_bytes_total")
                    .Help("Bytes of successful writes this node initiated, by path")
                    .Register(*registry_);
  auto& latency = prometheus::BuildHistogram()
                      .Name("unloadkv_engine_write_latency_seconds")
                      .Help("Write latency from post to completion, by path")
                      .Register(*registry_);
  for (int p = 0; p < 2; ++p) {
    const std::string path = PathName(static_cast<Path>(p));
    writes_[p][0] = &writes.Add({{"path", path}, {"result", "error"}});
    writes_[p][1] = &writes.Add({{"path", path}, {"result", "ok"}});
    bytes_[p] = &bytes.Add({{"path", path}});
    latency_[p] = &latency.Add({{"path", path}}, LatencyBuckets());
  }
  auto& failures = prometheus::BuildCounter()
                       .Name("unloadkv_unload_validation_failures_total")
                       .Help("Staged writes the unload workers refused, by reason")
                       .Register(*registry_);
  for (int r = 0; r < kValidationFailureKinds; ++r) {
    failures_[r] =
        &failures.Add({{"reason", ValidationFailureName(static_cast<ValidationFailure>(r))}});
  }
  applied_ = &prometheus::BuildCounter()
                  .Name("unloadkv_unload_applied_writes_total")
                  .Help("Staged writes from peers that unload workers validated and applied")
                  .Register(*registry_)
                  .Add({});
  ring_ = &prometheus::BuildGauge()
               .Name("unloadkv_staging_ring_slots_in_use")
               .Help("Staging slots in use on the connection that last posted an unloaded write")
               .Register(*registry_)
               .Add({});
  ring_slots_ = &prometheus::BuildGauge()
                     .Name("unloadkv_staging_ring_slots")
                     .Help(
                         "Staging slots (all lanes) of the connection that last posted an "
                         "unloaded write: the capacity unloadkv_staging_ring_slots_in_use fills")
                     .Register(*registry_)
                     .Add({});
  switches_ = &prometheus::BuildCounter()
                   .Name("unloadkv_policy_switches_total")
                   .Help("Times a path policy changed its preferred path for a class of writes")
                   .Register(*registry_)
                   .Add({});
}

void PrometheusEngineMetrics::OnWriteCompleted(Path path, uint32_t bytes, absl::Duration latency,
                                               bool ok) {
  const int p = static_cast<int>(path);
  writes_[p][ok ? 1 : 0]->Increment();
  if (ok) {
    bytes_[p]->Increment(bytes);
    if (latency != absl::InfiniteDuration()) latency_[p]->Observe(absl::ToDoubleSeconds(latency));
  }
}

void PrometheusEngineMetrics::OnValidationFailure(ValidationFailure reason) {
  failures_[static_cast<int>(reason)]->Increment();
}

void PrometheusEngineMetrics::OnStagedWriteApplied(uint32_t) { applied_->Increment(); }

void PrometheusEngineMetrics::OnRingOccupancy(uint32_t used, uint32_t capacity) {
  ring_->Set(used);
  ring_slots_->Set(capacity);
}

void PrometheusEngineMetrics::OnPolicySwitch() { switches_->Increment(); }

namespace {

// Binds `sa` once with the options civetweb uses, to name the reason a bind fails in plain
// words (civetweb's exception text is about its own internals).
absl::Status ProbeBind(const sockaddr_in& sa, const std::string& address) {
  ScopedFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return absl::UnavailableError("metrics: socket() failed");
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd.get(), reinterpret_cast<const sockaddr*>(&sa), sizeof(sa)) != 0) {
    return absl::UnavailableError(absl::StrCat("metrics: cannot listen on ", address, ": ",
                                               std::strerror(errno),
                                               errno == EADDRINUSE ? " (port in use)" : ""));
  }
  return absl::OkStatus();
}

}  // namespace

// One GET path of the endpoint: writes the page as a complete HTTP/1.1 response.
class MetricsEndpoint::Handler : public CivetHandler {
 public:
  explicit Handler(PageFunction page) : page_(std::move(page)) {}
  bool handleGet(CivetServer*, mg_connection* conn) override {
    const Page p = page_();
    mg_printf(conn,
              "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
              "Cache-Control: no-store\r\nConnection: close\r\n\r\n",
              p.content_type.c_str(), p.body.size());
    mg_write(conn, p.body.data(), p.body.size());
    return true;
  }

 private:
  const PageFunction page_;
};

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const std::string& address, std::shared_ptr<prometheus::Registry> registry) {
  absl::StatusOr<sockaddr_in> sa = ParseHostPort(address, /*allow_port_zero=*/true);
  if (!sa.ok()) return sa.status();
  if (sa->sin_port != 0) {
    if (absl::Status st = ProbeBind(*sa, address); !st.ok()) return st;
  }
  std::unique_ptr<MetricsEndpoint> m(new MetricsEndpoint());
  // civetweb gives each connection a worker thread until it closes or its request times out,
  // so idle connections could starve scrapes: kThreads workers, and a connection that sends
  // no complete request within kRequestTimeout is closed.
  // Name, value pairs.
  // clang-format off
  const std::vector<std::string> options = {
      "listening_ports",    address,
      "num_threads",        std::to_string(kThreads),
      "request_timeout_ms", std::to_string(absl::ToInt64Milliseconds(kRequestTimeout)),
      "enable_keep_alive",  "no",
      // A connection flood waits in the accept queue instead of losing SYNs (a lost SYN costs
      // a scraper a 1 s retransmission, then 3, then 7...).
      "listen_backlog",     "1024",
      "connection_queue",   "256",
  };
  // clang-format on
  // civetweb reports a failed bind by throwing; nothing else here throws.
  try {
    m->server_ = std::make_unique<CivetServer>(options);
  } catch (const std::exception&) {
    return absl::UnavailableError(
        absl::StrCat("metrics: cannot listen on ", address, " (port in use?)"));
  }
  m->Handle("/metrics", [registry] {
    return Page{"text/plain; version=0.0.4; charset=utf-8",
                prometheus::TextSerializer().Serialize(registry->Collect())};
  });
  std::vector<int> ports = m->server_->getListeningPorts();
  sa->sin_port = htons(static_cast<uint16_t>(ports.empty() ? 0 : ports[0]));
  m->base_url_ = absl::StrCat("http://", FormatHostPort(*sa));
  m->url_ = m->base_url_ + "/metrics";
  return m;
}

MetricsEndpoint::~MetricsEndpoint() {
  if (server_ != nullptr) server_->close();  // joins its threads before the handlers go
}

void MetricsEndpoint::Handle(const std::string& path, PageFunction page) {
  handlers_.push_back(std::make_unique<Handler>(std::move(page)));
  server_->addHandler(path + "$", handlers_.back().get());  // "$": this path exactly
}

}  // namespace unloadkv::engine
