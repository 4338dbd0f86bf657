#include "server/kv_server.h"

#include <algorithm>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "proto/limits.h"
#include "server/connection_budget.h"
#include "server/cuttable_cluster_map.h"
#include "transport/backends/open_device.h"
#include "transport/base/logging.h"
#include "transport/base/printable.h"
#include "transport/cluster/etcd_cluster_map.h"

namespace unloadkv::server {

absl::Status ValidateOptions(const KvServerOptions& o) {
  if (o.embedding != nullptr) {
    if (o.embedding->device == nullptr || o.embedding->clock == nullptr) {
      return absl::InvalidArgumentError("an embedded server needs a device and a clock");
    }
  } else if (absl::StatusOr<sockaddr_in> a = ParseHostPort(o.listen, true); !a.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--listen: ", a.status().message()));
  }
  if (o.embedding == nullptr && o.transport != "soft" && o.transport != "verbs") {
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
  if (!o.metrics_address.empty() && o.embedding == nullptr) {
    if (absl::StatusOr<sockaddr_in> a = ParseHostPort(o.metrics_address, true); !a.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--metrics: ", a.status().message()));
    }
  }
  if (o.max_connections < 0 || o.max_connections > 65536) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_connections=", o.max_connections,
                     ": must be in 1..65536, or 0 for what the node holds"));
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
  if (IsClusterMode(o)) {
    if (o.cluster_map == nullptr) {
      if (absl::Status st = cluster::CheckClusterName(o.cluster); !st.ok()) return st;
    }
    if (absl::Status st = cluster::CheckNodeName(o.node); !st.ok()) return st;
    if (o.lease_ttl < absl::Seconds(1) || o.lease_ttl > absl::Seconds(60)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--lease_ttl_s=", absl::ToInt64Seconds(o.lease_ttl), ": must be 1..60"));
    }
  } else if (!o.cluster.empty() || !o.node.empty()) {
    return absl::InvalidArgumentError("--cluster and --node need --etcd");
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
  s->status_ = std::make_unique<StatusSampler>(s->registry_);

  const KvServerEmbedding* embedded = options.embedding;
  std::unique_ptr<rpc::BootstrapAcceptor> listener;
  if (embedded != nullptr) {
    s->device_ = embedded->device;
    s->clock_ = embedded->clock;
    s->address_ = embedded->address;
  } else {
    // The listener first: a busy port should fail before anything large is allocated.
    rpc::BootstrapAcceptor::Options ao;
    ao.max_pending = static_cast<size_t>(options.max_pending_hellos);
    ao.line_deadline = options.hello_deadline;
    auto acceptor = rpc::BootstrapAcceptor::Listen(options.listen, ao);
    if (!acceptor.ok()) return acceptor.status();
    listener = std::move(*acceptor);
    s->address_ = listener->address();
    backends::DeviceSpec spec = backends::DeviceSpec::For(
        options.transport, options.listen.substr(0, options.listen.rfind(':')),
        options.verbs_device);
    spec.defer_acks = true;  // an answer carries the ACK its request asked for
    auto device = backends::OpenDevice(spec);
    if (!device.ok()) return device.status();
    s->owned_device_ = std::move(*device);
    s->device_ = s->owned_device_.get();
  }

  engine::EngineOptions eo;
  eo.unload_workers = options.unload_workers;
  eo.huge_pages = options.huge_pages;
  eo.max_message_bytes = proto::kMaxMessageBytes;
  eo.throttle_when_backlogged = true;  // a client that takes no answers gets no more requests in
  absl::StatusOr<ConnectionBudget> budget =
      ResolveConnectionBudget(options.max_connections, eo, s->device_->limits(),
                              embedded != nullptr ? 0 : MemAvailableBytes());
  if (!budget.ok()) return budget.status();
  s->max_connections_ = budget->max_connections;
  s->connection_budget_ = budget->summary;
  eo.max_connections_per_worker = static_cast<uint32_t>(budget->max_connections);
  eo.metrics = s->engine_metrics_.get();
  eo.modeled_huge_pages = embedded != nullptr;
  if (embedded != nullptr) eo.checks = embedded->checks;
  auto engine = engine::Engine::Create(s->device_, eo);
  if (!engine.ok()) return engine.status();
  s->engine_ = std::move(*engine);

  engine::Engine* engine_ptr = s->engine_.get();
  const uint64_t arena_bytes = options.arena_bytes;
  const bool huge = embedded != nullptr ? embedded->arena_huge_pages : options.huge_pages;
  void* const arena_address = embedded != nullptr ? embedded->arena_address : nullptr;
  s->reaper_ =
      std::make_unique<Reaper>(embedded != nullptr ? Reaper::Mode::kInline : Reaper::Mode::kThread);
  Reaper* reaper = s->reaper_.get();
  KvServer* self = s.get();
  auto close_peer = [self](uint64_t peer) { self->ClosePeer(peer); };
  // Embedded: replica n's arena at arena_address + n * stride (1 GiB steps).
  const uint64_t stride = (arena_bytes + (uint64_t{1} << 30) - 1) & ~((uint64_t{1} << 30) - 1);
  auto created = std::make_shared<uint64_t>(0);
  s->shards_ = std::make_unique<ShardTable>([engine_ptr, arena_bytes, huge, reaper, close_peer,
                                             arena_address, stride, created](uint32_t shard) {
    void* address = arena_address == nullptr
                        ? nullptr
                        : static_cast<char*>(arena_address) + (*created)++ * stride;
    return ShardReplica::Create(engine_ptr, shard, arena_bytes, huge, reaper, close_peer, address);
  });
  const bool cluster_mode = IsClusterMode(options);
  if (!cluster_mode) {
    // One shard covering every key, primary from the start, no backups.
    auto replica = s->shards_->GetOrCreate(0);
    if (!replica.ok()) return replica.status();
    s->arena_memory_ = DescribePages((*replica)->memory(), huge);
    (*replica)->SetRange("", "");
    (*replica)->BecomePrimary(0);
  } else {
    s->arena_memory_ = "pages chosen when the node takes a shard replica (one arena each)";
  }

  s->service_ = std::make_unique<KvService>(
      s->shards_.get(), s->server_metrics_.get(), s->clock_,
      [self](proto::StatsResponse* r) {
        // Admitted ones count as soon as they ask.
        r->set_connections(self->connections() + self->half_open());
        r->set_staging_memory(self->staging_memory());
        r->set_transport(self->transport());
      },
      [self] { return self->cluster_node_ == nullptr || self->cluster_node_->LeaseValid(); },
      options.network_cut);
  s->rpc_ = std::make_unique<rpc::RpcServer>(s->clock_);
  s->service_->RegisterWith(s->rpc_.get());
  Admission::Options ad;
  ad.policy = options.policy;
  ad.max_connections = s->max_connections_;
  ad.max_half_open = static_cast<size_t>(options.max_half_open);
  ad.handshake_deadline = options.handshake_deadline;
  ad.clock = s->clock_;
  s->admission_ = std::make_unique<Admission>(
      std::move(listener), ad, s->engine_.get(), s->rpc_.get(), s->server_metrics_.get(),
      [self] { return self->connections(); }, [self](uint64_t id) { self->DropClient(id); });

  if (!options.metrics_address.empty() && embedded == nullptr) {
    auto m = engine::MetricsEndpoint::Start(options.metrics_address, s->registry_);
    if (!m.ok()) return m.status();
    s->metrics_ = std::move(*m);
  }
  if (embedded == nullptr) s->engine_->Start();
  if (cluster_mode) {
    cluster::ClusterMap* map = options.cluster_map;
    if (map == nullptr) {
      auto etcd = cluster::EtcdClusterMap::Open(options.etcd, options.cluster);
      if (!etcd.ok()) return etcd.status();
      s->owned_map_ = std::move(*etcd);
      map = s->owned_map_.get();
    }
    if (options.network_cut != nullptr) {
      s->cut_map_ = std::make_unique<CuttableClusterMap>(map, options.network_cut);
      map = s->cut_map_.get();
    }
    ClusterNode::Options co;
    co.self.name = options.node;
    co.self.rpc_address = s->address_;
    if (s->metrics_ != nullptr) {  // "http://HOST:PORT/metrics" -> "HOST:PORT"
      const std::string& url = s->metrics_->url();
      co.self.metrics_address = url.substr(7, url.size() - 7 - 8);
    }
    co.lease_ttl = options.lease_ttl;
    co.policy = options.policy;
    co.arena_bytes = options.arena_bytes;
    co.network_cut = options.network_cut;
    if (embedded != nullptr) {
      co.run_threads = false;
      co.link_env = embedded->links;
    }
    s->cluster_metrics_ = std::make_unique<ClusterMetrics>(s->registry_);
    co.metrics = s->cluster_metrics_.get();
    s->cluster_node_ =
        std::make_unique<ClusterNode>(map, co, s->shards_.get(), s->engine_.get(), s->clock_);
    if (absl::Status st = s->cluster_node_->Start(); !st.ok()) {
      s->cluster_node_.reset();
      return st;
    }
  }
  if (s->metrics_ != nullptr) {
    // Registered last: the handlers read what Start built, from the endpoint's threads.
    s->metrics_->Handle("/status", [] {
      return engine::MetricsEndpoint::Page{"text/html; charset=utf-8", StatusPageHtml()};
    });
    KvServer* raw = s.get();
    s->metrics_->Handle("/status.json", [raw] {
      return engine::MetricsEndpoint::Page{
          "application/json", raw->status_->Json(raw->options_.node, raw->ClusterStatusJson())};
    });
  }
  return s;
}

std::string KvServer::ClusterStatusJson() const {
  if (cluster_node_ == nullptr) return "null";
  const cluster::ClusterView view = cluster_node_->LastView();
  const std::string& me = cluster_node_->name();
  std::string out = absl::StrCat("{\"name\":", JsonString(options_.cluster),
                                 ",\"replicas\":", view.replicas, ",\"shards\":[");
  auto names = [](const std::vector<std::string>& v) {
    std::string list = "[";
    for (size_t i = 0; i < v.size(); ++i) absl::StrAppend(&list, i ? "," : "", JsonString(v[i]));
    return list + "]";
  };
  for (size_t i = 0; i < view.shard_list.size(); ++i) {
    const cluster::ShardInfo& sh = view.shard_list[i];
    const char* role = sh.primary == me                                       ? "primary"
                       : sh.HasReplica(me)                                    ? "backup"
                       : std::count(sh.joining.begin(), sh.joining.end(), me) ? "joining"
                                                                              : "";
    absl::StrAppend(&out, i ? "," : "", "{\"id\":", sh.id, ",\"state\":",
                    JsonString(std::string(cluster::ShardStateName(view.StateOf(sh)))),
                    ",\"epoch\":", sh.epoch, ",\"primary\":", JsonString(sh.primary),
                    ",\"backups\":", names(sh.backups), ",\"joining\":", names(sh.joining),
                    ",\"role\":", JsonString(role), "}");
  }
  std::vector<std::string> nodes;
  for (const auto& [name, info] : view.nodes) nodes.push_back(name);
  return absl::StrCat(out, "],\"nodes\":", names(nodes), "}");
}

KvStore::Stats KvServer::stats() const {
  if (final_stats_.has_value()) return *final_stats_;
  KvStore::Stats sum;
  for (const std::shared_ptr<ShardReplica>& r : shards_->All()) {
    if (r->role() != ShardReplica::Role::kPrimary) continue;
    KvStore::Stats st = r->store().stats();
    sum.keys += st.keys;
    sum.arena_bytes += st.arena_bytes;
    sum.arena_used_bytes += st.arena_used_bytes;
    sum.grants_outstanding += st.grants_outstanding;
  }
  return sum;
}

void KvServer::ClosePeer(uint64_t id) {
  std::shared_ptr<engine::Connection> conn;
  {
    MutexLock l(&mu_);
    auto it = conns_.find(id);
    if (it == conns_.end()) return;
    conn = it->second;
  }
  Log(LogLevel::kInfo, absl::StrCat("kvserver: closing connection ", id,
                                    " (fencing a primary this node no longer follows)"));
  conn->Close();  // Reap drops it once it shows failed
}

void KvServer::DropClient(uint64_t id) {
  for (const std::shared_ptr<ShardReplica>& r : shards_->All()) r->store().DropClient(id);
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
  // Embedded, gauges every 100 ms of the clock at most: such a server is polled every
  // millisecond, and walking the shards' metric families then dominated a simulation.
  // Otherwise every turn, so that gauges agree with the counters a scrape sees beside them.
  if (options_.embedding != nullptr) {
    const absl::Time now = clock_->Now();
    if (now < next_gauges_) return;
    next_gauges_ = now + absl::Milliseconds(100);
  }
  RefreshGauges();
}

void KvServer::RefreshGauges() {
  KvStore::Stats st = stats();
  server_metrics_->SetArena(st.arena_used_bytes, st.arena_bytes - st.arena_used_bytes);
  server_metrics_->SetKeys(st.keys);
  server_metrics_->SetConnections(connections());
  server_metrics_->SetAdmission(admission_->pending_hellos(), admission_->half_open());
  status_->MaybeSample(clock_->Now());
  if (cluster_metrics_ != nullptr) {
    cluster_metrics_->SetLeaseValid(cluster_node_->LeaseValid());
    const cluster::ClusterView view = cluster_node_->LastView();
    for (const cluster::ShardInfo& sh : view.shard_list) {
      cluster_metrics_->SetShardState(sh.id, view.StateOf(sh));
    }
    std::set<uint32_t> held;
    for (const std::shared_ptr<ShardReplica>& r : shards_->All()) {
      held.insert(r->id());
      const ShardReplica::Role role = r->role();
      int replicas = 0, wanted = 0;
      const cluster::ShardInfo* s = view.ShardById(r->id());
      if (role == ShardReplica::Role::kPrimary && s != nullptr &&
          s->primary == cluster_node_->name()) {
        replicas = static_cast<int>(s->Replicas().size());
        wanted = view.replicas;
      }
      cluster_metrics_->SetShard(r->id(),
                                 role == ShardReplica::Role::kPrimary  ? "primary"
                                 : role == ShardReplica::Role::kBackup ? "backup"
                                                                       : "",
                                 r->epoch(), replicas, wanted);
    }
    for (uint32_t gone : metric_shards_) {
      if (held.count(gone) == 0) cluster_metrics_->SetShard(gone, "", 0);
    }
    metric_shards_ = std::move(held);
  }
}

absl::StatusOr<std::string> KvServer::Admit(absl::string_view client_info) {
  if (options_.embedding == nullptr) {
    return absl::FailedPreconditionError("Admit is for embedded servers; clients dial --listen");
  }
  if (shut_down_) return absl::UnavailableError("server shutting down");
  absl::StatusOr<engine::ConnectionInfo> info = engine::DecodeConnectionInfo(client_info);
  if (!info.ok()) return info.status();
  absl::StatusOr<engine::ConnectionInfo> local = admission_->Admit(*info);
  if (!local.ok()) return local.status();
  return engine::EncodeConnectionInfo(*local);
}

int KvServer::DriveOnce() {
  if (shut_down_) return 0;
  int work = engine_->PollOnce();
  if (const absl::Time now = clock_->Now(); now >= next_poll_) {
    next_poll_ = now + absl::Milliseconds(1);
    Poll(absl::ZeroDuration());
  }
  reaper_->Drain();  // inline: links dropped inside the callbacks just run
  return work;
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
    DropClient(id);
    Log(LogLevel::kInfo, absl::StrCat("kvserver: client ", id, " disconnected"));
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
  metrics_.reset();  // its /status.json handler reads the members torn down below
  if (service_ != nullptr) service_->SetStopping();
  // Leaving the cluster revokes the lease: backups take over at once.
  if (cluster_node_ != nullptr) cluster_node_->Stop();
  if (engine_ != nullptr) engine_->Stop();  // no handler runs from here on
  admission_.reset();                       // stops listening; releases half-open connections
  std::map<uint64_t, std::shared_ptr<engine::Connection>> conns;
  {
    MutexLock l(&mu_);
    conns.swap(conns_);
  }
  for (auto& [id, conn] : conns) {
    conn->SetMessageHandler(nullptr);
    if (shards_ != nullptr) DropClient(id);
  }
  conns.clear();
  // Replicas close their links (engine connections) while the engine still exists; what they
  // held is still reported by stats().
  if (shards_ != nullptr) {
    final_stats_ = stats();
    for (const std::shared_ptr<ShardReplica>& r : shards_->All()) {
      shards_->Remove(r->id(), "server shutting down");
    }
  }
  if (reaper_ != nullptr) reaper_->Drain();
  metrics_.reset();
}

}  // namespace unloadkv::server
