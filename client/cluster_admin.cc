#include "client/cluster_admin.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace unloadkv {

absl::StatusOr<std::string> ForceEmpty(cluster::ClusterMap* map, uint32_t shard) {
  absl::StatusOr<cluster::ClusterView> view = map->Read();
  if (!view.ok()) return view.status();
  const cluster::ShardInfo* s = view->ShardById(shard);
  if (s == nullptr) {
    return absl::NotFoundError(absl::StrCat("cluster map has no shard ", shard, " (it has ",
                                            view->shard_list.size(), ")"));
  }
  if (s->epoch == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shard ", shard, " was never served: the first node to see it claims it anyway"));
  }
  std::vector<std::string> named;
  if (!s->primary.empty()) named.push_back(s->primary);
  named.insert(named.end(), s->backups.begin(), s->backups.end());
  for (const std::string& n : named) {
    if (view->IsLive(n)) {
      return absl::FailedPreconditionError(
          absl::StrCat("shard ", shard, ": node ", n,
                       " holds a replica and is live; force-empty is for a "
                       "shard whose every replica is gone (it gives the shard's data up)"));
    }
  }
  cluster::ShardInfo next = *s;
  next.epoch = s->epoch + 1;
  next.primary.clear();
  next.backups.clear();
  next.joining.clear();
  next.durable = false;
  // The transaction fails if one of them registers meanwhile: it may have come back with the
  // data.
  absl::StatusOr<int64_t> rev = map->UpdateShard(next, named);
  if (!rev.ok()) return rev.status();
  return absl::StrCat("shard ", shard, ": its data is given up (replicas [",
                      absl::StrJoin(named, ","), "] forgotten, epoch ", next.epoch, ", revision ",
                      *rev, "); the next live node claims it empty\n");
}

std::string DescribePolicy(const cluster::PlacementPolicy& policy) {
  if (!policy.auto_rebalance) return "automatic placement off";
  if (policy.max_shard_bytes == 0) return "automatic placement on, no split by size";
  return absl::StrCat("automatic placement on, shards split above ", policy.max_shard_bytes,
                      " live bytes");
}

absl::StatusOr<std::string> SetPlacementPolicy(cluster::ClusterMap* map,
                                               std::optional<bool> auto_rebalance,
                                               std::optional<uint64_t> max_shard_bytes) {
  if (max_shard_bytes && *max_shard_bytes != 0 && *max_shard_bytes < kMinMaxShardBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_shard_bytes must be 0 (no split by size) or at least ",
                     kMinMaxShardBytes, "; got ", *max_shard_bytes));
  }
  absl::Status last;
  for (int attempt = 0; attempt < 5; ++attempt) {
    absl::StatusOr<cluster::ClusterView> view = map->Read();
    if (!view.ok()) return view.status();
    cluster::PlacementPolicy policy = view->policy;
    if (auto_rebalance) policy.auto_rebalance = *auto_rebalance;
    if (max_shard_bytes) policy.max_shard_bytes = *max_shard_bytes;
    absl::StatusOr<int64_t> rev = map->SetPolicy(policy, *view);
    if (rev.ok()) return DescribePolicy(policy);
    last = rev.status();
    if (last.code() != absl::StatusCode::kFailedPrecondition) return last;
  }
  return last;
}

}  // namespace unloadkv
