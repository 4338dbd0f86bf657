// A kvserver's membership in a cluster (docs/cluster.md): it registers the node under a lease
// and keeps the lease alive, watches the map, and reconciles this node's shard replicas with
// it. All decisions are map transactions through ClusterMap (compare-on-revision), made from
// this class's control thread, never on an engine worker:
//   * claim: a shard that never had a primary (epoch 0) is claimed by the first node to see it;
//   * join: a node adds itself to `joining` of a shard that has fewer replicas than wanted; the
//     shard's primary attaches it and transfers the state through the engine, then moves it to
//     `backups` (epoch + 1) once it acknowledged everything;
//   * failover: when a primary is gone (its lease expired, or it resigned), the first live
//     backup raises its fence to epoch + 1 and takes over by a transaction that requires the
//     old primary's node key to be gone; every other replica rejoins by state transfer;
//   * repair: a primary drops backups whose lease expired or whose link failed (epoch + 1); a
//     dropped backup that is still alive rejoins;
//   * resign: a node named in a shard it holds no replica of (a restarted incarnation) removes
//     itself, so that the group does not wait on it;
//   * take back (durable nodes, docs/durability.md): a restarted node still named a shard's
//     primary, holding the shard's state replayed from its log, serves it again at epoch + 1;
//     every other replica rejoins. A durable shard that lost every replica waits for one to
//     come back with its data instead of being claimed empty (`kvclient cluster force-empty`).
//
// Reads are served locally only while LeaseValid(): the last keepalive the node sent, plus the
// TTL less a margin for clock drift. A successor can take over only after etcd expired the
// lease, which is later than that (docs/cluster.md, "Timing assumption").
//
// Thread-safety: Start and Stop from one thread; LeaseValid from any thread; LeaseTick and
// ControlTick each from one thread at a time (the node's own threads unless run_threads is
// false). Time comes from the injected clock; what still blocks in a tick: map calls (etcd:
// 2 s timeout) and opening a replication link (the TCP bootstrap exchange, 2 s timeout).
#ifndef UNLOADKV_SERVER_CLUSTER_NODE_H_
#define UNLOADKV_SERVER_CLUSTER_NODE_H_

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "server/cluster_metrics.h"
#include "server/placer.h"
#include "server/replica_link.h"
#include "server/shard_table.h"
#include "transport/base/clock.h"
#include "transport/base/mutex.h"
#include "transport/cluster/cluster_map.h"
#include "transport/engine/engine.h"

namespace unloadkv::server {

class ClusterNode {
 public:
  struct Options {
    cluster::NodeInfo self;
    absl::Duration lease_ttl = absl::Seconds(3);
    // How often the map is re-read without a watch event, and link deadlines checked.
    absl::Duration tick = absl::Milliseconds(100);
    std::string policy = "adaptive";  // path policy of replication links
    absl::Duration link_timeout = absl::Seconds(2);
    uint64_t arena_bytes = 0;
    // Fault injection (nullable): while set, replication links send nothing.
    const std::atomic<bool>* network_cut = nullptr;
    ClusterMetrics* metrics = nullptr;  // nullable; outlives the node
    // false: Start spawns no threads; the owner calls LeaseTick every lease_ttl / 3 and
    // ControlTick every `tick` or when TakeChanged() (a simulation drives them in virtual time).
    bool run_threads = true;
    LinkEnv link_env;  // how replication links reach nodes (a simulation's world)
    // What this node proves to the node a link reaches (its auth file entry; a name alone
    // without authentication). Called for every link opened (the file may be reloaded).
    std::function<std::shared_ptr<const rpc::Credentials>()> credentials;
    // The node's replicas log to disk (--data_dir): shards it serves are marked durable.
    bool durable = false;
    // Automatic placement, when the cluster's policy turns it on (server/placer.h): how often
    // this node's primaries publish their shards' sizes, how often the placer decides, and
    // when it gives a change up.
    absl::Duration load_interval = absl::Seconds(5);
    absl::Duration placement_interval = absl::Seconds(10);
    absl::Duration placement_timeout = absl::Minutes(5);
  };
  // For tests (Prometheus gets the same through Options::metrics).
  struct Counters {
    std::atomic<uint64_t> failovers{0};  // shards this node took over
  };

