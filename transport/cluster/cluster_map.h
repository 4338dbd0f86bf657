// ClusterMap: the one way the servers and the SDK reach the cluster's shared configuration
// (shards, replica groups, epochs, live nodes). Two backends implement it with the same
// semantics, checked by one conformance suite (cluster_map_conformance_test.cc):
//   * EtcdClusterMap: a real etcd 3.4 through its v3 JSON gateway (etcd_cluster_map.h);
//   * MemoryClusterMap: in-process, on an injectable clock, for tests and simulation.
//
// The model is etcd's: a revisioned key-value store; nodes are keys under leases, so a node
// that stops refreshing its lease disappears from the map after the lease's TTL; every change
// of a shard is a transaction that compares the shard's revision it read (no lost updates).
//
// Thread-safety: every method may be called from any thread. Calls may block on the network
// for up to the backend's request timeout (etcd: 2 s): call them from a control thread, never
// from an engine worker or an event loop.
#ifndef UNLOADKV_TRANSPORT_CLUSTER_CLUSTER_MAP_H_
#define UNLOADKV_TRANSPORT_CLUSTER_CLUSTER_MAP_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "transport/cluster/shard_map.h"

namespace unloadkv::cluster {

using LeaseId = int64_t;

// Keeps a watch open while it lives; destroying it stops the callbacks (it waits for a
// callback in progress to return, so never destroy it from inside its own callback).
class MapWatch {
 public:
  virtual ~MapWatch() = default;
};

class ClusterMap {
 public:
  virtual ~ClusterMap() = default;

  // Where the map lives, for error messages: "etcd at 127.0.0.1:2379, cluster c1".
  virtual std::string Describe() const = 0;

  // The whole map at one revision. NOT_FOUND when the cluster has no map (never initialized:
  // the message names the cluster and says how to create it); UNAVAILABLE when the service
  // cannot be reached (the message names the endpoint).
  virtual absl::StatusOr<ClusterView> Read() = 0;

  // Creates the map: the config and `shards` (epoch 0, no replicas), atomically.
  // ALREADY_EXISTS when the cluster has a map. Returns the new revision.
  virtual absl::StatusOr<int64_t> Create(int replicas, const std::vector<ShardInfo>& shards) = 0;

  // Writes `shard` (its id names the record) if and only if the stored record's revision is
  // still shard.mod_revision (the revision it was read at) and none of `absent_nodes` is
  // registered. FAILED_PRECONDITION when a comparison fails: someone changed the map first, or
  // a node thought dead is back; re-read and decide again. Returns the new revision.
  virtual absl::StatusOr<int64_t> UpdateShard(const ShardInfo& shard,
                                              const std::vector<std::string>& absent_nodes) = 0;

  // A split, atomically: writes `left` (the shard split, its range now ending at right.start)
  // and creates `right` (a new id taking the rest of the range), and counts one shard more in
  // the config, if and only if left's record is still at left.mod_revision, no record of
  // right.id exists and the config is still as in `read` (the view both were decided on).
  // FAILED_PRECONDITION when a comparison fails (re-read and decide again); INVALID_ARGUMENT
  // when the two are not a split of left's record in `read` (CheckSplit). Returns the new
  // revision.
  virtual absl::StatusOr<int64_t> SplitShard(const ShardInfo& left, const ShardInfo& right,
                                             const ClusterView& read) = 0;

  // A merge, atomically: writes `merged` (shard merged.id, its range now also the one of shard
  // `right_id`), deletes shard right_id's record and counts one shard less in the config, if
  // and only if both records and the config are still as in `read`. FAILED_PRECONDITION when
  // a comparison fails; INVALID_ARGUMENT when the ranges do not fit (CheckMerge). Returns the
  // new revision.
  virtual absl::StatusOr<int64_t> MergeShards(const ShardInfo& merged, uint32_t right_id,
                                              const ClusterView& read) = 0;

  // Writes the config's placement policy if and only if the config is still as in `read`
  // (FAILED_PRECONDITION otherwise: a split or merge counted shards meanwhile; re-read).
  // Returns the new revision.
  virtual absl::StatusOr<int64_t> SetPolicy(const PlacementPolicy& policy,
                                            const ClusterView& read) = 0;

  // Publishes what a shard's primary measured of it, under `lease` (the record goes with the
  // node), replacing the shard's previous record. NOT_FOUND when the lease expired.
  virtual absl::Status PublishLoad(const ShardLoad& load, LeaseId lease) = 0;

  // Makes `node` the placer under `lease` unless another node holds the role: true when
  // `node` holds it (now or already), false when another does. The role ends with the lease
  // (one placer at a time, etcd's election pattern). NOT_FOUND when nobody holds it and the
  // lease expired.
  virtual absl::StatusOr<bool> Campaign(const std::string& node, LeaseId lease) = 0;

  // Leases: a lease lives `ttl` (whole seconds, at least 1) after it was granted or last kept
  // alive; then every key under it is deleted.
  virtual absl::StatusOr<LeaseId> GrantLease(absl::Duration ttl) = 0;
  // Refreshes the lease; returns the TTL it now has. NOT_FOUND when it already expired.
  virtual absl::StatusOr<absl::Duration> KeepAlive(LeaseId lease) = 0;
  virtual absl::Status RevokeLease(LeaseId lease) = 0;

  // Registers `node` under `lease`, unless a node of that name is registered (ALREADY_EXISTS,
  // naming the node): two processes never serve under one name.
  virtual absl::Status RegisterNode(const NodeInfo& node, LeaseId lease) = 0;

  // Calls `on_change(revision)` after every change of the cluster's keys (map, nodes: a lease
  // expiring counts), one call at a time, on a thread of the backend's choosing, until the
  // returned handle is destroyed. The callback should Read() (from another thread if it may
  // block for long) rather than assume what changed. Changes may be coalesced.
  virtual absl::StatusOr<std::unique_ptr<MapWatch>> Watch(
      std::function<void(int64_t revision)> on_change) = 0;
};

}  // namespace unloadkv::cluster

#endif  // UNLOADKV_TRANSPORT_CLUSTER_CLUSTER_MAP_H_
