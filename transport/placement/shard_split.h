// Splitting a shard in two at a key (docs/cluster.md, "Splits"), through the cluster map
// alone. The request names the key and a new shard id in the shard's record (split_at,
// split_id); the shard's primary does the rest: a SPLIT record in its replication stream, at
// which every replica copies the keys from the split key on into its replica of the new shard,
// then one map transaction that ends the shard at the key and creates the new shard (primary:
// the same node; backups: those that copied it). Writes of the keys that move are refused
// ABORTED from the record to the transaction (the SDK retries them); every other key is served
// throughout. A take-over meanwhile calls the split off; the steps ask for it again.
//
// Thread-safety: one step at a time per map handle.
#ifndef UNLOADKV_TRANSPORT_PLACEMENT_SHARD_SPLIT_H_
#define UNLOADKV_TRANSPORT_PLACEMENT_SHARD_SPLIT_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "transport/cluster/cluster_map.h"

namespace unloadkv {

struct SplitRequest {
  uint32_t shard = 0;
  std::string at;       // the first key of the new shard; inside the shard's range
  uint32_t new_id = 0;  // filled in by the first step: the new shard's id (largest id + 1)
};

struct SplitStep {
  bool done = false;
  std::string said;  // what was done or is awaited, for the operator
};

// One step of the split. Refused, changing nothing: NOT_FOUND for an unknown shard;
// INVALID_ARGUMENT for a key that is not a valid key strictly inside the shard's range (its
// start is no split), or a cluster at kMaxShards; FAILED_PRECONDITION while another split of
// the shard is asked; UNAVAILABLE while the shard has no primary. A write that lost a race
// with a node is not an error: the step says so and the next one reads again.
absl::StatusOr<SplitStep> StepSplit(cluster::ClusterMap* map, SplitRequest* req);

// Calls off a split still asked (after a timeout): clears split_at and split_id when they are
// still req's. Returns what it did ("" when nothing was asked any more).
absl::StatusOr<std::string> UndoSplit(cluster::ClusterMap* map, const SplitRequest& req);

// Steps `req` until done, each new line of progress to `say` (prefixed with the seconds since
// it began), a step every `poll`; DEADLINE_EXCEEDED after `timeout` (the split is called off),
// or the first refusal. Blocks: for a command line.
absl::Status RunSplit(cluster::ClusterMap* map, SplitRequest req, absl::Duration timeout,
                      absl::Duration poll, const std::function<void(const std::string&)>& say);

}  // namespace unloadkv

#endif  // UNLOADKV_TRANSPORT_PLACEMENT_SHARD_SPLIT_H_
