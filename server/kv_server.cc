#include "server/kv_server.h"

#include <algorithm>
#include <functional>
#include <initializer_list>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "proto/limits.h"
#include "server/connection_budget.h"
#include "server/cuttable_cluster_map.h"
#include "transport/backends/open_device.h"
#include "transport/base/logging.h"
#include "transport/base/printable.h"
#include "transport/cluster/etcd_cluster_map.h"
#include "transport/storage/posix_disk.h"

namespace unloadkv::server {

namespace {

// Messages in flight per connection and direction at most (engine::EngineOptions::
// message_slots): twice the SDK's default max_in_flight. A connection's credit level drops by
// one after a level's worth of messages that did not wait; capped at the pipeline's depth, any
// drop made answers wait for credits (docs/benchmarks.md, "Message slots").
constexpr uint32_t kServerMessageSlots = 128;

// InvalidArgument "--<flag>=<value>: must be in lo..hi<or>" unless lo <= value <= hi.
absl::Status CheckRange(absl::string_view flag, int64_t value, int64_t lo, int64_t hi,
                        absl::string_view or_what = "") {
  if (value >= lo && value <= hi) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, "=", value, ": must be in ", lo, "..", hi, or_what));
}

// Where the server listens and what it runs on.
absl::Status ValidatePlace(const KvServerOptions& o) {
  if (o.embedding != nullptr) {
    if (o.embedding->device == nullptr || o.embedding->clock == nullptr) {
      return absl::InvalidArgumentError("an embedded server needs a device and a clock");
    }
    return absl::OkStatus();
  }
  if (absl::StatusOr<sockaddr_in> a = ParseHostPort(o.listen, true); !a.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--listen: ", a.status().message()));
  }
  if (o.transport != "soft" && o.transport != "verbs") {
    return absl::InvalidArgumentError(
        absl::StrCat("--transport='", o.transport, "': choose soft or verbs"));
  }
  if (!o.metrics_address.empty()) {
    if (absl::StatusOr<sockaddr_in> a = ParseHostPort(o.metrics_address, true); !a.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--metrics: ", a.status().message()));
    }
  }
  return absl::OkStatus();
}

// Sizes, counts, deadlines and quotas.
absl::Status ValidateLimits(const KvServerOptions& o) {
  if (o.arena_bytes < SlabArena::kChunkBytes || o.arena_bytes > (uint64_t{1} << 40)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--arena_bytes=", o.arena_bytes, ": must be between 1 MiB and 1 TiB"));
  }
  if (absl::StatusOr<std::unique_ptr<engine::PathPolicy>> p = engine::MakePolicy(o.policy);
      !p.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--policy: ", p.status().message()));
  }
  for (const absl::Status& st :
       {CheckRange("unload_workers", o.unload_workers, 1, engine::kMaxUnloadWorkers),
        CheckRange("max_connections", o.max_connections, 0, 65536,
                   ", or 0 for what the node holds"),
        CheckRange("max_half_open", o.max_half_open, 1, 4096),
        CheckRange("max_pending_hellos", o.max_pending_hellos, 1, 4096),
        CheckRange("max_connections_per_host", o.max_connections_per_host, 0, 65536,
                   ", or 0 for no cap")}) {
    if (!st.ok()) return st;
  }
  if (o.hello_deadline <= absl::ZeroDuration() || o.handshake_deadline <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("hello and handshake deadlines must be positive");
  }
  if (o.max_grant_bytes_per_connection != 0 &&
      (o.max_grant_bytes_per_connection < proto::kMaxValueBytes ||
       o.max_grant_bytes_per_connection > o.arena_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_grant_bytes_per_connection=", o.max_grant_bytes_per_connection,
                     ": must be between the largest value (", proto::kMaxValueBytes,
                     ") and --arena_bytes, or 0 for arena_bytes / 32"));
  }
  if (o.idle_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--idle_timeout_s must not be negative");
  }
  return absl::OkStatus();
}

