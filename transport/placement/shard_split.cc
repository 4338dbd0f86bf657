#include "transport/placement/shard_split.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "proto/limits.h"
#include "transport/placement/progress_lines.h"

namespace unloadkv {
namespace {

std::string Quoted(const std::string& key) {
  return absl::StrCat("\"", absl::CHexEscape(key), "\"");
}

}  // namespace

absl::StatusOr<SplitStep> StepSplit(cluster::ClusterMap* map, SplitRequest* req) {
  absl::StatusOr<cluster::ClusterView> view = map->Read();
  if (!view.ok()) return view.status();
  const std::string prefix = absl::StrCat("shard ", req->shard, ": ");
  if (req->new_id != 0) {
    const cluster::ShardInfo* made = view->ShardById(req->new_id);
    if (made != nullptr && made->start == req->at) {
      return SplitStep{
          true,
          absl::StrCat(prefix, "split at ", Quoted(req->at), "; shard ", made->id, " holds [",
                       Quoted(made->start), ", ", made->end.empty() ? "end" : Quoted(made->end),
                       "), primary ", made->primary, ", backups [",
                       absl::StrJoin(made->backups, ","), "] (epoch ", made->epoch, ")")};
    }
  }
  const cluster::ShardInfo* found = view->ShardById(req->shard);
  if (found == nullptr) {
    return absl::NotFoundError(absl::StrCat("cluster map has no shard ", req->shard));
  }
  const cluster::ShardInfo& s = *found;
  if (absl::Status st = proto::CheckKey(req->at); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, "--at: ", st.message()));
  }
  if (req->at <= s.start || (!s.end.empty() && req->at >= s.end)) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "--at=", Quoted(req->at), " is not strictly inside its range [",
                     Quoted(s.start), ", ", s.end.empty() ? "end" : Quoted(s.end), ")"));
  }
  if (s.split_id != 0) {
    if (s.split_at != req->at) {
      return absl::FailedPreconditionError(absl::StrCat(
          prefix, "a split at ", Quoted(s.split_at), " is asked already (shard ", s.split_id, ")"));
    }
    req->new_id = s.split_id;
    return SplitStep{false, absl::StrCat(prefix, "waiting for its primary ",
                                         s.primary.empty() ? "(none)" : s.primary,
                                         " to split it into shard ", s.split_id)};
  }
  if (s.primary.empty() || !view->IsLive(s.primary)) {
    return absl::UnavailableError(prefix + "has no live primary now (a failover may be under way)");
  }
  uint32_t top = 0;
  for (const cluster::ShardInfo& x : view->shard_list) top = std::max(top, x.id);
  if (view->shards >= cluster::kMaxShards ||
      top + 1 >= static_cast<uint32_t>(cluster::kMaxShards)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the cluster has reached ", cluster::kMaxShards, " shards (or shard ids)"));
  }
  req->new_id = top + 1;
  cluster::ShardInfo next = s;
  next.split_at = req->at;
  next.split_id = req->new_id;
  absl::StatusOr<int64_t> rev = map->UpdateShard(next, {});
  if (rev.status().code() == absl::StatusCode::kFailedPrecondition) {
    return SplitStep{false, prefix + "the map changed meanwhile; reading it again"};
  }
  if (!rev.ok()) return rev.status();
  return SplitStep{
      false, absl::StrCat(prefix, "asked its primary ", s.primary, " to split it at ",
                          Quoted(req->at), " into shard ", req->new_id, " (revision ", *rev, ")")};
}

absl::StatusOr<std::string> UndoSplit(cluster::ClusterMap* map, const SplitRequest& req) {
  absl::StatusOr<cluster::ClusterView> view = map->Read();
  if (!view.ok()) return view.status();
  const cluster::ShardInfo* s = view->ShardById(req.shard);
  if (s == nullptr || req.new_id == 0 || s->split_id != req.new_id) return std::string();
  cluster::ShardInfo next = *s;
  next.split_at.clear();
  next.split_id = 0;
  absl::StatusOr<int64_t> rev = map->UpdateShard(next, {});
  if (!rev.ok()) return rev.status();
  return absl::StrCat("shard ", req.shard, ": the split was called off (revision ", *rev, ")");
}

absl::Status RunSplit(cluster::ClusterMap* map, SplitRequest req, absl::Duration timeout,
                      absl::Duration poll, const std::function<void(const std::string&)>& say) {
  ProgressLines lines(say);
  auto tell = [&lines](const std::string& what) { lines.Tell(what); };
  absl::Status failed;
  while (true) {
    absl::StatusOr<SplitStep> step = StepSplit(map, &req);
    if (step.ok()) {
      tell(step->said);
      if (step->done) return absl::OkStatus();
    } else if (step.status().code() != absl::StatusCode::kUnavailable) {
      failed = step.status();  // a refusal
      break;
    } else {
      tell(std::string(step.status().message()));  // no primary yet, or the map unreachable
    }
    if (absl::Now() - lines.start() > timeout) {
      failed = absl::DeadlineExceededError(absl::StrCat("shard ", req.shard, ": the split at ",
                                                        Quoted(req.at), " did not end within ",
                                                        absl::FormatDuration(timeout)));
      break;
    }
    absl::SleepFor(poll);
  }
  absl::StatusOr<std::string> undone = UndoSplit(map, req);
  if (!undone.ok()) {
    tell(absl::StrCat("could not call the split off: ", undone.status().message(),
                      " (kvclient cluster status)"));
  } else if (!undone->empty()) {
    tell(*undone);
  }
  return failed;
}

}  // namespace unloadkv
