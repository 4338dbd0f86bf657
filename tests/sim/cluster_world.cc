#include "tests/sim/cluster_world.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "transport/engine/engine.h"
#include "transport/engine/policy.h"

namespace unloadkv::world {
namespace {

constexpr char kCluster[] = "sim";
// Arenas: node i's incarnation k maps its replicas from kArenaBase + i * kNodeStride +
// k * kIncarnationStride on, one GiB apart (KvServerEmbedding::arena_address).
constexpr uintptr_t kArenaBase = uintptr_t{0x500000000000};
constexpr uintptr_t kNodeStride = uintptr_t{1} << 40;
constexpr uintptr_t kIncarnationStride = uintptr_t{1} << 36;
// How often a node's control loop runs without a map change (ClusterNode::Options::tick).
constexpr int64_t kControlTickNs = 100'000'000;
// A restart whose name is still registered (the crashed incarnation's lease lives) retries.
constexpr int64_t kRestartRetryNs = 500'000'000;
// Steps of the world at one virtual instant after which it is declared livelocked (work
// that never lets time pass; a real cluster would spin the same way).
constexpr int kMaxStepsAtOneTime = 1'000'000;
constexpr uint64_t kMaxTurnsWithoutStep = 1'000'000;

}  // namespace

ClusterWorld::ClusterWorld(const Options& options)
    : options_(options),
      checks_(&fabric_),
      coordinator_(&fabric_.clock()),
      lockstep_([this] { return Step(); }, kMaxTurnsWithoutStep) {}

absl::StatusOr<std::unique_ptr<ClusterWorld>> ClusterWorld::Create(const Options& options) {
  if (options.nodes < 1 || options.nodes > 16) {
    return absl::InvalidArgumentError("nodes must be in 1..16");
  }
  if (options.replicas < 1 || options.replicas > options.nodes) {
    return absl::InvalidArgumentError("replicas must be in 1..nodes");
  }
  if (options.shards < 1 || options.shards > 64) {
    return absl::InvalidArgumentError("shards must be in 1..64");
  }
  std::unique_ptr<ClusterWorld> w(new ClusterWorld(options));
  absl::StatusOr<std::vector<cluster::ShardInfo>> shards =
      cluster::InitialShards(options.shards, {});
  if (!shards.ok()) return shards.status();
  cluster::MemoryClusterMap admin(&w->coordinator_, kCluster);
  if (absl::StatusOr<int64_t> rev = admin.Create(options.replicas, *shards); !rev.ok()) {
    return rev.status();
  }
  if (options.placement) {
    absl::StatusOr<cluster::ClusterView> v = admin.Read();
    if (!v.ok()) return v.status();
    const cluster::PlacementPolicy policy{true, options.max_shard_bytes};
    if (absl::StatusOr<int64_t> rev = admin.SetPolicy(policy, *v); !rev.ok()) return rev.status();
  }
  for (int i = 0; i < options.nodes; ++i) {
    auto n = std::make_unique<Node>();
    n->name = absl::StrCat("n", i);
    n->address = absl::StrCat("sim://", n->name);
    n->arena_base = reinterpret_cast<void*>(kArenaBase + static_cast<uintptr_t>(i) * kNodeStride);
    if (options.durable) {
      n->disk = std::make_unique<storage::MemoryDisk>(options.disk_seed * 1000 + i);
    }
    w->nodes_.push_back(std::move(n));
  }
  if (options.authenticate) {
    // Made-up secrets: a simulation's users guard nothing, they exercise the same checks.
    std::string users = "sim-client client sim-client-secret-0123456789\n";
    for (const auto& n : w->nodes_) {
      absl::StrAppend(&users, n->name, " node sim-node-secret-of-", n->name, "\n");
    }
    absl::StatusOr<rpc::AuthTable> table = rpc::AuthTable::Parse(users, "the simulated cluster");
    if (!table.ok()) return table.status();
    w->auth_ = std::make_shared<const rpc::AuthTable>(*std::move(table));
    w->client_credentials_ = *w->auth_->CredentialsOf("sim-client");
  }
  for (int i = 0; i < options.nodes; ++i) {
    if (absl::Status st = w->StartNode(i); !st.ok()) return st;
  }
  return w;
}

ClusterWorld::~ClusterWorld() {
  for (int i = 0; i < nodes(); ++i) {
    if (nodes_[i]->server != nullptr) StopNode(i, /*crash=*/false);
  }
}

absl::Status ClusterWorld::StartNode(int i) {
  Node& n = *nodes_[i];
  {
    // A name still registered (the last incarnation's lease lives) cannot serve again yet:
    // checked before anything is built, so a refused attempt leaves no trace in the fabric.
    cluster::MemoryClusterMap probe(&coordinator_, kCluster);
    absl::StatusOr<cluster::ClusterView> view = probe.Read();
    if (!view.ok()) return view.status();
    if (view->IsLive(n.name)) {
      return absl::AlreadyExistsError(absl::StrCat("node ", n.name, " is still registered"));
    }
  }
  n.device = fabric_.CreateDevice(options_.node_model);
  n.map = std::make_unique<cluster::MemoryClusterMap>(&coordinator_, kCluster);
  n.map->set_reachable(!n.map_cut);
  n.map->set_answers_lost(n.map_answers_lost);
  n.embedding = KvServerEmbedding();
  n.embedding.device = n.device.get();
  n.embedding.clock = &fabric_.clock();
  n.embedding.arena_address = static_cast<char*>(n.arena_base) +
                              static_cast<uintptr_t>(n.incarnations) * kIncarnationStride;
  n.embedding.address = n.address;
  n.embedding.links.dial = [this, i](const std::string& address, const rpc::HelloFn& hello,
                                     absl::Duration) { return Dial(address, hello, i); };
  n.embedding.links.wait = [this](const std::function<bool()>& done) { lockstep_.Wait(done); };
  n.embedding.checks = &checks_;
  n.embedding.disk = n.disk.get();
  n.disk_done_ns = 0;
  KvServerOptions so;
  if (options_.durable) {
    so.data_dir = "/data/" + n.name;
    so.fsync = options_.fsync;
    so.log_compact_bytes = options_.log_compact_bytes;
  }
  so.embedding = &n.embedding;
  so.cluster_map = n.map.get();
  so.cluster = kCluster;
  so.node = n.name;
  so.arena_bytes = options_.arena_bytes;
  so.lease_ttl = options_.lease_ttl;
  so.placement_interval = options_.placement_interval;
  so.load_interval = options_.load_interval;
  so.policy = options_.policy;
  so.network_cut = &n.network_cut;
  so.auth = auth_;
  so.insecure = auth_ == nullptr;
  absl::StatusOr<std::unique_ptr<KvServer>> s = KvServer::Start(so);
  if (!s.ok()) {
    n.map.reset();
    n.device.reset();
    return s.status();
  }
  n.server = *std::move(s);
  ++n.incarnations;
  for (const auto& [a, b] : cut_pairs_) {
    if (a == i || b == i) ApplyCut(a, b, true);
  }
  n.next_lease_ns = fabric_.now_ns();
  n.next_control_ns = fabric_.now_ns();
  n.paused_until_ns = 0;
  return absl::OkStatus();
}

void ClusterWorld::StopNode(int i, bool crash) {
  Node& n = *nodes_[i];
  // A crash sends nothing: the lease is left to expire (the revoke in Shutdown fails), and
  // its logs write nothing more (no last sync).
  if (crash) {
    n.map->set_reachable(false);
    n.server->CrashLogs();
  }
  n.server->Shutdown();
  n.server.reset();
  n.device.reset();
  n.map.reset();
}

absl::StatusOr<std::string> ClusterWorld::Dial(const std::string& address,
                                               const rpc::HelloFn& hello, int from_node) {
  for (int j = 0; j < nodes(); ++j) {
    Node& n = *nodes_[j];
    if (n.address != address) continue;
    if (n.server == nullptr || now_ns() < n.paused_until_ns) {
      return absl::UnavailableError(absl::StrCat(address, ": node is down or not answering"));
    }
    if (from_node >= 0 &&
        (n.network_cut.load() || nodes_[from_node]->network_cut.load() ||
         cut_pairs_.count({std::min(j, from_node), std::max(j, from_node)}) > 0)) {
      return absl::UnavailableError(absl::StrCat(address, ": network cut"));
    }
    return n.server->Admit(hello);
  }
  return absl::NotFoundError(absl::StrCat("no node at ", address));
}

void ClusterWorld::ApplyCut(int i, int j, bool cut) {
  if (nodes_[i]->device == nullptr || nodes_[j]->device == nullptr) return;
  fabric_.SetLinkCut(sim::NodeIdOf(*nodes_[i]->device), sim::NodeIdOf(*nodes_[j]->device), cut);
}

void ClusterWorld::Partition(const std::vector<int>& side, bool cut) {
  std::vector<bool> in(nodes_.size(), false);
  for (int i : side) in[i] = true;
  for (int i = 0; i < nodes(); ++i) {
    for (int j = i + 1; j < nodes(); ++j) {
      if (in[i] == in[j]) continue;
      if (cut) {
        cut_pairs_.insert({i, j});
      } else {
        cut_pairs_.erase({i, j});
      }
      ApplyCut(i, j, cut);
    }
  }
}

void ClusterWorld::HealPartitions() {
  const std::set<std::pair<int, int>> cut = std::move(cut_pairs_);
  cut_pairs_.clear();
  for (const auto& [i, j] : cut) ApplyCut(i, j, false);
}

void ClusterWorld::SlowCpu(int i, int factor) {
  if (nodes_[i]->device != nullptr) {
    fabric_.SetCpuSlowdown(sim::NodeIdOf(*nodes_[i]->device), factor);
  }
}

void ClusterWorld::SlowNetwork(int i, absl::Duration max_delay) {
  if (nodes_[i]->device != nullptr) {
    fabric_.SetNodeDelay(sim::NodeIdOf(*nodes_[i]->device), absl::ToInt64Nanoseconds(max_delay));
  }
}

absl::StatusOr<std::unique_ptr<Client>> ClusterWorld::Connect(ClientOptions options) {
  client_devices_.push_back(fabric_.CreateDevice(options_.client_model));
  std::unique_ptr<ClientEmbedding> e =
      SimClientEmbedding(client_devices_.back().get(), fabric_, lockstep_, pollers_);
  e->bootstrap = [this](const std::string& server, const rpc::HelloFn& hello, absl::Duration) {
    return Dial(server, hello, -1);
  };
  if (auth_ != nullptr) e->credentials = &client_credentials_;
  e->spawn = [this](std::function<void()> body) { lockstep_.Spawn(std::move(body)); };
  e->checks = &checks_;
  client_maps_.push_back(std::make_unique<cluster::MemoryClusterMap>(&coordinator_, kCluster));
  ClientHooks hooks;
  hooks.embedding = e.get();
  hooks.cluster_map = client_maps_.back().get();
  options.etcd.clear();
  client_embeddings_.push_back(std::move(e));
  return ConnectWithHooks(options, hooks);
}

absl::Status ClusterWorld::RogueWrite(int i, engine::Path path, Rogue kind, uint64_t salt,
                                      engine::Path* took) {
  constexpr uint32_t kBytes = 64;
  KvServer* srv = server(i);
  if (srv == nullptr || paused(i)) return absl::UnavailableError(node_name(i) + " is down");
  const std::vector<std::shared_ptr<ShardReplica>> replicas = srv->shards().All();
  if (replicas.empty()) return absl::UnavailableError(node_name(i) + " holds no replica");
  const std::shared_ptr<ShardReplica>& r = replicas[salt % replicas.size()];
  const uint64_t arena_end = r->arena_addr() + r->memory().size();
  uint64_t addr = arena_end - 8;
  uint32_t rkey = r->arena_rkey();
  uint64_t in_bounds = 8;  // of the write's bytes, those inside the arena
  if (kind == Rogue::kUnknownKey) {
    addr = arena_end - kBytes;
    // A key no region or window of the fabric holds (keys are random: a guess).
    rkey = static_cast<uint32_t>(salt * 0x9e3779b97f4a7c15ULL >> 32) | 1;
    in_bounds = kBytes;
    if (fabric_.KeyInUse(rkey)) return absl::UnavailableError("the unknown key is in use");
  } else if (kind == Rogue::kStolenGrantKey) {
    // From the `salt`-th replica on, the first that has granted slots.
    std::vector<server::GrantWindows::Live> live;
    for (size_t k = 0; k < replicas.size() && live.empty(); ++k) {
      const std::shared_ptr<ShardReplica>& q = replicas[(salt + k) % replicas.size()];
      if (srv->grant_windows() != nullptr) live = srv->grant_windows()->LiveWindows(q->id());
    }
    if (live.empty()) return absl::UnavailableError("no client holds a grant there to steal");
    const server::GrantWindows::Live& v = live[(salt >> 8) % live.size()];
    if (v.length < kBytes) return absl::UnavailableError("the stolen grant's slot is small");
    addr = v.addr;
    rkey = v.rkey;
    in_bounds = kBytes;
  } else if (kind == Rogue::kStolenMirrorKey) {
    rkey = r->mirror_key();
    if (rkey == 0) return absl::UnavailableError("no mirror window there to steal");
    addr = r->arena_addr() + ((salt >> 8) % (r->arena_bytes() / kBytes)) * kBytes;
    in_bounds = kBytes;
  }

  client_devices_.push_back(fabric_.CreateDevice(options_.client_model));
  engine::EngineOptions eo;
  eo.max_connections_per_worker = 1;  // it sends no message
  eo.modeled_huge_pages = true;
  eo.checks = &checks_;
  absl::StatusOr<std::unique_ptr<engine::Engine>> e =
      engine::Engine::Create(client_devices_.back().get(), eo);
  if (!e.ok()) return e.status();
  std::unique_ptr<engine::Engine> engine = *std::move(e);
  std::string bytes(kBytes, '\0');
  for (uint32_t k = 0; k < kBytes; ++k) {
    bytes[k] = static_cast<char>((salt * 0x9e3779b97f4a7c15ULL) >> (8 * (k % 8)) ^ (k * 131));
  }
  absl::StatusOr<std::unique_ptr<rnic::MemoryRegion>> mr =
      engine->RegisterMemory(bytes.data(), bytes.size(), rnic::kLocalWrite);
  if (!mr.ok()) return mr.status();
  std::unique_ptr<engine::PathPolicy> policy;
  if (path == engine::Path::kUnload) {
    policy = std::make_unique<engine::UnloadPolicy>();
  } else {
    policy = std::make_unique<engine::OffloadPolicy>();
  }
  absl::StatusOr<std::unique_ptr<engine::Connection>> c =
      engine->CreateConnection(std::move(policy));
  if (!c.ok()) return c.status();
  std::unique_ptr<engine::Connection> conn = *std::move(c);
  // An authenticated client gone rogue (a compromised one): it holds the client secret.
  absl::StatusOr<rpc::Session> session =
      rpc::Bootstrap([this](const std::string& address, const rpc::HelloFn& hello,
                            absl::Duration) { return Dial(address, hello, -1); },
                     nodes_[i]->address, auth_ != nullptr ? &client_credentials_ : nullptr,
                     engine::EncodeConnectionInfo(conn->local_info()), absl::Seconds(5));
  if (!session.ok()) return session.status();
  absl::StatusOr<engine::ConnectionInfo> info = engine::DecodeConnectionInfo(session->remote_info);
  if (!info.ok()) return info.status();
  if (absl::Status st = conn->Connect(*info); !st.ok()) return st;
  const uint64_t poller = pollers_.Add([&engine] { return engine->PollOnce(); });

  std::optional<engine::WriteResult> result;
  absl::Status st = conn->Write((*mr)->Sge(0, kBytes), addr, rkey,
                                [&result](const engine::WriteResult& w) { result = w; });
  if (st.ok()) {
    const int64_t until = now_ns() + 5'000'000'000;
    Wait([&] { return result.has_value() || now_ns() >= until; });
    const char* copied =
        std::memcmp(reinterpret_cast<const void*>(addr), bytes.data(), in_bounds) == 0
            ? "copied its in-bounds bytes"
            : nullptr;
    if (!result) {
      st = absl::InternalError("the write did not complete within 5 s");
    } else if (result->status != rnic::WcStatus::kRemoteAccessError || copied != nullptr) {
      st = absl::InternalError(
          absl::StrCat("a write the NIC must refuse, on the ", engine::PathName(result->path),
                       " path, completed with ", rnic::WcStatusName(result->status),
                       copied != nullptr ? " and " : "", copied != nullptr ? copied : ""));
    }
    if (result && took != nullptr) *took = result->path;
  }
  conn->Close();
  pollers_.Remove(poller);
  conn.reset();
  mr->reset();
  return st;
}

absl::StatusOr<cluster::ClusterView> ClusterWorld::View() {
  cluster::MemoryClusterMap map(&coordinator_, kCluster);
  return map.Read();
}

bool ClusterWorld::FullyReplicated() {
  absl::StatusOr<cluster::ClusterView> v = View();
  if (!v.ok()) return false;
  for (const cluster::ShardInfo& s : v->shard_list) {
    if (s.primary.empty() || !v->IsLive(s.primary) || !s.joining.empty()) return false;
    if (static_cast<int>(s.backups.size()) != v->replicas - 1) return false;
    for (const std::string& b : s.backups) {
      if (!v->IsLive(b)) return false;
    }
  }
  return true;
}

int ClusterWorld::DriveDisk(Node& n) {
  if (n.disk == nullptr) return 0;
  const int64_t now = fabric_.now_ns();
  if (n.disk_done_ns == 0) {
    if (n.server->LogsPending())
      n.disk_done_ns = now + absl::ToInt64Nanoseconds(options_.disk_latency);
    return 0;
  }
  if (now < n.disk_done_ns) return 0;
  n.disk_done_ns = 0;
  return n.server->PollLogs();
}

void ClusterWorld::PowerLoss() {
  for (int i = 0; i < nodes(); ++i) Crash(i);
  for (const std::unique_ptr<Node>& n : nodes_) {
    if (n->disk != nullptr) n->disk->Crash();
  }
}

std::unique_ptr<cluster::MemoryClusterMap> ClusterWorld::AdminMap() {
  return std::make_unique<cluster::MemoryClusterMap>(&coordinator_, kCluster);
}

void ClusterWorld::DiskFull(int i, bool full) {
  storage::MemoryDisk* disk = nodes_[i]->disk.get();
  if (disk == nullptr) return;
  disk->set_capacity(full ? disk->used() : UINT64_MAX);
}

void ClusterWorld::CrashInCompaction(int i, storage::MemoryDisk::Op op, uint64_t nth, bool power) {
  Node& n = *nodes_[i];
  if (n.disk == nullptr) return;
  n.halt_power = power;
  n.halt_struck = false;
  n.disk->HaltAt(".tmp", op, nth);  // ReplicaLog::Compact writes the new state aside
}

void ClusterWorld::Disarm(int i) {
  Node& n = *nodes_[i];
  if (n.disk != nullptr && !n.disk->halted()) n.disk->Revive();
}

void ClusterWorld::Crash(int i) {
  Node& n = *nodes_[i];
  if (n.server == nullptr) return;
  n.want = Node::Want::kCrash;
  Wait([&n] { return n.want != Node::Want::kCrash; });
}

void ClusterWorld::Restart(int i) {
  Node& n = *nodes_[i];
  if (n.server != nullptr) return;
  n.want = Node::Want::kRestart;
  n.restart_retry_ns = now_ns();
}

void ClusterWorld::Pause(int i, absl::Duration d) {
  nodes_[i]->paused_until_ns = now_ns() + absl::ToInt64Nanoseconds(d);
}

void ClusterWorld::CutFromMap(int i, bool cut) {
  Node& n = *nodes_[i];
  n.map_cut = cut;
  if (n.map != nullptr) n.map->set_reachable(!cut);
}

void ClusterWorld::LoseMapAnswers(int i, bool lose) {
  Node& n = *nodes_[i];
  n.map_answers_lost = lose;
  if (n.map != nullptr) n.map->set_answers_lost(lose);
}

void ClusterWorld::DriveNode(int i) {
  Node& n = *nodes_[i];
  const int64_t lease_period = absl::ToInt64Nanoseconds(options_.lease_ttl / 3);
  bool changed = false;
  while (true) {
    Wait([&] {
      if (bodies_left_ == 0 || n.want == Node::Want::kCrash) return true;
      if (n.server != nullptr && DiskHalted(n)) {  // died mid-compaction
        n.want = Node::Want::kCrash;
        return true;
      }
      const int64_t now = fabric_.now_ns();
      if (n.want == Node::Want::kRestart) return now >= n.restart_retry_ns;
      if (n.server == nullptr || now < n.paused_until_ns) return false;
      if (now >= n.next_lease_ns || now >= n.next_control_ns) return true;
      changed = n.server->cluster_node()->TakeChanged();
      return changed;
    });
    if (bodies_left_ == 0) return;
    if (n.want == Node::Want::kCrash) {
      const bool halted = DiskHalted(n);
      if (n.server != nullptr) StopNode(i, /*crash=*/true);
      if (halted) {
        n.halt_struck = true;
        if (n.halt_power) {
          n.disk->Crash();
        } else {
          n.disk->Revive();
        }
      }
      n.want = Node::Want::kNothing;
      continue;
    }
    if (n.want == Node::Want::kRestart) {
      if (n.server != nullptr || StartNode(i).ok()) {
        n.want = Node::Want::kNothing;
      } else {
        n.restart_retry_ns = fabric_.now_ns() + kRestartRetryNs;
      }
      continue;
    }
    ClusterNode* node = n.server->cluster_node();
    if (fabric_.now_ns() >= n.next_lease_ns) {
      n.next_lease_ns = fabric_.now_ns() + lease_period;
      node->LeaseTick();
    }
    if (changed || fabric_.now_ns() >= n.next_control_ns) {
      changed = false;
      n.next_control_ns = fabric_.now_ns() + kControlTickNs;
      node->ControlTick();
    }
  }
}

absl::Status ClusterWorld::Run(std::vector<std::function<void()>> bodies) {
  bodies_left_ = static_cast<int>(bodies.size());
  for (int i = 0; i < nodes(); ++i) lockstep_.Spawn([this, i] { DriveNode(i); });
  for (std::function<void()>& b : bodies) {
    lockstep_.Spawn([this, body = std::move(b)] {
      body();
      --bodies_left_;
    });
  }
  absl::Status st = lockstep_.Run();
  if (!st.ok() && !stop_reason_.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(st.message(), ": ", stop_reason_));
  }
  return st;
}

bool ClusterWorld::Step() {
  int work = 0;
  for (const std::unique_ptr<Node>& n : nodes_) {
    if (n->server != nullptr && fabric_.now_ns() >= n->paused_until_ns && !DiskHalted(*n)) {
      work += n->server->DriveOnce();
      work += DriveDisk(*n);
    }
  }
  work += pollers_.PollAll();
  coordinator_.ExpireLeases();
  if (fabric_.now_ns() > absl::ToInt64Nanoseconds(options_.max_time)) {
    stop_reason_ = absl::StrCat("virtual time passed max_time (",
                                absl::FormatDuration(options_.max_time), ")");
    return false;
  }
  if (fabric_.now_ns() != last_step_ns_) {
    last_step_ns_ = fabric_.now_ns();
    steps_at_this_time_ = 0;
  } else if (++steps_at_this_time_ > kMaxStepsAtOneTime) {
    stop_reason_ = "livelock: the world kept working without virtual time advancing";
    return false;
  }
  if (work > 0) return true;
  fabric_.Run(absl::ToInt64Nanoseconds(absl::Milliseconds(1)));
  return true;
}

}  // namespace unloadkv::world
