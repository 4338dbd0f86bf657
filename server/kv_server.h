// One kvserver: the device, the write engine, the shard replicas (each a registered value arena
// and its store), the KV service, the bootstrap listener that admits clients and peer nodes,
// the /metrics endpoint, and, in a cluster, the node's membership (server/cluster_node.h).
//
// Threads: engine workers (Options::unload_workers) run the RPC handlers and unload workers;
// the thread that calls Poll/Run admits clients (server/admission.h: never blocks, bounded by
// deadlines and caps) and reaps failed connections (a client that went away: its unused
// grants are returned, so a value it wrote but never PUT stays invisible).
#ifndef UNLOADKV_SERVER_KV_SERVER_H_
#define UNLOADKV_SERVER_KV_SERVER_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/admission.h"
#include "server/cluster_node.h"
#include "server/grant_windows.h"
#include "server/kv_service.h"
#include "server/kv_store.h"
#include "server/log_metrics.h"
#include "server/reaper.h"
#include "server/replica_log.h"
#include "server/server_metrics.h"
#include "server/shard_table.h"
#include "server/status_page.h"
#include "transport/base/mapped_memory.h"
#include "transport/base/mutex.h"
#include "transport/cluster/cluster_map.h"
#include "transport/cluster/etcd_gateway.h"
#include "transport/engine/engine.h"
#include "transport/engine/prometheus_metrics.h"
#include "transport/http/metrics_endpoint.h"
#include "transport/rnic/device.h"
#include "transport/rpc/auth_file.h"
#include "transport/rpc/bootstrap.h"
#include "transport/rpc/bootstrap_acceptor.h"
#include "transport/rpc/rpc.h"
#include "transport/storage/disk.h"

