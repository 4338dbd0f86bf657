// Merging two adjacent shards into one (docs/cluster.md, "Merges"), through the cluster map
// alone. The shard on the right must have the left one's primary as its own: when it has not,
// the steps first move its primary's role there (a `cluster move`,
// transport/placement/shard_move.h). Then the request sets the left shard's `merge_with`; its
// primary holds the right shard's writes (refused ABORTED: the SDK retries them), writes the right
// shard's keys into the left one as replicated writes, and in one map transaction extends the left
// shard over both ranges and deletes the right one. Reads are served throughout. A take-over
// meanwhile calls the merge off; the steps ask for it again.
//
// Thread-safety: one step at a time per map handle.
#ifndef UNLOADKV_TRANSPORT_PLACEMENT_SHARD_MERGE_H_
#define UNLOADKV_TRANSPORT_PLACEMENT_SHARD_MERGE_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "transport/cluster/cluster_map.h"
#include "transport/placement/shard_move.h"

namespace unloadkv {

struct MergeRequest {
  uint32_t a = 0, b = 0;  // the two shards, in either order
  // Filled in by the first step: which one keeps its id (the left one) and where the merged
  // range ends; and the move of the right shard's primary role, when one is needed.
  bool resolved = false;
  uint32_t left = 0, right = 0;
  std::string end;
  MoveRequest move;
  bool moving = false;
};

struct MergeStep {
  bool done = false;
  std::string said;  // what was done or is awaited, for the operator
};

// One step of the merge. Refused, changing nothing: NOT_FOUND for an unknown shard;
// INVALID_ARGUMENT for two shards that are not adjacent (or one shard twice);
// FAILED_PRECONDITION while another merge of the left shard is asked, or when a move of the
// right shard's primary role is refused; UNAVAILABLE while either has no live primary, or a
// split or hand-over of either is under way. A write that lost a race with a node is not an
// error: the step says so and the next one reads again.
absl::StatusOr<MergeStep> StepMerge(cluster::ClusterMap* map, MergeRequest* req);

// Calls off a merge still asked (after a timeout). Returns what it did ("" when nothing was).
absl::StatusOr<std::string> UndoMerge(cluster::ClusterMap* map, const MergeRequest& req);

// Steps `req` until done, each new line of progress to `say`, a step every `poll`;
// DEADLINE_EXCEEDED after `timeout` (the merge is called off), or the first refusal. Blocks.
absl::Status RunMerge(cluster::ClusterMap* map, MergeRequest req, absl::Duration timeout,
                      absl::Duration poll, const std::function<void(const std::string&)>& say);

}  // namespace unloadkv

#endif  // UNLOADKV_TRANSPORT_PLACEMENT_SHARD_MERGE_H_
