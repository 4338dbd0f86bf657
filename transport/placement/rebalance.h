// One pass of the placement policy (kvclient cluster rebalance; docs/cluster.md): the moves
// that spread a cluster's roles over its live nodes. Greedy placement (a node joins whatever
// needs a replica) leaves the first nodes holding everything; a node added later holds
// nothing. A pass plans, from one view of the map:
//   1. roles: while a node holds more than its share of the replica roles (floor(roles /
//      nodes)), one of its roles, a backup's where it can, moves to the live node outside
//      that shard's group holding the fewest (never two replicas of a shard on one node),
//      when that node holds at least two roles fewer (so the counts end within one);
//   2. primaries: while a node is primary of more than its share of the shards (floor(shards /
//      nodes)), one of its primary roles goes to a node primary of two fewer by hand-overs (no
//      copy): to a backup of that shard, or along the shortest chain of hand-overs (u to its
//      backup v on one shard, v to its backup w on another: only u's and w's counts change).
// Each move is then made as `cluster move` makes it (shard_move.h), one at a time.
//
// Thread-safety: plain functions; RunRebalance blocks (a command line's).
#ifndef UNLOADKV_TRANSPORT_PLACEMENT_REBALANCE_H_
#define UNLOADKV_TRANSPORT_PLACEMENT_REBALANCE_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "transport/cluster/cluster_map.h"
#include "transport/placement/shard_move.h"

namespace unloadkv {

// The moves of one pass over `view` (in the order to make them); none when the roles are
// spread already. Shards without a primary, or with nodes joining, are left alone this pass.
std::vector<MoveRequest> PlanRebalance(const cluster::ClusterView& view);

// Plans one pass from the map and makes its moves (RunMove, each within `timeout`), saying
// each; stops at the first move that fails, with its error.
absl::Status RunRebalance(cluster::ClusterMap* map, absl::Duration timeout, absl::Duration poll,
                          const std::function<void(const std::string&)>& say,
                          const MoveProgress& progress = nullptr);

}  // namespace unloadkv

#endif  // UNLOADKV_TRANSPORT_PLACEMENT_REBALANCE_H_