namespace unloadkv::server {

// A server embedded in a world someone else drives (tests/sim: the simulated fabric, in one
// thread and virtual time). The server then runs on `device` and `clock`, opens no listener
// and no /metrics endpoint and starts no thread: clients are admitted by KvServer::Admit, and
// the embedder calls KvServer::DriveOnce whenever the world moved.
struct KvServerEmbedding {
  rnic::Device* device = nullptr;  // not owned; outlives the server
  const Clock* clock = nullptr;    // not owned; the device's clock
  // The device models a node: staging rings asked for on huge pages count as huge-page
  // backed (EngineOptions::modeled_huge_pages); the arena takes `arena_huge_pages` instead of
  // KvServerOptions::huge_pages, mapped at `arena_address` if the kernel agrees (nullable;
  // a fixed address keeps the adaptive policy's page hashes the same from run to run).
  // Each shard replica the server creates takes the next arena address from there, so that
  // a node of a simulated cluster maps them where it did in the last run.
  bool arena_huge_pages = false;
  void* arena_address = nullptr;
  // The address this server is known by (a cluster map's rpc_address: what `links.dial` and
  // the clients' bootstrap are given).
  std::string address = "embedded";
  // Cluster mode: how replication links reach other nodes. ClusterNode runs no thread; the
  // embedder drives cluster_node()'s LeaseTick and ControlTick where they may block in
  // `links.wait`.
  LinkEnv links;
  // Optional: the engine's invariant checks (EngineOptions::checks); must outlive the server.
  engine::InvariantChecks* checks = nullptr;
  // With KvServerOptions::data_dir: the disk the logs live on (not owned; outlives the server),
  // instead of the real file system. The logs run no thread of their own: the embedder calls
  // KvServer::PollLogs (docs/durability.md, "The simulation").
  storage::Disk* disk = nullptr;
};

struct KvServerOptions {
  std::string listen = "127.0.0.1:7070";  // bootstrap address clients dial (port 0: any)
  std::string transport = "soft";         // soft | verbs
  std::string verbs_device;               // verbs: empty picks the first active port
  uint64_t arena_bytes = uint64_t{256} << 20;
  bool huge_pages = true;           // arena and staging rings on 2 MiB pages if possible
  std::string policy = "adaptive";  // path policy of writes this server initiates
  // Durability (docs/durability.md): the directory of the node's shard logs; empty keeps
  // everything in memory only.
  std::string data_dir;
  std::string fsync = "always";  // always | interval:MS | never (FsyncPolicy)
  // A shard log compacts once it grew past this many bytes since its last state (0: never;
  // ReplicaLog::Options::compact_bytes).
  uint64_t log_compact_bytes = uint64_t{256} << 20;
  int unload_workers = 1;
  std::string metrics_address = "127.0.0.1:9464";  // empty: no /metrics endpoint
  // Established and half-open client connections; 0: what the node holds
  // (connection_budget.h).
  int max_connections = 256;
  int max_half_open = 32;        // admitted connections with no message from the client yet
  int max_pending_hellos = 128;  // bootstrap sockets whose hello line is incomplete
  absl::Duration hello_deadline = absl::Seconds(2);      // accept -> complete hello line
  absl::Duration handshake_deadline = absl::Seconds(5);  // "ok" -> the client's first message
  // Authentication (docs/security.md): the users of the auth file may connect, each with its
  // role (rpc/auth_file.h); in cluster mode its `node` entry named `node` is what this node
  // proves to the others. Reloaded by ReloadAuth (kvserver: SIGHUP). Without it (and without
  // `auth`) nobody authenticates: every client holds every role, so the server listens on
  // loopback addresses only unless `insecure` (protected mode).
  std::string auth_file;
  // Tests and simulation: the table itself, instead of a file (not reloaded).
  std::shared_ptr<const rpc::AuthTable> auth;
  bool insecure = false;
  // Quotas, each refused with RESOURCE_EXHAUSTED naming the flag: grant bytes a connection
  // may hold unused in one shard replica (0: arena_bytes / 32); client connections from one
  // host (0: no cap but max_connections); how long a client connection may send nothing
  // before it is closed (zero: never; node connections are exempt).
  uint64_t max_grant_bytes_per_connection = 0;
  // Memory protection (docs/security.md): a client writes only the slots it was granted and has
  // not used yet, on both paths (grant windows and the unload workers' grant check), and a
  // backup's mirror only its attached primary. Off (kvserver --memory_protection=false) only
  // to measure what protection costs: any client may then write any byte of the arena.
  bool memory_protection = true;
  int max_connections_per_host = 0;
  absl::Duration idle_timeout = absl::ZeroDuration();
  // Cluster mode (docs/cluster.md): with `etcd` (or an injected `cluster_map`) the node joins
  // cluster `cluster` as `node`; arena_bytes is then per shard replica. Without, a single
  // node serving every key.
  std::string etcd;     // HOST:PORT[,HOST:PORT...]
  std::string cluster;  // cluster name
  std::string node;     // this node's name, unique in the cluster
  absl::Duration lease_ttl = absl::Seconds(3);
  // Automatic placement, when the cluster's policy turns it on (server/placer.h): how often the
  // placer decides, and how often primaries publish their shards' sizes.
  absl::Duration placement_interval = absl::Seconds(10);
  absl::Duration load_interval = absl::Seconds(5);
  // Paces the state transfers this node's primaries send (joins, moves, rejoins): value bytes
  // a second per shard (0: unlimited). ShardReplica::SetTransferRate.
  uint64_t transfer_bytes_per_second = 0;
  cluster::EtcdSecurity etcd_security;  // TLS and user for etcd (etcd_gateway.h)
  // Tests and simulation: the map to use instead of etcd (not owned; outlives the server).
  cluster::ClusterMap* cluster_map = nullptr;
  // Fault injection (nullable; kvserver --fault_signals): while *network_cut is set the node
  // is cut off from the map and from the other nodes, but not from clients.
  const std::atomic<bool>* network_cut = nullptr;
  // Not owned; outlives the server. With it, `listen`, `transport`, `verbs_device` and
  // `metrics_address` are unused.
  const KvServerEmbedding* embedding = nullptr;
};

// Whether `o` makes a node of a cluster (etcd endpoints or an injected map).
inline bool IsClusterMode(const KvServerOptions& o) {
  return !o.etcd.empty() || o.cluster_map != nullptr;
}

// Checks flag values before anything is opened; InvalidArgument naming the flag.
absl::Status ValidateOptions(const KvServerOptions& o);

class KvServer {
 public:
  static absl::StatusOr<std::unique_ptr<KvServer>> Start(const KvServerOptions& options);
  ~KvServer();

