// The cluster map as values: shards (key ranges with a replica group and an epoch) and the
// live nodes, read at one revision of the coordination service. Plain data, no I/O.
#ifndef UNLOADKV_TRANSPORT_CLUSTER_SHARD_MAP_H_
#define UNLOADKV_TRANSPORT_CLUSTER_SHARD_MAP_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace unloadkv::cluster {

// Largest number of shards and replicas `cluster init` accepts.
inline constexpr int kMaxShards = 4096;
inline constexpr int kMaxReplicas = 7;

struct ShardInfo {
  uint32_t id = 0;
  std::string start;  // inclusive; "" = the smallest key
  std::string end;    // exclusive; "" = no upper bound
  uint64_t epoch = 0;
  std::string primary;  // "" while the shard has none
  std::vector<std::string> backups;
  std::vector<std::string> joining;
  // Revision at which this shard's record was last written (etcd's mod_revision). An update
  // applies only if the record was not written since: see ClusterMap::UpdateShard.
  int64_t mod_revision = 0;
  // Its replicas log to disk: with none left it waits for one to come back (ShardRecord).
  bool durable = false;
  // A planned hand-over of the primary's role to this backup (ShardRecord.handover_to).
  std::string handover_to;
  // A planned split at this key into a new shard of id split_id (ShardRecord.split_at; 0: none).
  std::string split_at;
  uint32_t split_id = 0;
  // A planned merge with the shard starting at this one's end (ShardRecord.merge_with; 0: none).
  uint32_t merge_with = 0;

  bool Contains(absl::string_view key) const { return key >= start && (end.empty() || key < end); }
  // Primary first, then backups.
  std::vector<std::string> Replicas() const;
  bool HasReplica(absl::string_view node) const;
};

struct NodeInfo {
  std::string name;
  std::string rpc_address;
  std::string metrics_address;
  // The shard logs the node recovered whole when it started: shard -> (epoch, seq) of its
  // last live record (NodeRecord.logs).
  std::map<uint32_t, std::pair<uint64_t, uint64_t>> logs;
};

// Automatic placement, as set by `cluster init --auto_rebalance` or `cluster config`.
struct PlacementPolicy {
  bool auto_rebalance = false;
  uint64_t max_shard_bytes = 0;  // split a shard above this many live bytes; 0: never
  bool operator==(const PlacementPolicy& o) const {
    return auto_rebalance == o.auto_rebalance && max_shard_bytes == o.max_shard_bytes;
  }
};

// A shard's size as its primary last published it (ShardLoadRecord).
struct ShardLoad {
  uint32_t shard = 0;
  std::string node;  // the primary that measured it
  uint64_t epoch = 0;
  uint64_t keys = 0;
  uint64_t live_bytes = 0;
  std::string median_key;  // "" when the shard holds no key
};

// What `cluster status` calls a shard's state, derived from the map and the live nodes.
enum class ShardState {
  kServing,          // live primary and every wanted backup live
  kUnderReplicated,  // live primary, fewer live backups than wanted (it waits for nodes)
  kPrimaryDown,      // primary not registered: a backup should take over
  kNoPrimary,        // no primary and no replica left to take over: waits for a node
};
absl::string_view ShardStateName(ShardState state);

struct ClusterView {
  int64_t revision = 0;               // the coordination service's revision this view was read at
  int64_t config_revision = 0;        // the config record's mod revision (a split compares it)
  int shards = 0;                     // from the config
  int replicas = 0;                   // wanted group size, from the config
  std::vector<ShardInfo> shard_list;  // ordered by start key, covering the key space
  std::map<std::string, NodeInfo> nodes;  // live (registered) nodes by name
  PlacementPolicy policy;                 // from the config
  std::map<uint32_t, ShardLoad> loads;    // by shard id; only those whose primary published
  std::string placer;                     // the node deciding placement; "" when none

  bool IsLive(absl::string_view node) const { return nodes.count(std::string(node)) > 0; }
  // The shard whose range holds `key`; nullptr only for a malformed map.
  const ShardInfo* ShardFor(absl::string_view key) const;
  const ShardInfo* ShardById(uint32_t id) const;
  ShardState StateOf(const ShardInfo& shard) const;
};

// The initial shards of a new map: `n` ranges splitting the key space. With `split_keys`
// (n - 1 strictly increasing, non-empty keys) they are the boundaries; otherwise the ranges
// split the first key byte evenly. Epoch 0, no replicas: nodes join them.
absl::StatusOr<std::vector<ShardInfo>> InitialShards(int n,
                                                     const std::vector<std::string>& split_keys);

// Checks that `shards` are ordered, contiguous and cover the whole key space.
absl::Status CheckCoverage(const std::vector<ShardInfo>& shards);

// Validates a node name (the --node flag): 1-64 characters of [A-Za-z0-9._-].
absl::Status CheckNodeName(absl::string_view name);
// Validates a cluster name (the --cluster flag): same alphabet and length.
absl::Status CheckClusterName(absl::string_view name);

}  // namespace unloadkv::cluster

#endif  // UNLOADKV_TRANSPORT_CLUSTER_SHARD_MAP_H_