// Protected mode (as Redis's): without users, anyone who reaches the port holds every role,
// so only this host may reach it; a cluster node must be able to prove it is one.
absl::Status ValidateTrust(const KvServerOptions& o) {
  const bool authenticated = !o.auth_file.empty() || o.auth != nullptr;
  if (authenticated || o.insecure) return absl::OkStatus();
  absl::StatusOr<HostPort> hp = SplitHostPort(o.listen, true);
  if (o.embedding == nullptr && hp.ok() && !IsLoopbackHost(hp->host)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--listen=", o.listen,
        " is not a loopback address and no --auth_file is given: anyone who reaches it could "
        "read, overwrite and wipe every key (protected mode). Give --auth_file "
        "(docs/security.md), or --insecure to serve without authentication anyway"));
  }
  if (IsClusterMode(o)) {
    return absl::FailedPreconditionError(
        absl::StrCat("cluster mode needs --auth_file with a node entry for this node (\"", o.node,
                     " node SECRET\") so that only nodes replicate and join (docs/security.md); "
                     "--insecure runs a cluster without authentication (loopback tests only)"));
  }
  return absl::OkStatus();
}

absl::Status ValidateDurability(const KvServerOptions& o) {
  if (absl::StatusOr<FsyncPolicy> p = FsyncPolicy::Parse(o.fsync); !p.ok()) return p.status();
  if (!o.data_dir.empty() && o.data_dir[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("--data_dir=", o.data_dir, ": give an absolute path"));
  }
  return absl::OkStatus();
}

absl::Status ValidateCluster(const KvServerOptions& o) {
  if (!IsClusterMode(o)) {
    if (!o.cluster.empty() || !o.node.empty()) {
      return absl::InvalidArgumentError("--cluster and --node need --etcd");
    }
    return absl::OkStatus();
  }
  if (o.cluster_map == nullptr) {
    if (absl::Status st = cluster::CheckClusterName(o.cluster); !st.ok()) return st;
  }
  if (absl::Status st = cluster::CheckNodeName(o.node); !st.ok()) return st;
  if (absl::Status st = CheckRange("transfer_mib_s", o.transfer_bytes_per_second >> 20, 0, 1 << 20);
      !st.ok()) {
    return st;
  }
  for (const auto& [flag, value] :
       {std::pair<const char*, absl::Duration>{"placement_interval_s", o.placement_interval},
        {"load_interval_s", o.load_interval}}) {
    if (absl::Status st = CheckRange(flag, absl::ToInt64Seconds(value), 1, 3600); !st.ok()) {
      return st;
    }
  }
  return CheckRange("lease_ttl_s", absl::ToInt64Seconds(o.lease_ttl), 1, 60);
}

}  // namespace