  const std::string& address() const { return address_; }
  std::string metrics_url() const { return metrics_ ? metrics_->url() : ""; }
  // Every metric family /metrics serves (also embedded, where there is no endpoint).
  const std::shared_ptr<prometheus::Registry>& registry() const { return registry_; }
  const std::string& arena_memory() const { return arena_memory_; }
  // The connection limit in force and what bounds it (--max_connections, connection_budget.h).
  int max_connections() const { return max_connections_; }
  const std::string& connection_budget() const { return connection_budget_; }
  // The shard logs' figures summed, and whether one refuses writes (its error); zeros and OK
  // without --data_dir.
  LogWriter::Stats log_stats(absl::Status* failure) const;
  // "log in DIR, fsync POLICY (...)" or "in memory only (no --data_dir)".
  const std::string& durability() const { return durability_; }
  const std::string& staging_memory() const { return engine_->staging_memory(); }
  std::string transport() const { return device_->transport(); }
  // "N users from FILE (SIGHUP reloads)", or what running without means.
  std::string auth_summary() const;

  // One turn of the admission loop: waits at most `wait` for bootstrap traffic, admits,
  // releases late half-open connections, reaps connections that failed, refreshes gauges
  // (embedded: every 100 ms of the clock at most).
  // Never blocks past `wait`. Call from one thread.
  void Poll(absl::Duration wait);
  // Embedded servers only (KvServerOptions::embedding). The bootstrap exchange in memory:
  // sends `hello` a challenge and returns the answer line to its hello (rpc::BootstrapDialer's
  // contract), as a bootstrap connection does over TCP. Then DriveOnce: runs the engine's
  // workers once and, every millisecond of the clock, a turn of Poll; returns the work done
  // (0: nothing was pending). Never blocks.
  absl::StatusOr<std::string> Admit(const rpc::HelloFn& hello);
  int DriveOnce();
  // Embedded with a disk: one round of every shard log's I/O (records acknowledged or
  // failed), and whether any log has records waiting for one.
  int PollLogs();
  bool LogsPending() const;
  // Embedded: the process dies now as far as its logs know: no more I/O, no last sync.
  void CrashLogs();
  // Reads --auth_file again; the new users apply to connections admitted from now on (those
  // already admitted keep their roles). On error the old table stays and the error is
  // returned. Any thread.
  absl::Status ReloadAuth();
  // Polls until `stop` is set (a signal handler may set it), then shuts down. Whenever
  // `reload` (nullable) is set, clears it and reloads the auth file.
  void Run(const std::atomic<bool>& stop, std::atomic<bool>* reload = nullptr);
  // Stops admitting, answers UNAVAILABLE from then on, closes every connection, stops the
  // engine. Idempotent.
  void Shutdown();

  // Summed over the shards this node serves as primary (after Shutdown: as they were then).
  KvStore::Stats stats() const;
  bool clustered() const { return cluster_node_ != nullptr; }
  const ClusterNode* cluster_node() const { return cluster_node_.get(); }
  ClusterNode* cluster_node() { return cluster_node_.get(); }
  ShardTable& shards() { return *shards_; }
  // The windows of clients' grants (null with memory protection off). Tests and simulation.
  GrantWindows* grant_windows() { return grant_windows_.get(); }
  // Established client connections: all of them, or those from `host`.
  size_t connections() const;
  size_t connections_from(const std::string& host) const;
  size_t half_open() const { return admission_ ? admission_->half_open() : 0; }

 private:
  KvServer() = default;
  // Start's steps, in order; each leaves the server half-built on error (Shutdown copes).
  // The device: the embedding's, or a real one opened after the bootstrap listener (returned
  // in *listener) took its port.
  absl::Status OpenDevice(std::unique_ptr<rpc::BootstrapAcceptor>* listener);
  absl::Status StartEngine();   // sized by the connection budget (connection_budget.h)
  absl::Status CreateShards();  // the replica table; a single node's one replica, primary
  // With --data_dir: the disk, the OWNER check (one node's data dir), the log metrics.
  absl::Status OpenDataDir();
  // Single node with --data_dir: recovers `replica` from its log and logs its writes from now on.
  absl::Status OpenLog(ShardReplica& replica);
  // Cluster mode with --data_dir: a replica for every shard directory whose log holds a whole
  // state; the map then decides which of them the node serves (ClusterNode).
  absl::Status RecoverShards();
  std::string ShardDir(uint32_t shard) const;
  // Whether the logs do their I/O on threads of their own (not embedded with a disk).
  bool LogThreads() const;
  ReplicaLog::Options LogOptions() const;
  ShardTable::Factory ReplicaFactory(bool huge_pages);
  absl::Status StartService(std::unique_ptr<rpc::BootstrapAcceptor> listener);
  KvService::Hooks ServiceHooks();
  absl::Status ServeMetrics();  // the /metrics endpoint (not embedded); starts the engine
  absl::Status JoinCluster();   // cluster mode: the map and the node's membership
  ClusterNode::Options NodeOptions();
  void ServeStatusPages();  // /status and /status.json, once everything they read exists
  void Reap();
  void RefreshGauges();  // Poll's thread only
  // The "cluster" section of /status.json: the map as this node last reconciled it, or null.
  std::string ClusterStatusJson() const;
  // The "durability" section: null without --data_dir.
  std::string DurabilityStatusJson() const;
  // A client's connection ended: its unused grants, in every shard, are returned.
  void DropClient(uint64_t id);
  // Fails connection `id` now (a fence against a deposed primary's writes).
  void ClosePeer(uint64_t id);
  // Closes client connections that sent nothing for options_.idle_timeout.
  void CloseIdle();
  // Reads options_.auth_file (or takes options_.auth) into auth_; checks a cluster node's own
  // entry. The old table stays on error.
  absl::Status LoadAuth();
  std::shared_ptr<const rpc::AuthTable> Auth() const;
  // This node's own credentials for links to other nodes (cluster mode): its auth file entry,
  // or its name alone without authentication.
  std::shared_ptr<const rpc::Credentials> NodeCredentials() const;

