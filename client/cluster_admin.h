// Operator commands on a cluster's map that no node makes by itself (kvclient cluster ...).
//
// Thread-safety: a function at a time per map handle (they read, decide and write once).
#ifndef UNLOADKV_CLIENT_CLUSTER_ADMIN_H_
#define UNLOADKV_CLIENT_CLUSTER_ADMIN_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "transport/cluster/cluster_map.h"

namespace unloadkv {

// Gives up the data of durable shard `shard` whose every replica is gone
// (docs/durability.md): the map forgets its replicas (epoch + 1, no longer durable), and the
// next live node claims it empty. Refused, changing nothing: NOT_FOUND for an unknown shard;
// FAILED_PRECONDITION while a replica the map names is registered (it may hold the data: the
// message names it), or when the shard was never served. A replica that registers meanwhile
// fails the map transaction (FAILED_PRECONDITION too). Returns what was done, for the operator.
absl::StatusOr<std::string> ForceEmpty(cluster::ClusterMap* map, uint32_t shard);

// The smallest --max_shard_bytes a policy takes (0 turns splits by size off): below it every
// shard would split at once.
inline constexpr uint64_t kMinMaxShardBytes = 64 << 10;

// Changes the automatic placement policy (kvclient cluster init --auto_rebalance, cluster
// config): the fields given replace the stored ones, the others stay. INVALID_ARGUMENT for a
// max_shard_bytes in 1..kMinMaxShardBytes-1, changing nothing. A config written meanwhile (a
// split) is read again, a few times. Returns the policy now stored, described.
absl::StatusOr<std::string> SetPlacementPolicy(cluster::ClusterMap* map,
                                               std::optional<bool> auto_rebalance,
                                               std::optional<uint64_t> max_shard_bytes);

// "automatic placement on, shards split above 1048576 live bytes" and the like.
std::string DescribePolicy(const cluster::PlacementPolicy& policy);

}  // namespace unloadkv

#endif  // UNLOADKV_CLIENT_CLUSTER_ADMIN_H_