  // `map`, `shards` and `engine` must outlive the node.
  ClusterNode(cluster::ClusterMap* map, const Options& options, ShardTable* shards,
              engine::Engine* engine, const Clock* clock);
  ~ClusterNode();

  // Checks that the cluster exists, registers the node (ALREADY_EXISTS when the name is taken),
  // opens the watch and starts the control threads.
  absl::Status Start();
  // Stops the threads and revokes the lease, so that backups take over at once.
  void Stop();

  // Whether reads may be served locally: the lease is within its validity (0.8 TTL from the
  // last keepalive sent), and after a lost lease the map has been reconciled since.
  bool LeaseValid() const;
  // One step of the lease thread: a keepalive, or registering again after the lease was lost.
  void LeaseTick();
  // One step of the control thread: link deadlines, a read of the map, reconciliation.
  void ControlTick();
  // Whether the map changed (a watch event) since the last call.
  bool TakeChanged();
  const Counters& counters() const { return counters_; }
  const std::string& name() const { return options_.self.name; }
  // The map as this node last reconciled it (empty before the first read). Any thread.
  cluster::ClusterView LastView() const;

  // Whether node `sender` (the user its connection authenticated as) may send this node a
  // node request for `shard` at `epoch`, by the map as this node last read it. REPLICA_ATTACH
  // (`attach`): the map names `sender` the shard's primary at exactly `epoch` and places this
  // node in the shard's group (joining or backups). REPLICATE: the map names `sender` the
  // shard's primary (the replica itself takes records only from the connection it attached
  // on, at its fence or above). Otherwise PERMISSION_DENIED saying why, *reason set to
  // "not_primary" or "not_placed", and a re-read of the map is scheduled (a primary that
  // acted on a newer map retries). Any thread; never blocks.
  absl::Status AuthorizeNodeRequest(const std::string& sender, uint32_t shard, uint64_t epoch,
                                    bool attach, std::string* reason);