  KvServerOptions options_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<engine::PrometheusEngineMetrics> engine_metrics_;
  std::unique_ptr<ServerMetrics> server_metrics_;
  std::unique_ptr<rnic::Device> owned_device_;
  rnic::Device* device_ = nullptr;  // owned_device_, or the embedding's
  const Clock* clock_ = RealClock::Get();
  absl::Time next_poll_ = absl::InfinitePast();    // embedded: DriveOnce's next Poll
  absl::Time next_gauges_ = absl::InfinitePast();  // Poll's thread only
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<Reaper> reaper_;  // destroys dropped replication links; before the engine
  std::string arena_memory_;
  int max_connections_ = 0;
  std::string connection_budget_;
  std::unique_ptr<cluster::ClusterMap> owned_map_;  // etcd, when not injected
  std::unique_ptr<cluster::ClusterMap> cut_map_;    // the map behind the injectable cut
  // Windows of clients' grants: device objects, so after the engine's device is open and
  // before its end; outlives the shards (a replica destroyed as primary revokes through it).
  std::unique_ptr<GrantWindows> grant_windows_;
  std::unique_ptr<ShardTable> shards_;  // before the engine stops: MRs in it
  std::unique_ptr<KvService> service_;
  std::unique_ptr<rpc::RpcServer> rpc_;
  std::unique_ptr<Admission> admission_;
  std::string address_;
  std::unique_ptr<StatusSampler> status_;  // the figures of /status and /status.json
  std::unique_ptr<http::MetricsEndpoint> metrics_;
  std::unique_ptr<ClusterMetrics> cluster_metrics_;  // cluster mode
  std::set<uint32_t> metric_shards_;                 // Poll's thread only
  std::optional<KvStore::Stats> final_stats_;        // set by Shutdown
  std::unique_ptr<ClusterNode> cluster_node_;
  std::unique_ptr<storage::Disk> owned_disk_;  // the real file system (not embedded)
  storage::Disk* disk_ = nullptr;  // with --data_dir: owned_disk_ or the embedding's; outlives
                                   // the shards' logs
  std::unique_ptr<LogMetrics> log_metrics_;  // with --data_dir
  std::string fsync_policy_;  // the parsed --fsync, as FsyncPolicy::ToString; set by OpenLog
  std::string durability_;    // what start-up says of it
  // Cluster mode: the torn log tails replicas cut at recovery (RecoverShards reports them).
  mutable Mutex torn_mu_;
  std::vector<std::string> torn_ ABSL_GUARDED_BY(torn_mu_);

  mutable Mutex auth_mu_;
  std::shared_ptr<const rpc::AuthTable> auth_ ABSL_GUARDED_BY(auth_mu_);

  // An established connection, who it is and when it last sent anything.
  struct Conn {
    std::shared_ptr<engine::Connection> conn;
    std::shared_ptr<const rpc::Peer> peer;
    std::string host;
    uint64_t messages_seen = 0;  // Poll's thread only: messages_received() at active_at
    absl::Time active_at;        // Poll's thread only
  };
  mutable Mutex mu_;
  std::map<uint64_t, Conn> conns_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ = false;
};

}  // namespace unloadkv::server

#endif  // UNLOADKV_SERVER_KV_SERVER_H_
