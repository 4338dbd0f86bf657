// In-memory ClusterMap backend: a revisioned key-value store with leases and watches, with
// etcd's semantics as far as ClusterMap uses them, on an injectable clock. For tests and the
// whole-cluster simulation: several MemoryClusterMap handles (one per node or client) share
// one MemoryCoordinator, as processes share one etcd.
//
// Leases expire lazily: every call through any handle first expires the leases whose time has
// passed on the clock (and notifies watchers), as does ExpireLeases(). A simulation that
// advances virtual time calls ExpireLeases() to let watchers see expiries promptly.
#ifndef UNLOADKV_TRANSPORT_CLUSTER_MEMORY_CLUSTER_MAP_H_
#define UNLOADKV_TRANSPORT_CLUSTER_MEMORY_CLUSTER_MAP_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "transport/base/clock.h"
#include "transport/base/mutex.h"
#include "transport/cluster/cluster_map.h"

namespace unloadkv::cluster {

// The shared store. Thread-safe. Watch callbacks run on the thread whose call caused the
// change, after the store's lock is released.
class MemoryCoordinator {
 public:
  // `clock` must outlive the coordinator.
  explicit MemoryCoordinator(const Clock* clock = RealClock::Get()) : clock_(clock) {}

  // Expires every lease whose deadline has passed; notifies watchers of the deletions.
  void ExpireLeases();
  int64_t revision() const;

 private:
  friend class MemoryClusterMap;
  struct Entry {
    std::string value;
    int64_t create_revision = 0;
    int64_t mod_revision = 0;
    LeaseId lease = 0;
  };
  struct Lease {
    absl::Duration ttl;
    absl::Time deadline;
    std::set<std::string> keys;
  };
  struct Watcher {
    std::string prefix;
    std::function<void(int64_t)> on_change;
    Mutex call_mu;       // held while on_change runs: one call at a time
    bool active = true;  // guarded by call_mu
  };
  using Notices = std::vector<std::pair<std::shared_ptr<Watcher>, int64_t>>;

  // Requires mu_. Deletes expired leases' keys, collecting the watchers to notify.
  void ExpireLocked(Notices* notices);
  // Requires mu_. A change of `key` at revision_: queue the watchers it concerns.
  void NoteChangeLocked(const std::string& key, Notices* notices);
  void PutLocked(const std::string& key, std::string value, LeaseId lease, Notices* notices);
  void DeleteLocked(const std::string& key, Notices* notices);
  static void Deliver(const Notices& notices);

  const Clock* const clock_;
  mutable Mutex mu_;
  int64_t revision_ ABSL_GUARDED_BY(mu_) = 1;  // etcd starts at 1 too
  LeaseId next_lease_ ABSL_GUARDED_BY(mu_) = 0x1000;
  std::map<std::string, Entry> keys_ ABSL_GUARDED_BY(mu_);
  std::map<LeaseId, Lease> leases_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<Watcher>> watchers_ ABSL_GUARDED_BY(mu_);
};

// One client's handle on one cluster of a MemoryCoordinator.
class MemoryClusterMap : public ClusterMap {
 public:
  // `coordinator` must outlive the handle.
  MemoryClusterMap(MemoryCoordinator* coordinator, std::string cluster)
      : coordinator_(coordinator), cluster_(std::move(cluster)) {}

  // Fault injection: while unreachable every call fails UNAVAILABLE, as if the network to the
  // coordination service were cut (watches stay registered but the handle's own calls fail).
  void set_reachable(bool reachable) { reachable_.store(reachable); }
  // Fault injection: while set, a shard write (UpdateShard) that applies still reports
  // UNAVAILABLE, as when the connection to the coordination service fails after the request
  // reached it (an etcd paused past the caller's deadline answers the queued request on resume):
  // the caller cannot tell whether it was applied and must learn it from the map.
  void set_answers_lost(bool lost) { answers_lost_.store(lost); }

  std::string Describe() const override;
  absl::StatusOr<ClusterView> Read() override;
  absl::StatusOr<int64_t> Create(int replicas, const std::vector<ShardInfo>& shards) override;
  absl::StatusOr<int64_t> SplitShard(const ShardInfo& left, const ShardInfo& right,
                                     const ClusterView& read) override;
  absl::StatusOr<int64_t> MergeShards(const ShardInfo& merged, uint32_t right_id,
                                      const ClusterView& read) override;
  absl::StatusOr<int64_t> UpdateShard(const ShardInfo& shard,
                                      const std::vector<std::string>& absent_nodes) override;
  absl::StatusOr<int64_t> SetPolicy(const PlacementPolicy& policy,
                                    const ClusterView& read) override;
  absl::Status PublishLoad(const ShardLoad& load, LeaseId lease) override;
  absl::StatusOr<bool> Campaign(const std::string& node, LeaseId lease) override;
  absl::StatusOr<LeaseId> GrantLease(absl::Duration ttl) override;
  absl::StatusOr<absl::Duration> KeepAlive(LeaseId lease) override;
  absl::Status RevokeLease(LeaseId lease) override;
  absl::Status RegisterNode(const NodeInfo& node, LeaseId lease) override;
  absl::StatusOr<std::unique_ptr<MapWatch>> Watch(
      std::function<void(int64_t revision)> on_change) override;

 private:
  absl::Status CheckReachable() const;
  // Runs fn(&notices) under the coordinator's lock after expiring leases, then delivers the
  // watch notices (outside the lock); returns what fn returned.
  template <typename Fn>
  auto Transact(Fn fn) -> decltype(fn(std::declval<MemoryCoordinator::Notices*>()));

  MemoryCoordinator* const coordinator_;
  const std::string cluster_;
  std::atomic<bool> reachable_{true};
  std::atomic<bool> answers_lost_{false};
};

}  // namespace unloadkv::cluster

#endif  // UNLOADKV_TRANSPORT_CLUSTER_MEMORY_CLUSTER_MAP_H_