absl::Status ValidateOptions(const KvServerOptions& o) {
  for (const auto& check :
       {ValidatePlace, ValidateLimits, ValidateDurability, ValidateCluster, ValidateTrust}) {
    if (absl::Status st = check(o); !st.ok()) return st;
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
  std::unique_ptr<rpc::BootstrapAcceptor> listener;
  // In order: what can fail cheaply first (the users, a busy port), what is large after.
  for (const auto& step : std::initializer_list<std::function<absl::Status()>>{
           [&] { return s->LoadAuth(); },
           [&] { return s->OpenDevice(&listener); },
           [&] { return s->StartEngine(); },
           [&] { return s->CreateShards(); },
           [&] { return s->StartService(std::move(listener)); },
           [&] { return s->ServeMetrics(); },
           [&] { return s->JoinCluster(); },
       }) {
    if (absl::Status st = step(); !st.ok()) return st;
  }
  s->ServeStatusPages();
  return s;
}

absl::Status KvServer::OpenDevice(std::unique_ptr<rpc::BootstrapAcceptor>* listener) {
  if (const KvServerEmbedding* embedded = options_.embedding; embedded != nullptr) {
    device_ = embedded->device;
    clock_ = embedded->clock;
    address_ = embedded->address;
    return absl::OkStatus();
  }
  // The listener first: a busy port should fail before anything large is allocated.
  rpc::BootstrapAcceptor::Options ao;
  ao.max_pending = static_cast<size_t>(options_.max_pending_hellos);
  ao.line_deadline = options_.hello_deadline;
  auto acceptor = rpc::BootstrapAcceptor::Listen(options_.listen, ao);
  if (!acceptor.ok()) return acceptor.status();
  *listener = std::move(*acceptor);
  address_ = (*listener)->address();
  backends::DeviceSpec spec = backends::DeviceSpec::For(
      options_.transport, options_.listen.substr(0, options_.listen.rfind(':')),
      options_.verbs_device);
  spec.defer_acks = true;  // an answer carries the ACK its request asked for
  // A port per engine worker: each worker owns its streams and epoll set (docs/engine.md).
  spec.soft_ports = options_.unload_workers;
  // Only the engine's worker threads poll its CQs, and each waits in Progress when it finds
  // nothing: a poll's own non-blocking epoll_wait would be one system call more per wake-up.
  spec.soft_progress_on_empty_poll = false;
  auto device = backends::OpenDevice(spec);
  if (!device.ok()) return device.status();
  owned_device_ = std::move(*device);
  device_ = owned_device_.get();
  return absl::OkStatus();
}

absl::Status KvServer::StartEngine() {
  const KvServerEmbedding* embedded = options_.embedding;
  engine::EngineOptions eo;
  eo.unload_workers = options_.unload_workers;
  eo.huge_pages = options_.huge_pages;
  eo.throttle_when_backlogged = true;  // a client that takes no answers gets no more requests in
  if (embedded == nullptr) {
    // A client may pipeline kServerMessageSlots requests on the wire, and one busy connection
    // may borrow its whole level from the shared buffers. (A simulated node keeps the engine's
    // defaults, with which the modeled figures of docs/sim-kv.md were measured: one message in
    // message_slots / 4 is signaled, and each signaled one costs modeled CPU.)
    eo.message_slots = kServerMessageSlots;
    eo.shared_message_buffers = 2 * kServerMessageSlots;
  }
  absl::StatusOr<ConnectionBudget> budget =
      ResolveConnectionBudget(options_.max_connections, eo, device_->limits(),
                              embedded != nullptr ? 0 : MemAvailableBytes());
  if (!budget.ok()) return budget.status();
  max_connections_ = budget->max_connections;
  connection_budget_ = budget->summary;
  eo.max_connections_per_worker = static_cast<uint32_t>(budget->max_connections);
  eo.metrics = engine_metrics_.get();
  auto engine = rpc::CreateRpcEngine(device_, eo, proto::kMaxMessageBytes,
                                     /*simulated=*/embedded != nullptr,
                                     embedded != nullptr ? embedded->checks : nullptr);
  if (!engine.ok()) return engine.status();
  engine_ = std::move(*engine);
  if (options_.memory_protection) grant_windows_ = std::make_unique<GrantWindows>(device_);
  return absl::OkStatus();
}

absl::Status KvServer::CreateShards() {
  const KvServerEmbedding* embedded = options_.embedding;
  reaper_ =
      std::make_unique<Reaper>(embedded != nullptr ? Reaper::Mode::kInline : Reaper::Mode::kThread);
  const bool huge = embedded != nullptr ? embedded->arena_huge_pages : options_.huge_pages;
  if (absl::Status st = OpenDataDir(); !st.ok()) return st;
  shards_ = std::make_unique<ShardTable>(ReplicaFactory(huge));
  if (IsClusterMode(options_)) {
    arena_memory_ = "pages chosen when the node takes a shard replica (one arena each)";
    if (disk_ == nullptr) {
      durability_ = "in memory only (no --data_dir): a restart of every node loses every key";
      return absl::OkStatus();
    }
    return RecoverShards();
  }
  // One shard covering every key, primary from the start, no backups.
  auto replica = shards_->GetOrCreate(0);
  if (!replica.ok()) return replica.status();
  arena_memory_ = DescribePages((*replica)->memory(), huge);
  (*replica)->SetRange("", "");
  (*replica)->BecomePrimary(0);
  return OpenLog(**replica);
}

absl::Status KvServer::OpenDataDir() {
  if (options_.data_dir.empty()) return absl::OkStatus();
  const FsyncPolicy policy = *FsyncPolicy::Parse(options_.fsync);
  fsync_policy_ = policy.ToString();
  if (options_.embedding != nullptr && options_.embedding->disk != nullptr) {
    disk_ = options_.embedding->disk;
  } else {
    owned_disk_ = std::make_unique<storage::PosixDisk>();
    disk_ = owned_disk_.get();
  }
  // Whose data this is: a data dir serves one node of one cluster (or a single node) only.
  const std::string owner =
      IsClusterMode(options_)
          ? absl::StrCat("node ", options_.node, " of cluster ", options_.cluster, "\n")
          : std::string("a single node (no --etcd)\n");
  const std::string owner_file = options_.data_dir + "/OWNER";
  if (absl::Status st = disk_->CreateDirs(options_.data_dir); !st.ok()) return st;
  absl::StatusOr<std::string> found = disk_->ReadAll(owner_file);
  if (found.ok() && *found != owner) {
    return absl::FailedPreconditionError(
        absl::StrCat("--data_dir=", options_.data_dir, " holds the data of ",
                     absl::StripSuffix(*found, "\n"), " (its OWNER file), not of ",
                     absl::StripSuffix(owner, "\n"), ": give every node a data dir of its own"));
  }
  if (!found.ok() && found.status().code() != absl::StatusCode::kNotFound) return found.status();
  if (!found.ok()) {
    absl::StatusOr<std::unique_ptr<storage::WritableFile>> f = disk_->OpenForAppend(owner_file);
    if (!f.ok()) return f.status();
    if (absl::Status st = (*f)->Append(owner); !st.ok()) return st;
    if (absl::Status st = (*f)->Sync(); !st.ok()) return st;
    if (absl::Status st = disk_->SyncDir(options_.data_dir); !st.ok()) return st;
  }
  if (registry_ != nullptr) log_metrics_ = std::make_unique<LogMetrics>(*registry_, policy);
  return absl::OkStatus();
}

bool KvServer::LogThreads() const {
  return options_.embedding == nullptr || options_.embedding->disk == nullptr;
}

ReplicaLog::Options KvServer::LogOptions() const {
  ReplicaLog::Options o;
  o.compact_bytes = options_.log_compact_bytes;
  return o;
}

int KvServer::PollLogs() {
  int work = 0;
  if (shards_ == nullptr) return 0;
  for (const std::shared_ptr<ShardReplica>& r : shards_->All()) work += r->PollLog();
  return work;
}

bool KvServer::LogsPending() const {
  if (shards_ == nullptr) return false;
  for (const std::shared_ptr<ShardReplica>& r : shards_->All()) {
    if (r->LogPending()) return true;
  }
  return false;
}

void KvServer::CrashLogs() {
  if (shards_ == nullptr) return;
  for (const std::shared_ptr<ShardReplica>& r : shards_->All()) r->CrashLog();
}

std::string KvServer::ShardDir(uint32_t shard) const {
  return absl::StrCat(options_.data_dir, "/shard-", shard);
}

absl::Status KvServer::RecoverShards() {
  absl::StatusOr<std::vector<std::string>> dirs = disk_->ListDirs(options_.data_dir);
  if (!dirs.ok()) return dirs.status();
  std::vector<std::string> kept, dropped;
  for (const std::string& d : *dirs) {
    uint32_t shard;
    if (!absl::StartsWith(d, "shard-") || !absl::SimpleAtoi(d.substr(6), &shard)) continue;
    // The factory replays the log (DataLoss refuses to start, naming the file and offset).
    absl::StatusOr<std::shared_ptr<ShardReplica>> r = shards_->GetOrCreate(shard);
    if (!r.ok()) return r.status();
    if ((*r)->recovered()) {
      kept.push_back(absl::StrCat("shard ", shard, " (", (*r)->store().stats().keys, " keys, seq ",
                                  (*r)->last_seq(), ")"));
    } else {
      // A transfer cut short: the map decides nothing on it; the shard's primary sends a new one.
      shards_->Remove(shard, "its log holds an incomplete state transfer");
      dropped.push_back(absl::StrCat("shard ", shard));
    }
  }
  std::vector<std::string> torn;
  {
    MutexLock l(&torn_mu_);
    torn = torn_;
  }
  durability_ = absl::StrCat(
      "logs in ", options_.data_dir, ", fsync ", fsync_policy_, "; recovered ",
      kept.empty() ? "no shard" : absl::StrJoin(kept, ", "),
      dropped.empty() ? "" : absl::StrCat("; incomplete (dropped): ", absl::StrJoin(dropped, ", ")),
      torn.empty() ? "" : absl::StrCat("; ", absl::StrJoin(torn, "; ")),
      "; the cluster map decides which of them it serves");
  return absl::OkStatus();
}

namespace {
// What start-up says of a torn tail that recovery cut (`rec.torn_file` set).
std::string TornNote(const ReplicaLog::Recovery& rec) {
  return absl::StrCat("cut a torn tail of ", rec.torn_bytes, " bytes (", rec.torn_why, ") off ",
                      rec.torn_file);
}
}  // namespace

absl::Status KvServer::OpenLog(ShardReplica& replica) {
  if (options_.data_dir.empty()) {
    durability_ = "in memory only (no --data_dir): a restart loses every key";
    return absl::OkStatus();
  }
  const FsyncPolicy policy = *FsyncPolicy::Parse(options_.fsync);
  const std::string dir = ShardDir(replica.id());
  ReplicaLog::Recovery rec;
  if (absl::Status st =
          replica.RecoverAndLog(disk_, dir, policy, clock_, &rec, LogThreads(), LogOptions());
      !st.ok()) {
    return st;
  }
  durability_ = absl::StrCat("log in ", dir, ", fsync ", policy.ToString(), "; recovered ",
                             rec.records, " records (", rec.bytes, " bytes) from ", rec.segments,
                             " segments, last seq ", rec.last_seq);
  if (!rec.torn_file.empty()) {
    absl::StrAppend(&durability_, "; ", TornNote(rec));
  }
  return absl::OkStatus();
}

ShardTable::Factory KvServer::ReplicaFactory(bool huge_pages) {
  engine::Engine* engine = engine_.get();
  Reaper* reaper = reaper_.get();
  const uint64_t arena_bytes = options_.arena_bytes;
  const uint64_t grant_quota = options_.max_grant_bytes_per_connection != 0
                                   ? options_.max_grant_bytes_per_connection
                                   : std::max<uint64_t>(arena_bytes / 32, proto::kMaxValueBytes);
  auto close_peer = [this](uint64_t peer) { ClosePeer(peer); };
  // Embedded: replica n's arena at arena_address + n * stride (1 GiB steps), so that a node of
  // a simulated cluster maps them where it did in the last run.
  void* const base = options_.embedding != nullptr ? options_.embedding->arena_address : nullptr;
  const uint64_t stride = (arena_bytes + (uint64_t{1} << 30) - 1) & ~((uint64_t{1} << 30) - 1);
  auto created = std::make_shared<uint64_t>(0);
  ShardReplica::Protection protection;
  protection.windows = grant_windows_ != nullptr;
  if (GrantWindows* windows = grant_windows_.get()) {
    protection.on_demoted = [windows](uint32_t shard) { windows->RevokeShard(shard); };
  }
  // Cluster mode with --data_dir: every replica logs (recovering what its directory holds).
  storage::Disk* const disk = IsClusterMode(options_) ? disk_ : nullptr;
  const bool log_threads = LogThreads();
  const ReplicaLog::Options log_options = LogOptions();
  const FsyncPolicy policy = *FsyncPolicy::Parse(options_.fsync);
  const uint64_t transfer_rate = options_.transfer_bytes_per_second;
  const Clock* clock = clock_;
  return [=](uint32_t shard) -> absl::StatusOr<std::shared_ptr<ShardReplica>> {
    void* address = base == nullptr ? nullptr : static_cast<char*>(base) + (*created)++ * stride;
    absl::StatusOr<std::shared_ptr<ShardReplica>> r =
        ShardReplica::Create(engine, shard, arena_bytes, huge_pages, reaper, close_peer, address,
                             grant_quota, protection);
    if (r.ok() && transfer_rate != 0) (*r)->SetTransferRate(transfer_rate, clock);
    // A SPLIT record creates (or finds) this node's replica of the new shard.
    if (r.ok()) (*r)->SetSplitTargets([this](uint32_t id) { return shards_->GetOrCreate(id); });
    if (!r.ok() || disk == nullptr) return r;
    ReplicaLog::Recovery rec;
    if (absl::Status st = (*r)->RecoverAndLog(disk, ShardDir(shard), policy, clock_, &rec,
                                              log_threads, log_options);
        !st.ok()) {
      return st;
    }
    std::string torn;
    if (!rec.torn_file.empty()) {
      torn = TornNote(rec);
      MutexLock l(&torn_mu_);
      torn_.push_back(torn);
    }
    Log(torn.empty() ? LogLevel::kInfo : LogLevel::kWarning,
        absl::StrCat("shard ", shard, ": log ", ShardDir(shard), ": replayed ", rec.records,
                     " records, last seq ", rec.last_seq, rec.complete ? "" : " (incomplete state)",
                     torn.empty() ? "" : "; ", torn));
    return r;
  };
}

absl::Status KvServer::StartService(std::unique_ptr<rpc::BootstrapAcceptor> listener) {
  service_ =
      std::make_unique<KvService>(shards_.get(), server_metrics_.get(), clock_, ServiceHooks());
  rpc_ = std::make_unique<rpc::RpcServer>(clock_);
  service_->RegisterWith(rpc_.get());
  Admission::Options ad;
  ad.policy = options_.policy;
  ad.max_connections = max_connections_;
  ad.max_per_host = options_.max_connections_per_host;
  ad.max_half_open = static_cast<size_t>(options_.max_half_open);
  ad.handshake_deadline = options_.handshake_deadline;
  ad.clock = clock_;
  admission_ = std::make_unique<Admission>(
      std::move(listener), ad, engine_.get(), rpc_.get(), server_metrics_.get(),
      [this] { return Auth(); },
      [this](const std::string& host) {
        return host.empty() ? connections() : connections_from(host);
      },
      [this](uint64_t id) { DropClient(id); });
  return absl::OkStatus();
}

KvService::Hooks KvServer::ServiceHooks() {
  KvService::Hooks hooks;
  hooks.fill_stats = [this](proto::StatsResponse* r) {
    // Admitted ones count as soon as they ask.
    r->set_connections(connections() + half_open());
    r->set_staging_memory(staging_memory());
    r->set_transport(transport());
    if (!options_.data_dir.empty()) {
      absl::Status failure;
      const LogWriter::Stats logs = log_stats(&failure);
      r->set_fsync(fsync_policy_);
      r->set_log_records(logs.records);
      r->set_log_syncs(logs.syncs);
      r->set_log_failure(failure.ToString());
      if (failure.ok()) r->clear_log_failure();
    }
  };
  hooks.lease_valid = [this] { return cluster_node_ == nullptr || cluster_node_->LeaseValid(); };
  if (IsClusterMode(options_)) {
    hooks.authorize_node = [this](const std::string& sender, uint32_t shard, uint64_t epoch,
                                  bool attach, std::string* reason) {
      if (cluster_node_ == nullptr) {
        *reason = "not_placed";
        return absl::PermissionDeniedError("this node has not joined its cluster yet");
      }
      return cluster_node_->AuthorizeNodeRequest(sender, shard, epoch, attach, reason);
    };
  }
  hooks.network_cut = options_.network_cut;
  hooks.grant_windows = grant_windows_.get();
  return hooks;
}

absl::Status KvServer::ServeMetrics() {
  if (options_.embedding != nullptr) return absl::OkStatus();  // the world drives everything
  if (!options_.metrics_address.empty()) {
    auto m = http::MetricsEndpoint::Start(options_.metrics_address, registry_);
    if (!m.ok()) return m.status();
    metrics_ = std::move(*m);
  }
  engine_->Start();
  return absl::OkStatus();
}

absl::Status KvServer::JoinCluster() {
  if (!IsClusterMode(options_)) return absl::OkStatus();
  cluster::ClusterMap* map = options_.cluster_map;
  if (map == nullptr) {
    auto etcd =
        cluster::EtcdClusterMap::Open(options_.etcd, options_.cluster, options_.etcd_security);
    if (!etcd.ok()) return etcd.status();
    owned_map_ = std::move(*etcd);
    map = owned_map_.get();
  }
  if (options_.network_cut != nullptr) {
    cut_map_ = std::make_unique<CuttableClusterMap>(map, options_.network_cut);
    map = cut_map_.get();
  }
  cluster_metrics_ = std::make_unique<ClusterMetrics>(registry_);
  cluster_node_ =
      std::make_unique<ClusterNode>(map, NodeOptions(), shards_.get(), engine_.get(), clock_);
  if (absl::Status st = cluster_node_->Start(); !st.ok()) {
    cluster_node_.reset();
    return st;
  }
  return absl::OkStatus();
}

ClusterNode::Options KvServer::NodeOptions() {
  ClusterNode::Options co;
  co.self.name = options_.node;
  co.self.rpc_address = address_;
  if (metrics_ != nullptr) co.self.metrics_address = metrics_->host_port();
  co.lease_ttl = options_.lease_ttl;
  co.policy = options_.policy;
  co.credentials = [this] { return NodeCredentials(); };
  co.arena_bytes = options_.arena_bytes;
  co.network_cut = options_.network_cut;
  co.metrics = cluster_metrics_.get();
  co.durable = !options_.data_dir.empty();
  co.placement_interval = options_.placement_interval;
  co.load_interval = options_.load_interval;
  // Where the logs it recovered end: the map shows them to the other replicas' nodes.
  for (const std::shared_ptr<ShardReplica>& r : shards_->All()) {
    if (r->recovered()) co.self.logs[r->id()] = r->recovered_position();
  }
  if (options_.embedding != nullptr) {
    co.run_threads = false;
    co.link_env = options_.embedding->links;
  }
  return co;
}

void KvServer::ServeStatusPages() {
  if (metrics_ == nullptr) return;
  // Registered last: the handlers read what Start built, from the endpoint's threads.
  metrics_->Handle("/status", [] {
    return http::MetricsEndpoint::Page{"text/html; charset=utf-8", StatusPageHtml()};
  });
  metrics_->Handle("/status.json", [this] {
    return http::MetricsEndpoint::Page{
        "application/json",
        status_->Json(options_.node, ClusterStatusJson(), DurabilityStatusJson())};
  });
}

std::string KvServer::DurabilityStatusJson() const {
  if (options_.data_dir.empty()) return "null";
  absl::Status failure;
  const LogWriter::Stats logs = log_stats(&failure);
  return absl::StrCat("{\"fsync\":", JsonString(fsync_policy_), ",\"log_records\":", logs.records,
                      ",\"log_syncs\":", logs.syncs, ",\"failure\":",
                      failure.ok() ? std::string("null") : JsonString(failure.ToString()), "}");
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
    conn = it->second.conn;
  }
  Log(LogLevel::kInfo, absl::StrCat("kvserver: closing connection ", id,
                                    " (fencing a primary this node no longer follows)"));
  conn->Close();  // Reap drops it once it shows failed
}

