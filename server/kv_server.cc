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
  if (o.unload_workers < 1 || o.unload_workers > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("--unload_workers=", o.unload_workers, ": must be in 1..64"));
  }
  if (!o.metrics_address.empty()) {
    if (absl::StatusOr<sockaddr_in> a = ParseHostPort(o.metrics_address, true); !a.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--metrics: ", a.status().message()));
    }
  }
  if (o.max_connections < 1 || o.max_connections > 65536) {
    return absl::InvalidArgumentError("--max_connections must be in 1..65536");
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
  auto listener = rpc::BootstrapListener::Listen(options.listen);
  if (!listener.ok()) return listener.status();
  s->listener_ = std::move(*listener);
  s->address_ = s->listener_->address();

  backends::DeviceSpec spec;
  spec.transport = options.transport;
  spec.soft_host = options.listen.substr(0, options.listen.rfind(':'));
  spec.verbs_device = options.verbs_device;
  auto device = backends::OpenDevice(spec);
  if (!device.ok()) return device.status();
  s->device_ = std::move(*device);

  engine::EngineOptions eo;
  eo.unload_workers = options.unload_workers;
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
  s->arena_memory_ = s->arena_->huge()    ? "2 MiB huge pages"
                     : options.huge_pages ? "4 KiB pages (no 2 MiB huge pages available)"
                                          : "4 KiB pages (--huge_pages=false)";
  uint32_t access = rnic::kLocalWrite | rnic::kRemoteWrite | rnic::kRemoteRead;
  if (s->arena_->huge()) access |= rnic::kHugePageBacked;
  auto mr = s->engine_->RegisterMemory(s->arena_->data(), s->arena_->size(), access);
  if (!mr.ok()) return mr.status();
  s->arena_mr_ = std::move(*mr);

  s->store_ = std::make_unique<KvStore>(s->arena_->data(), s->arena_->size());
  KvServer* self = s.get();
  s->service_ = std::make_unique<KvService>(s->store_.get(), s->arena_mr_->address(),
                                            s->arena_mr_->rkey(), s->server_metrics_.get(),
                                            RealClock::Get(), [self](proto::StatsResponse* r) {
                                              r->set_connections(self->connections());
                                              r->set_staging_memory(self->staging_memory());
                                              r->set_transport(self->transport());
                                            });
  s->rpc_ = std::make_unique<rpc::RpcServer>(RealClock::Get());
  s->service_->RegisterWith(s->rpc_.get());

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
  absl::StatusOr<ScopedFd> fd = listener_->Accept(wait);
  if (!fd.ok()) {
    Log(LogLevel::kWarning, absl::StrCat("kvserver: ", fd.status().message()));
  } else if (fd->valid()) {
    Admit(std::move(*fd));
  }
  Reap();
  KvStore::Stats st = store_->stats();
  server_metrics_->SetArena(st.arena_used_bytes, st.arena_bytes - st.arena_used_bytes);
  server_metrics_->SetKeys(st.keys);
  server_metrics_->SetConnections(connections());
}

void KvServer::Admit(ScopedFd fd) {
  constexpr absl::Duration kTimeout = absl::Seconds(2);
  auto refuse = [&](absl::string_view why) {
    server_metrics_->OnConnectionRefused();
    Log(LogLevel::kWarning, absl::StrCat("kvserver: refused a client: ", why));
    (void)rpc::WriteAll(fd.get(), absl::StrCat("error ", why, "\n"), kTimeout);
  };
  absl::StatusOr<std::string> line = rpc::ReadLine(fd.get(), rpc::kMaxBootstrapLine, kTimeout);
  if (!line.ok()) return refuse(line.status().message());
  const std::string hello = absl::StrCat(rpc::kBootstrapHello, " ");
  if (!absl::StartsWith(*line, hello)) {
    return refuse(absl::StrCat("expected '", rpc::kBootstrapHello, " <connection info>'"));
  }
  absl::StatusOr<engine::ConnectionInfo> info =
      engine::DecodeConnectionInfo(absl::string_view(*line).substr(hello.size()));
  if (!info.ok()) return refuse(info.status().message());
  if (connections() >= static_cast<size_t>(options_.max_connections)) {
    return refuse(absl::StrCat("at the connection limit (", options_.max_connections, ")"));
  }
  auto policy = engine::MakePolicy(options_.policy);
  auto created = engine_->CreateConnection(std::move(*policy));
  if (!created.ok()) return refuse(created.status().message());
  std::shared_ptr<engine::Connection> conn = std::move(*created);
  const uint64_t id = next_client_++;
  rpc_->Serve(conn, id);
  absl::Status st = conn->Connect(*info);
  if (st.ok()) {
    st = rpc::WriteAll(fd.get(),
                       absl::StrCat("ok ", engine::EncodeConnectionInfo(conn->local_info()), "\n"),
                       kTimeout);
  }
  if (!st.ok()) {
    conn->SetMessageHandler(nullptr);
    return refuse(st.message());
  }
  server_metrics_->OnConnectionAccepted();
  Log(LogLevel::kInfo, absl::StrCat("kvserver: client ", id, " connected"));
  MutexLock l(&mu_);
  conns_[id] = std::move(conn);
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
  if (shut_down_ || engine_ == nullptr) return;
  shut_down_ = true;
  service_->SetStopping();
  listener_.reset();
  std::map<uint64_t, std::shared_ptr<engine::Connection>> conns;
  {
    MutexLock l(&mu_);
    conns.swap(conns_);
  }
  engine_->Stop();
  for (auto& [id, conn] : conns) {
    conn->SetMessageHandler(nullptr);
    store_->DropClient(id);
  }
  conns.clear();
  metrics_.reset();
}

}  // namespace unloadkv::server
