#include "transport/placement/shard_merge.h"

#include "absl/strings/str_cat.h"
#include "transport/placement/progress_lines.h"

namespace unloadkv {
namespace {

// Which of the two is on the left; INVALID_ARGUMENT unless one ends where the other starts.
absl::Status Resolve(const cluster::ShardInfo& a, const cluster::ShardInfo& b, MergeRequest* req) {
  if (a.id == b.id) {
    return absl::InvalidArgumentError(absl::StrCat("--shards names shard ", a.id, " twice"));
  }
  const cluster::ShardInfo* left = nullptr;
  const cluster::ShardInfo* right = nullptr;
  if (!a.end.empty() && a.end == b.start) left = &a, right = &b;
  if (!b.end.empty() && b.end == a.start) left = &b, right = &a;
  if (left == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("shards ", a.id, " and ", b.id,
                                                   " are not adjacent: only neighbouring ranges "
                                                   "merge (kvclient cluster status)"));
  }
  req->left = left->id;
  req->right = right->id;
  req->end = right->end;
  req->resolved = true;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<MergeStep> StepMerge(cluster::ClusterMap* map, MergeRequest* req) {
  absl::StatusOr<cluster::ClusterView> view = map->Read();
  if (!view.ok()) return view.status();
  if (req->resolved && view->ShardById(req->right) == nullptr) {
    const cluster::ShardInfo* merged = view->ShardById(req->left);
    if (merged != nullptr && merged->end == req->end) {
      return MergeStep{
          true, absl::StrCat("shard ", req->right, " merged into shard ", req->left, " (epoch ",
                             merged->epoch, ", primary ", merged->primary, ")")};
    }
  }
  const cluster::ShardInfo* a = view->ShardById(req->resolved ? req->left : req->a);
  const cluster::ShardInfo* b = view->ShardById(req->resolved ? req->right : req->b);
  if (a == nullptr || b == nullptr) {
    return absl::NotFoundError(absl::StrCat("cluster map has no shard ",
                                            a == nullptr ? (req->resolved ? req->left : req->a)
                                                         : (req->resolved ? req->right : req->b)));
  }
  if (!req->resolved) {
    if (absl::Status st = Resolve(*a, *b, req); !st.ok()) return st;
    if (a->id != req->left) std::swap(a, b);
  }
  const cluster::ShardInfo& left = *a;
  const cluster::ShardInfo& right = *b;
  const std::string prefix = absl::StrCat("shards ", left.id, "+", right.id, ": ");
  if (left.merge_with == right.id) {
    return MergeStep{false, absl::StrCat(prefix, "waiting for ", left.primary, " to copy shard ",
                                         right.id, "'s keys into shard ", left.id)};
  }
  if (left.merge_with != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(prefix, "shard ", left.id, " is asked to merge with shard ", left.merge_with));
  }
  for (const cluster::ShardInfo* s : {&left, &right}) {
    if (s->primary.empty() || !view->IsLive(s->primary)) {
      return absl::UnavailableError(absl::StrCat(prefix, "shard ", s->id, " has no live primary"));
    }
    if (s->split_id != 0 || !s->handover_to.empty()) {
      return absl::UnavailableError(
          absl::StrCat(prefix, "a split or hand-over of shard ", s->id, " is under way"));
    }
  }
  if (right.primary != left.primary) {
    // Both must be served by one node: the right shard's primary role moves there first.
    if (!req->moving || req->move.to != left.primary) {
      req->move = MoveRequest();
      req->move.shard = right.id;
      req->move.to = left.primary;
      req->moving = true;
    }
    absl::StatusOr<MoveStep> moved = StepMove(map, &req->move);
    if (!moved.ok()) {
      if (moved.status().code() == absl::StatusCode::kUnavailable) return moved.status();
      return absl::FailedPreconditionError(absl::StrCat(prefix, "moving shard ", right.id,
                                                        "'s primary role to ", left.primary,
                                                        " first: ", moved.status().message()));
    }
    return MergeStep{false, moved->said};
  }
  cluster::ShardInfo next = left;
  next.merge_with = right.id;
  absl::StatusOr<int64_t> rev = map->UpdateShard(next, {});
  if (rev.status().code() == absl::StatusCode::kFailedPrecondition) {
    return MergeStep{false, prefix + "the map changed meanwhile; reading it again"};
  }
  if (!rev.ok()) return rev.status();
  return MergeStep{false, absl::StrCat(prefix, "asked ", left.primary, " to merge shard ", right.id,
                                       " into shard ", left.id, " (revision ", *rev, ")")};
}

absl::StatusOr<std::string> UndoMerge(cluster::ClusterMap* map, const MergeRequest& req) {
  absl::StatusOr<cluster::ClusterView> view = map->Read();
  if (!view.ok()) return view.status();
  const cluster::ShardInfo* s = view->ShardById(req.left);
  if (!req.resolved || s == nullptr || s->merge_with != req.right) return std::string();
  cluster::ShardInfo next = *s;
  next.merge_with = 0;
  absl::StatusOr<int64_t> rev = map->UpdateShard(next, {});
  if (!rev.ok()) return rev.status();
  return absl::StrCat("shard ", req.left, ": the merge was called off (revision ", *rev, ")");
}

absl::Status RunMerge(cluster::ClusterMap* map, MergeRequest req, absl::Duration timeout,
                      absl::Duration poll, const std::function<void(const std::string&)>& say) {
  ProgressLines lines(say);
  absl::Status failed;
  while (true) {
    absl::StatusOr<MergeStep> step = StepMerge(map, &req);
    if (step.ok()) {
      lines.Tell(step->said);
      if (step->done) return absl::OkStatus();
    } else if (step.status().code() != absl::StatusCode::kUnavailable) {
      failed = step.status();
      break;
    } else {
      lines.Tell(std::string(step.status().message()));
    }
    if (absl::Now() - lines.start() > timeout) {
      failed = absl::DeadlineExceededError(absl::StrCat("the merge of shards ", req.a, " and ",
                                                        req.b, " did not end within ",
                                                        absl::FormatDuration(timeout)));
      break;
    }
    absl::SleepFor(poll);
  }
  for (auto undo :
       {UndoMerge(map, req), req.moving && req.move.resolved ? UndoMove(map, req.move)
                                                             : absl::StatusOr<std::string>("")}) {
    if (!undo.ok()) {
      lines.Tell(absl::StrCat("could not undo what the merge left: ", undo.status().message(),
                              " (kvclient cluster status)"));
    } else if (!undo->empty()) {
      lines.Tell(*undo);
    }
  }
  return failed;
}

}  // namespace unloadkv