void KvServer::DropClient(uint64_t id) {
  if (grant_windows_ != nullptr) grant_windows_->DropClient(id);
  for (const std::shared_ptr<ShardReplica>& r : shards_->All()) r->store().DropClient(id);
}

KvServer::~KvServer() { Shutdown(); }

size_t KvServer::connections() const {
  MutexLock l(&mu_);
  return conns_.size();
}

size_t KvServer::connections_from(const std::string& host) const {
  MutexLock l(&mu_);
  size_t n = 0;
  for (const auto& [id, c] : conns_) n += c.host == host;
  return n;
}

void KvServer::Poll(absl::Duration wait) {
  if (shut_down_) return;
  for (Admission::Established& e : admission_->Poll(wait)) {
    const uint64_t id = e.peer->id;
    Log(LogLevel::kInfo, absl::StrCat("kvserver: client ", id, " (user \"", e.peer->user, "\", ",
                                      rpc::RoleNames(e.peer->roles), ") connected"));
    const uint64_t seen = e.conn->messages_received();
    MutexLock l(&mu_);
    conns_[id] = Conn{std::move(e.conn), std::move(e.peer), std::move(e.host), seen, clock_->Now()};
  }
  Reap();
  if (options_.idle_timeout > absl::ZeroDuration()) CloseIdle();
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

LogWriter::Stats KvServer::log_stats(absl::Status* failure) const {
  *failure = absl::OkStatus();
  if (shards_ == nullptr) return LogWriter::Stats();
  LogWriter::Stats sum = shards_->retired_log_stats();
  for (const std::shared_ptr<ShardReplica>& r : shards_->All()) {
    const LogWriter* log = r->log();
    if (log == nullptr) continue;
    sum += log->stats();
    if (absl::Status st = log->failure(); !st.ok()) *failure = st;
  }
  return sum;
}

void KvServer::RefreshGauges() {
  KvStore::Stats st = stats();
  if (log_metrics_ != nullptr) {
    absl::Status failure;
    const LogWriter::Stats logs = log_stats(&failure);
    log_metrics_->Update(logs, !failure.ok());
  }
  server_metrics_->SetArena(st.arena_used_bytes, st.arena_bytes - st.arena_used_bytes);
  server_metrics_->SetKeys(st.keys);
  engine_metrics_->SetTargetModels(engine::Summarize(engine_->target_models()));
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
    const absl::Time now = clock_->Now();
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
      std::vector<ClusterMetrics::TransferFigures> transfers;
      for (const ShardReplica::Transfer& t : r->Transfers()) {
        transfers.push_back(
            {t.node, t.bytes, t.sent_bytes, absl::ToDoubleSeconds(now - t.started)});
      }
      cluster_metrics_->SetTransfers(r->id(), transfers);
    }
    for (uint32_t gone : metric_shards_) {
      if (held.count(gone) > 0) continue;
      cluster_metrics_->SetShard(gone, "", 0);
      cluster_metrics_->SetTransfers(gone, {});
    }
    metric_shards_ = std::move(held);
  }
}