 private:
  // Lease thread: keepalive every TTL/3; re-registers when the lease was lost.
  void KeepLease();
  absl::Status Register();
  // Control thread: reads the map on change or every tick, reconciles.
  void Control();
  void Reconcile(const cluster::ClusterView& view);
  // A planned hand-over asked by the map (ShardInfo::handover_to): stops new writes, waits for
  // those in flight, then resigns with the backup first in line and leaves the group. True
  // while one is under way (the primary does nothing else this round).
  bool HandOver(const cluster::ClusterView& view, const cluster::ShardInfo& s,
                const std::shared_ptr<ShardReplica>& local);
  // Why the hand-over `s` asks for cannot go on now ("" : it can): its target is not a live
  // backup, or a backup failed (the group is repaired first).
  static std::string HandOverObstacle(const cluster::ClusterView& view, const cluster::ShardInfo& s,
                                      ShardReplica& local);
  // Attaches the joining nodes of `s` that have no link yet (`linked`) and starts their
  // catch-up (a state transfer, or a delta from the log).
  void AttachJoining(const cluster::ClusterView& view, const cluster::ShardInfo& s,
                     const std::shared_ptr<ShardReplica>& local,
                     const std::vector<std::string>& linked);
  void ServePrimary(const cluster::ClusterView& view, const cluster::ShardInfo& s,
                    const std::shared_ptr<ShardReplica>& local);
  // Attaches `nodes` (those of `s`'s group without a link yet) to `local` and starts their
  // catch-up; `delta`: they may keep the state they hold (AttachRequest.delta).
  void AttachNodes(const cluster::ClusterView& view, const cluster::ShardInfo& s,
                   const std::shared_ptr<ShardReplica>& local,
                   const std::vector<std::string>& nodes, bool delta);
  // ---- splits (cluster_split.cc; docs/cluster.md, "Splits") ----
  // A split asked by the map (ShardInfo::split_at, split_id): puts the SPLIT record into the
  // stream, waits for it to commit (every voting backup copied the range into its replica of
  // the new shard), makes this node's copy, then splits the map in one transaction: the new
  // shard's primary is this node, its backups the backups that voted on the record. True
  // while one is under way (the primary does nothing else with the shard this round).
  bool Split(const cluster::ClusterView& view, const cluster::ShardInfo& s,
             const std::shared_ptr<ShardReplica>& local);
  struct PendingSplit;
  // Split's second half, once the SPLIT record was put: waits for it to commit, copies, and
  // writes the map's transaction.
  bool FinishSplit(const cluster::ClusterView& view, const cluster::ShardInfo& s,
                   const std::shared_ptr<ShardReplica>& local, PendingSplit* pending);
  // Clears the split asked of `s` in the map, saying why (whoever asked may ask again).
  void GiveUpSplit(const cluster::ShardInfo& s, const std::shared_ptr<ShardReplica>& local,
                   const std::string& why);
  // A shard just split off on this node holds writes until the backups that copied it with
  // this node are linked again (they keep their copy: nothing is sent), at most a deadline.
  // True while it waits (the primary does nothing else with the shard this round).
  bool LinkSplitBackups(const cluster::ClusterView& view, const cluster::ShardInfo& s,
                        const std::shared_ptr<ShardReplica>& local);
  // ---- merges (cluster_merge.cc; docs/cluster.md, "Merges") ----
  // A merge asked by the map (ShardInfo::merge_with) of shard `s` (served by `local`) with the
  // shard starting at its end, both primary here: holds the other's writes, waits for those in
  // flight, writes its keys into `s` (replicated, a window at a time), then extends `s` over
  // its range and deletes its record in one transaction. True while one is under way.
  bool Merge(const cluster::ClusterView& view, const cluster::ShardInfo& s,
             const std::shared_ptr<ShardReplica>& local);
  struct PendingMerge;
  // Merge's copy: submits the right shard's next keys into `local` while the window allows.
  // True once every key was copied and committed; false while not, or when it gave up.
  bool CopyForMerge(const cluster::ShardInfo& s, const std::shared_ptr<ShardReplica>& local,
                    const std::shared_ptr<ShardReplica>& right, PendingMerge* pending);
  // Clears the merge asked of `s` in the map, saying why; the other shard takes writes again.
  void GiveUpMerge(const cluster::ShardInfo& s, const std::string& why);
  // Replicas of shards the map does not hold, and that no split under way will create: the
  // leftovers of a split given up. Removed once they stayed so for two lease TTLs.
  void RemoveOrphans(const cluster::ClusterView& view);
  void MaybeTakeOver(const cluster::ClusterView& view, const cluster::ShardInfo& s,
                     const std::shared_ptr<ShardReplica>& local);
  // Named primary of `s` with `local` recovered from its log: takes the shard back, resigns in
  // favour of a backup whose recovered log is newer, or waits for named backups still down
  // (at most two lease TTLs after this node started).
  void MaybeTakeBack(const cluster::ClusterView& view, const cluster::ShardInfo& s,
                     const std::shared_ptr<ShardReplica>& local);
  // Whether a live node named in `s`'s backups (other than this one) published a recovered
  // log of the shard newer than `mine`; its name in *who.
  bool NewerLogElsewhere(const cluster::ClusterView& view, const cluster::ShardInfo& s,
                         std::pair<uint64_t, uint64_t> mine, std::string* who) const;
  // Whether this node, outside `s`'s group, may ask to join it: a live primary and room.
  static bool CanJoin(const cluster::ClusterView& view, const cluster::ShardInfo& s);
  void MaybeJoin(const cluster::ClusterView& view, const cluster::ShardInfo& s);
  // Makes `local` the primary of `s` at epoch + 1 by a map transaction (`absent`: nodes that
  // must still be gone); every other live member rejoins by state transfer.
  bool TakeOver(const cluster::ClusterView& view, const cluster::ShardInfo& s,
                const std::shared_ptr<ShardReplica>& local, const std::vector<std::string>& absent,
                const std::string& what);
  // One map transaction for shard `next`; logs and counts a failure.
  bool Update(const cluster::ShardInfo& next, const std::vector<std::string>& absent,
              const std::string& what);
  void Signal();
  void NoteMapError();
  // ---- automatic placement (cluster_placement.cc) ----
  // With the policy on, every load_interval: the size of each shard this node is primary of,
  // published to the map when the map holds another figure (and to unloadkv_shard_live_bytes).
  void PublishLoads(const cluster::ClusterView& view);

