// ClusterWorld: a whole cluster in one process, on the simulated fabric and in virtual time
// (docs/sim-cluster.md): several kvserver nodes (server::KvServer embedded, in cluster mode)
// sharing an in-memory cluster map (cluster::MemoryCoordinator on the fabric's clock), and
// SDK clients in cluster mode (the real ClusterRouter), all stepped by one Lockstep.
//
// Nothing of the server or the SDK is reimplemented: each node runs its arena, store, RPC
// service, grants, engine, replication links and ClusterNode. What the world adds is what a
// machine room would: a device per node and per client, a map service, and the threads that
// drive each node's lease and control loop (each a lockstep participant, so that opening a
// replication link may wait for its round trip while the rest of the world moves on).
//
// Faults (each named after what it models):
//   * Crash(i): the node's process dies. Its lease is not revoked (a crash sends nothing),
//     its QPs vanish, its memory is gone; Restart(i) starts a new incarnation under the same
//     name once the old lease expired (until then the name is taken and it retries).
//   * Pause(i, d): the process stops running for `d` (a GC pause, a stopped VM): no engine
//     polling, no lease keepalive, no control tick; then it resumes where it was.
//   * CutFromCluster(i, on): the node loses the map service and its replication links send
//     nothing (KvServerOptions::network_cut); its clients still reach it.
//   * CutFromMap(i, on): only the map service is unreachable from the node.
//   * LoseMapAnswers(i, on): the node's shard writes to the map apply, but it hears UNAVAILABLE
//     (a reply lost after the request reached the map service).
//   * Partition(side, on): the fabric links between the nodes of `side` and every other node
//     lose what crosses them (sim::Fabric::SetLinkCut: QPs across fail after the transport
//     timeout), and no replication link opens across; clients reach every node.
//   * With Options::durable, each node keeps its shard logs on a simulated disk of its own
//     (storage::MemoryDisk) that outlives its incarnations: a crash keeps what the process
//     wrote (the OS still has it), PowerLoss() crashes every node at once and every disk
//     loses what was not synced (all, nothing, or a seeded torn part), and DiskFull(i, on)
//     makes node i's disk full (writes fail with RESOURCE_EXHAUSTED) until turned off. A log
//     round (LogWriter::Poll) begins when records wait (or an interval's sync is due) and
//     ends `disk_latency` of virtual time later: one fsync at a time, covering what arrived
//     meanwhile. CrashInCompaction(i, ...) crashes node i at a chosen step of its next log
//     compaction (storage::MemoryDisk::HaltAt): from that step on the node does nothing, then
//     its participant crashes it, with a power loss of its disk or its page cache intact.
//   * SlowCpu(i, factor): the node's modeled CPU costs times `factor` (slow unload workers
//     and RPC handling); Jitter(max): every request up to `max` later, so that connections
//     overtake each other (each QP's order holds); SlowNetwork(i, max): every request the
//     node sends or receives up to `max` later still (a congested link: milliseconds).
// Faults are requests: a node's own participant applies crash and restart at its next turn,
// never while it is inside a tick.
//
//   ClusterWorld::Options o;  // 3 nodes, 2 shards of 3 replicas
//   auto world = ClusterWorld::Create(o);
//   (*world)->Run({[&] { auto c = (*world)->Connect(ClientOptions()); (*c)->Put("k", "v"); }});
//
// Determinism: for the same options and the same participant code, the same virtual times and
// results run after run (arenas mapped at fixed addresses per node and incarnation).
// Thread-safety: as Lockstep's. Create, Run and the accessors from the thread that created the
// world; Connect, Wait and the fault requests from participants (or from that thread outside
// Run).
// Lifetime: destroy every client before Run returns (the router's thread is a participant).
#ifndef UNLOADKV_TESTS_SIM_CLUSTER_WORLD_H_
#define UNLOADKV_TESTS_SIM_CLUSTER_WORLD_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "client/client.h"
#include "client/client_hooks.h"
#include "server/kv_server.h"
#include "tests/sim/sim_clients.h"
#include "tests/sim/sim_invariants.h"
#include "transport/cluster/memory_cluster_map.h"
#include "transport/rpc/auth_file.h"
#include "transport/rpc/bootstrap.h"
#include "transport/sim/fabric.h"
#include "transport/sim/lockstep.h"
#include "transport/sim/model.h"
#include "transport/storage/memory_disk.h"

