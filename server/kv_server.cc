#include "server/kv_server.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "proto/limits.h"
#include "transport/backends/open_device.h"
#include "transport/base/logging.h"

namespace unloadkv::server {

absl::Status ValidateOptions(const KvServerOptions& o) {
  if (absl::StatusOr<sockaddr_in> a = ParseHostPort(o.listen, true); !a.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--listen: ", a.status().message()));
  }
  if (o.transport != "soft" && o.transport != "verbs") {
    return absl::InvalidArgumentError(
        absl::StrCat("--transport='", o.transport, "': choose soft or verbs"));
  }
  if (o.arena_bytes < SlabArena::kChunkBytes || o.arena_bytes > (uint64_t{1} << 40)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--arena_bytes=", o.arena_bytes, ": must be between 1 MiB and 1 TiB"));
  }
  if (absl::StatusOr<std::unique_ptr<engine::PathPolicy>> p = engine::MakePolicy(o.policy);
      !p.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--policy: ", p.status().message()));
  }
  if (o.unload_workers < 1 || o.unload_workers > engine::kMaxUnloadWorkers) {
    return absl::InvalidArgumentError(absl::StrCat("--unload_workers=", o.unload_workers,
                                                   ": must be in 1..", engine::kMaxUnloadWorkers));
  }
  if (!o.metrics_address.empty()) {
    if (absl::StatusOr<sockaddr_in> a = ParseHostPort(o.metrics_address, true); !a.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--metrics: ", a.status().message()));
    }
  }
  if (o.max_connections < 1 || o.max_connections > 65536) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_connections=", o.max_connections, ": must be in 1..65536"));
  }
  if (o.max_half_open < 1 || o.max_half_open > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_half_open=", o.max_half_open, ": must be in 1..4096"));
  }
  if (o.max_pending_hellos < 1 || o.max_pending_hellos > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_pending_hellos=", o.max_pending_hellos, ": must be in 1..4096"));
  }
  if (o.hello_deadline <= absl::ZeroDuration() || o.handshake_deadline <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("hello and handshake deadlines must be positive");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<KvServer>> KvServer::Start(const KvServerOptions& options) {
  if (absl::Status st = ValidateOptions(options); !st.ok()) return st;
  std::unique_ptr<KvServer> s(new KvServer());
  s->options_ = options;
  s->registry_ = std::make_shared<prometheus::Registry>();
  s->engine_metrics_ = std::make_unique<engine::PrometheusEngineMetrics>(s->registry_);
  s->server_metrics_ = std::make_unique<ServerMetrics>(s->registry_);

  // The listener first: a busy port should fail before anything large is allocated.
  rpc::BootstrapAcceptor::Options ao;
  ao.max_pending = static_cast<size_t>(options.max_pending_hellos);
  ao.line_deadline = options.hello_deadline;
  auto acceptor = rpc::BootstrapAcceptor::Listen(options.listen, ao);
  if (!acceptor.ok()) return acceptor.status();
  s->address_ = (*acceptor)->address();

  auto device = backends::OpenDevice(backends::DeviceSpec::For(
      options.transport, options.listen.substr(0, options.listen.rfind(':')),
      options.verbs_device));
  if (!device.ok()) return device.status();
  s->device_ = std::move(*device);

  engine::EngineOptions eo;
  eo.unload_workers = options.unload_workers;
  eo.max_connections_per_worker = static_cast<uint32_t>(options.max_connections);
  eo.huge_pages = options.huge_pages;
  eo.max_message_bytes = proto::kMaxMessageBytes;
  eo.metrics = s->engine_metrics_.get();
  auto engine = engine::Engine::Create(s->device_.get(), eo);
  if (!engine.ok()) return engine.status();
  s->engine_ = std::move(*engine);

  s->arena_ = std::make_unique<MappedMemory>(options.arena_bytes, options.huge_pages);
  if (s->arena_->data() == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("arena: cannot map ", options.arena_bytes, " bytes; lower --arena_bytes"));
  }
  s->arena_memory_ = DescribePages(*s->arena_, options.huge_pages);
  uint32_t access = rnic::kLocalWrite | rnic::kRemoteWrite | rnic::kRemoteRead;
  if (s->arena_->huge()) access |= rnic::kHugePageBacked;
  auto mr = s->engine_->RegisterMemory(s->arena_->data(), s->arena_->size(), access);
  if (!mr.ok()) return mr.status();
  s->arena_mr_ = std::move(*mr);

  s->store_ = std::make_unique<KvStore>(s->arena_->data(), s->arena_->size());
  KvServer* self = s.get();
  s->service_ = std::make_unique<KvService>(
      s->store_.get(), s->arena_mr_->address(), s->arena_mr_->rkey(), s->server_metrics_.get(),
      RealClock::Get(), [self](proto::StatsResponse* r) {
        // Admitted ones count as soon as they ask.
        r->set_connections(self->connections() + self->half_open());
        r->set_staging_memory(self->staging_memory());
        r->set_transport(self->transport());
      });
  s->rpc_ = std::make_unique<rpc::RpcServer>(RealClock::Get());
  s->service_->RegisterWith(s->rpc_.get());
  Admission::Options ad;
  ad.policy = options.policy;
  ad.max_connections = options.max_connections;
  ad.max_half_open = static_cast<size_t>(options.max_half_open);
  ad.handshake_deadline = options.handshake_deadline;
  s->admission_ = std::make_unique<Admission>(
      std::move(*acceptor), ad, s->engine_.get(), s->rpc_.get(), s->server_metrics_.get(),
      [self] { return self->connections(); },
      [self](uint64_t id) { self->store_->DropClient(id); });

  if (!options.metrics_address.empty()) {
    auto m = engine::MetricsEndpoint::Start(options.metrics_address, s->registry_);
    if (!m.ok()) return m.status();
    s->metrics_ = std::move(*m);
  }
  s->engine_->Start();
  return s;
}

KvServer::~KvServer() { Shutdown(); }

size_t KvServer::connections() const {
  MutexLock l(&mu_);
  return conns_.size();
}

void KvServer::Poll(absl::Duration wait) {
  if (shut_down_) return;
  for (Admission::Established& e : admission_->Poll(wait)) {
    Log(LogLevel::kInfo, absl::StrCat("kvserver: client ", e.id, " connected"));
    MutexLock l(&mu_);
    conns_[e.id] = std::move(e.conn);
  }
  Reap();
  KvStore::Stats st = store_->stats();
  server_metrics_->SetArena(st.arena_used_bytes, st.arena_bytes - st.arena_used_bytes);
  server_metrics_->SetKeys(st.keys);
  server_metrics_->SetConnections(connections());
  server_metrics_->SetAdmission(admission_->pending_hellos(), admission_->half_open());
}

void KvServer::Reap() {
  std::vector<std::pair<uint64_t, std::shared_ptr<engine::Connection>>> gone;
  {
    MutexLock l(&mu_);
    for (auto it = conns_.begin(); it != conns_.end();) {
      if (it->second->failed()) {
        gone.emplace_back(it->first, std::move(it->second));
        it = conns_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& [id, conn] : gone) {
    conn->SetMessageHandler(nullptr);  // releases the RPC server's share of the connection
    const size_t dropped = store_->DropClient(id);
    Log(LogLevel::kInfo, absl::StrCat("kvserver: client ", id, " disconnected; ", dropped,
                                      " unused grants returned"));
  }
}

void KvServer::Run(const std::atomic<bool>& stop) {
  while (!stop.load()) Poll(absl::Milliseconds(50));
  Shutdown();
}

void KvServer::Shutdown() {
  // Safe on a half-built server (Start failed part way): every member may be null.
  if (shut_down_) return;
  shut_down_ = true;
  if (service_ != nullptr) service_->SetStopping();
  if (engine_ != nullptr) engine_->Stop();  // no handler runs from here on
  admission_.reset();                       // stops listening; releases half-open connections
  std::map<uint64_t, std::shared_ptr<engine::Connection>> conns;
  {
    MutexLock l(&mu_);
    conns.swap(conns_);
  }
  for (auto& [id, conn] : conns) {
    conn->SetMessageHandler(nullptr);
    store_->DropClient(id);
  }
  conns.clear();
  metrics_.reset();
}

}  // namespace unloadkv::server