  cluster::ClusterMap* const map_;
  const Options options_;
  ShardTable* const shards_;
  engine::Engine* const engine_;
  const Clock* const clock_;
  Counters counters_;

  std::atomic<bool> stop_{false};
  std::atomic<int64_t> lease_{0};
  std::atomic<int64_t> valid_until_ns_{0};  // clock_ time, unix nanoseconds
  std::atomic<bool> lease_lost_{false};
  // Leases lost so far, and how many of those losses a reconciliation after registering again
  // has covered: the node's replicas serve local reads only while the two are equal.
  std::atomic<uint64_t> losses_{0};
  std::atomic<uint64_t> confirmed_{0};
  std::unique_ptr<cluster::MapWatch> watch_;
  // What wakes the control thread: shared with the replicas' progress hooks, which may run
  // after this node is gone.
  struct Wake {
    std::mutex mu;
    std::condition_variable cv;
    bool changed = true;  // guarded by mu
    void Signal() {
      {
        std::lock_guard<std::mutex> l(mu);
        changed = true;
      }
      cv.notify_all();
    }
  };
  const std::shared_ptr<Wake> wake_ = std::make_shared<Wake>();
  std::thread lease_thread_;
  std::thread control_thread_;
  mutable Mutex view_mu_;
  // Shared, so that a request's check copies a pointer, not the map.
  std::shared_ptr<const cluster::ClusterView> last_view_ ABSL_GUARDED_BY(view_mu_) =
      std::make_shared<const cluster::ClusterView>();
  // Control thread only: automatic placement.
  std::unique_ptr<Placer> placer_;
  absl::Time next_load_ = absl::InfinitePast();
  // Control thread only: the (shard, node) links this node's primaries opened to a node while
  // it was joining (AttachJoining). A joining node linked otherwise holds a link from before it
  // joined, which is replaced.
  std::set<std::pair<uint32_t, std::string>> join_links_;
  // Control thread only: when each shard's primary was first seen gone.
  std::map<uint32_t, absl::Time> primary_gone_since_;
  absl::Time started_;  // Start's time
  // Control thread only: when the node last said that a durable shard waits for its data.
  std::map<uint32_t, absl::Time> waiting_said_;
  // Control thread only: when a link to a joining node that failed to open is tried again.
  struct LinkRetry {
    absl::Time after;
    absl::Duration backoff;  // the wait after the latest failure (doubles on each)
  };
  std::map<std::string, LinkRetry> link_retry_;
  // Control thread only: the split this node makes as primary, by shard split.
  struct SplitCommit;  // BeginSplit's outcome, from the thread that committed the record
  struct PendingSplit {
    std::string at;
    uint32_t id = 0;
    uint64_t epoch = 0;  // the epoch the SPLIT record was sent in
    std::shared_ptr<SplitCommit> commit;
    bool copied = false;  // this node's replica of the new shard holds the range
    uint64_t seq = 0;     // the SPLIT record's, once committed
  };
  std::map<uint32_t, PendingSplit> splits_;
  // Control thread only: shards split off on this node whose backups are being linked again,
  // and until when they wait for them.
  std::map<uint32_t, absl::Time> born_;
  // Control thread only: the merges this node makes as primary, by the shard that grows.
  struct MergeCopy;  // the copy's writes in flight, from the threads that commit them
  struct PendingMerge {
    uint32_t right = 0;
    std::shared_ptr<ShardReplica> from;   // the right shard's replica here (writes held)
    bool drained = false;                 // its writes in flight committed; `keys` taken
    std::vector<KvStore::Mutation> keys;  // its state, copied from `next` on
    size_t next = 0;
    std::shared_ptr<MergeCopy> copy;
  };
  std::map<uint32_t, PendingMerge> merges_;
  // Control thread only: since when a local replica's shard has been missing from the map.
  std::map<uint32_t, absl::Time> orphan_since_;
};

}  // namespace unloadkv::server

#endif  // UNLOADKV_SERVER_CLUSTER_NODE_H_