namespace unloadkv::world {

using server::ClusterNode;
using server::KvServer;
using server::KvServerEmbedding;
using server::KvServerOptions;
using server::ShardReplica;

class ClusterWorld {
 public:
  struct Options {
    int nodes = 3;
    int shards = 2;
    int replicas = 3;                          // per shard, at most `nodes`
    uint64_t arena_bytes = uint64_t{8} << 20;  // per shard replica
    absl::Duration lease_ttl = absl::Seconds(3);
    std::string policy = "adaptive";  // path policy of every node's writes
    // Every node and client authenticates (rpc/handshake.h) with users the world makes up:
    // a node entry per node, one client user. false: no users (every connection holds every
    // role, as kvserver --insecure).
    bool authenticate = true;
    sim::NodeModel node_model;
    sim::NodeModel client_model;
    // Run fails (the world is stuck) past this much virtual time.
    absl::Duration max_time = absl::Minutes(30);
    // Durability (docs/durability.md): every node logs to a simulated disk (see above).
    bool durable = false;
    std::string fsync = "always";
    absl::Duration disk_latency = absl::Microseconds(200);
    uint64_t disk_seed = 1;  // what a power loss keeps of unsynced writes
    // Logs compact past this many bytes (small, so that runs compact; 0: never).
    uint64_t log_compact_bytes = 8 << 10;
    // Automatic placement (server/placer.h) on from the start, splitting shards above
    // max_shard_bytes (0: no split by size); the nodes decide and measure at these intervals.
    bool placement = false;
    uint64_t max_shard_bytes = 0;
    absl::Duration placement_interval = absl::Seconds(2);
    absl::Duration load_interval = absl::Seconds(1);
  };

  static absl::StatusOr<std::unique_ptr<ClusterWorld>> Create(const Options& options);
  ~ClusterWorld();
  ClusterWorld(const ClusterWorld&) = delete;
  ClusterWorld& operator=(const ClusterWorld&) = delete;

  const Clock& clock() const { return fabric_.clock(); }
  int64_t now_ns() const { return fabric_.now_ns(); }
  int nodes() const { return static_cast<int>(nodes_.size()); }
  const std::string& node_name(int i) const { return nodes_[i]->name; }
  // The node's running server; nullptr while it is down (crashed, not yet restarted).
  KvServer* server(int i) { return nodes_[i]->server.get(); }
  bool paused(int i) const { return now_ns() < nodes_[i]->paused_until_ns; }
  // Incarnations started so far (1 after Create).
  int incarnations(int i) const { return nodes_[i]->incarnations; }
  cluster::MemoryCoordinator& coordinator() { return coordinator_; }
  // A handle on the map for an operator's commands (kvclient cluster move, say).
  std::unique_ptr<cluster::MemoryClusterMap> AdminMap();
  // The cluster map as the map service holds it now.
  absl::StatusOr<cluster::ClusterView> View();
  // Every shard has a live primary, replicas - 1 live backups and nobody joining.
  bool FullyReplicated();
  // The engine invariants, checked on every connection of every engine, nodes' and clients'
  // (sim_invariants.h): what was checked and what failed.
  const SimInvariants::Counts& invariants() const { return checks_.counts(); }

  // Runs `bodies` as participants, with every node's lease and control loop, until all bodies
  // returned. FailedPrecondition when the world stalled or passed max_time (the process must
  // then exit: participants are left blocked).
  absl::Status Run(std::vector<std::function<void()>> bodies);
  // Inside Run: returns once `done()` holds (evaluated on the driving thread).
  void Wait(const std::function<bool()>& done) { lockstep_.Wait(done); }
  void SleepUntil(int64_t at_ns) {
    Wait([this, at_ns] { return fabric_.now_ns() >= at_ns; });
  }

  // A cluster-mode client on a device of its own; `options.embedding` and `cluster_map` are
  // set here. Call from a participant.
  absl::StatusOr<std::unique_ptr<Client>> Connect(ClientOptions options);

  // Fault requests (see above). Crash returns once applied; Restart asks, and the node comes
  // back as soon as its name is free.
  void Crash(int i);
  void Restart(int i);
  // Durable worlds only (see above). PowerLoss returns once every node is down; Restart each.
  void PowerLoss();
  void DiskFull(int i, bool full);
  // Arms node i's disk to halt at the `nth` step of kind `op` of its next compaction (from
  // the new state's file on); `power`: the disk then loses what was not synced. Halted(i):
  // the crash struck (the node is down, or going down at its participant's next turn).
  // Disarm(i) takes the request back if it has not struck. Durable worlds only.
  void CrashInCompaction(int i, storage::MemoryDisk::Op op, uint64_t nth, bool power);
  bool Halted(int i) const { return nodes_[i]->halt_struck; }
  void Disarm(int i);
  void Pause(int i, absl::Duration d);
  void CutFromCluster(int i, bool cut) { nodes_[i]->network_cut.store(cut); }
  void CutFromMap(int i, bool cut);
  void LoseMapAnswers(int i, bool lose);
  void Partition(const std::vector<int>& side, bool cut);
  void HealPartitions();
  void SlowCpu(int i, int factor);
  void SlowNetwork(int i, absl::Duration max_delay);
  void Jitter(absl::Duration max, uint64_t seed) {
    fabric_.SetJitter(absl::ToInt64Nanoseconds(max), seed);
  }