absl::StatusOr<std::string> KvServer::Admit(const rpc::HelloFn& hello) {
  if (options_.embedding == nullptr) {
    return absl::FailedPreconditionError("Admit is for embedded servers; clients dial --listen");
  }
  if (shut_down_) return absl::UnavailableError("server shutting down");
  return admission_->AdmitEmbedded(hello);
}

absl::Status KvServer::LoadAuth() {
  std::shared_ptr<const rpc::AuthTable> table = options_.auth;
  if (table == nullptr && !options_.auth_file.empty()) {
    absl::StatusOr<rpc::AuthTable> loaded = rpc::AuthTable::Load(options_.auth_file);
    if (!loaded.ok()) {
      return absl::Status(loaded.status().code(),
                          absl::StrCat("--auth_file: ", loaded.status().message()));
    }
    table = std::make_shared<const rpc::AuthTable>(*std::move(loaded));
  }
  if (table != nullptr && IsClusterMode(options_)) {
    const rpc::AuthUser* self = table->Find(options_.node);
    if (self == nullptr || (self->roles & rpc::kRoleNode) == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("the auth file has no node entry for this node (a line \"", options_.node,
                       " node SECRET\"): the other nodes could not tell it from a stranger"));
    }
  }
  MutexLock l(&auth_mu_);
  auth_ = std::move(table);
  return absl::OkStatus();
}