  // A rogue peer: connects to node `i` as a client does, then writes 64 bytes drawn from
  // `salt` where the node's NIC must refuse them, into one of its arenas (the `salt`-th
  // replica): across the arena's end under the arena's own key (kAcrossEnd, the first 8 bytes
  // in bounds), inside it under a key no region or window has (kUnknownKey), into another
  // client's granted slot with that client's stolen window key (kStolenGrantKey), or into a
  // backup's mirror with its primary's stolen window key (kStolenMirrorKey): a window works
  // only on the connection it is bound on. Its policy sends the write on `path`. Engine
  // invariant 3, end to end: OK when the write was refused with kRemoteAccessError and its
  // in-bounds bytes were not copied (the node then drops the failed connection: the leak
  // checks see it gone); Unavailable when the node is down or holds no replica (or no key of
  // the kind to steal); Internal,
  // naming what happened, otherwise. `took` (optional) gets the path the write took.
  // Call from a participant; returns within 5 s of virtual time.
  enum class Rogue { kAcrossEnd, kUnknownKey, kStolenGrantKey, kStolenMirrorKey };
  absl::Status RogueWrite(int i, engine::Path path, Rogue kind, uint64_t salt,
                          engine::Path* took = nullptr);

 private:
  struct Node {
    std::string name;
    std::string address;  // "sim://<name>"
    void* arena_base = nullptr;
    int incarnations = 0;
    std::unique_ptr<rnic::Device> device;
    KvServerEmbedding embedding;
    std::unique_ptr<cluster::MemoryClusterMap> map;  // this incarnation's handle
    std::unique_ptr<KvServer> server;
    std::atomic<bool> network_cut{false};
    bool map_cut = false;
    bool map_answers_lost = false;
    int64_t paused_until_ns = 0;
    enum class Want { kNothing, kCrash, kRestart } want = Want::kNothing;
    int64_t next_lease_ns = 0;
    int64_t next_control_ns = 0;
    int64_t restart_retry_ns = 0;
    std::unique_ptr<storage::MemoryDisk> disk;  // durable worlds; outlives incarnations
    int64_t disk_done_ns = 0;                   // when the log round in progress ends (0: none)
    bool halt_power = false;                    // CrashInCompaction: and a power loss
    bool halt_struck = false;                   // the last armed halt struck
  };
  // Node n's disk halted (CrashInCompaction): the process is dead.
  static bool DiskHalted(const Node& n) { return n.disk != nullptr && n.disk->halted(); }

  explicit ClusterWorld(const Options& options);
  bool Step();
  // Starts a new incarnation of node `i`; ALREADY_EXISTS while the last one's lease lives.
  absl::Status StartNode(int i);
  void StopNode(int i, bool crash);
  // A durable node's log rounds (see the class comment); the records they acknowledged.
  int DriveDisk(Node& n);
  // Node `i`'s participant: lease and control ticks, crash and restart, until Run's bodies
  // are done.
  void DriveNode(int i);
  // The server at `address` answers `hello` (a client's or a peer node's bootstrap; -1: a
  // client).
  absl::StatusOr<std::string> Dial(const std::string& address, const rpc::HelloFn& hello,
                                   int from_node);
  // Applies the cut of the link between nodes i and j to their current devices.
  void ApplyCut(int i, int j, bool cut);

  const Options options_;
  sim::Fabric fabric_;
  SimInvariants checks_;  // every engine's (outlives them)
  cluster::MemoryCoordinator coordinator_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::shared_ptr<const rpc::AuthTable> auth_;  // null without Options::authenticate
  rpc::Credentials client_credentials_;
  std::set<std::pair<int, int>> cut_pairs_;  // node indices (smaller, larger): Partition
  std::vector<std::unique_ptr<rnic::Device>> client_devices_;
  std::vector<std::unique_ptr<ClientEmbedding>> client_embeddings_;
  std::vector<std::unique_ptr<cluster::MemoryClusterMap>> client_maps_;
  Pollers pollers_;  // the clients' engines and deadlines (ClientEmbedding::add_poller)
  int bodies_left_ = 0;
  int64_t last_step_ns_ = -1;
  int steps_at_this_time_ = 0;
  std::string stop_reason_;  // why Step returned false
  sim::Lockstep lockstep_;
};

}  // namespace unloadkv::world

#endif  // UNLOADKV_TESTS_SIM_CLUSTER_WORLD_H_