absl::Status KvServer::ReloadAuth() {
  if (options_.auth_file.empty()) {
    return absl::FailedPreconditionError("no --auth_file to reload");
  }
  const absl::Status st = LoadAuth();
  if (st.ok()) {
    Log(LogLevel::kWarning,
        absl::StrCat("kvserver: reloaded ", options_.auth_file, " (", Auth()->size(), " users)"));
  } else {
    Log(LogLevel::kError, absl::StrCat("kvserver: kept the previous users: ", st.message()));
  }
  return st;
}

std::string KvServer::auth_summary() const {
  const std::shared_ptr<const rpc::AuthTable> table = Auth();
  if (table != nullptr) {
    return absl::StrCat(table->size(), " users",
                        options_.auth_file.empty()
                            ? ""
                            : absl::StrCat(" from ", options_.auth_file, " (SIGHUP reloads)"));
  }
  return options_.insecure ? "none (--insecure: anyone who reaches the port holds every role)"
                           : "none (protected mode: loopback addresses only; docs/security.md)";
}

std::shared_ptr<const rpc::AuthTable> KvServer::Auth() const {
  MutexLock l(&auth_mu_);
  return auth_;
}

std::shared_ptr<const rpc::Credentials> KvServer::NodeCredentials() const {
  const std::shared_ptr<const rpc::AuthTable> table = Auth();
  if (table == nullptr) {
    // Without authentication a node still names itself: the others check the map by name.
    return std::make_shared<const rpc::Credentials>(rpc::Credentials{options_.node, ""});
  }
  absl::StatusOr<rpc::Credentials> c = table->CredentialsOf(options_.node);
  if (!c.ok()) return nullptr;  // LoadAuth refuses such a table; never reached
  return std::make_shared<const rpc::Credentials>(*std::move(c));
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
      if (it->second.conn->failed()) {
        gone.emplace_back(it->first, std::move(it->second.conn));
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

void KvServer::CloseIdle() {
  const absl::Time now = clock_->Now();
  std::vector<std::pair<uint64_t, std::shared_ptr<engine::Connection>>> idle;
  {
    MutexLock l(&mu_);
    for (auto& [id, c] : conns_) {
      // Nodes are exempt: a replication link is quiet whenever its shard is.
      if ((c.peer->roles & rpc::kRoleNode) != 0) continue;
      const uint64_t seen = c.conn->messages_received();
      if (seen != c.messages_seen) {
        c.messages_seen = seen;
        c.active_at = now;
      } else if (now - c.active_at >= options_.idle_timeout && !c.conn->failed()) {
        idle.emplace_back(id, c.conn);
      }
    }
  }
  for (auto& [id, conn] : idle) {
    server_metrics_->OnIdleClosed();
    Log(LogLevel::kInfo,
        absl::StrCat("kvserver: closing client ", id, ": no request for ",
                     absl::FormatDuration(options_.idle_timeout), " (--idle_timeout_s)"));
    conn->Close();  // Reap drops it (and its grants) once it shows failed
  }
}

void KvServer::Run(const std::atomic<bool>& stop, std::atomic<bool>* reload) {
  while (!stop.load()) {
    Poll(absl::Milliseconds(50));
    if (reload != nullptr && reload->exchange(false)) (void)ReloadAuth();
  }
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
  std::map<uint64_t, Conn> conns;
  {
    MutexLock l(&mu_);
    conns.swap(conns_);
  }
  for (auto& [id, c] : conns) {
    c.conn->SetMessageHandler(nullptr);
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
