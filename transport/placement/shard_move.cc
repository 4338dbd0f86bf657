#include "transport/placement/shard_move.h"

#include <algorithm>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "transport/placement/progress_lines.h"

namespace unloadkv {
namespace {

bool Contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}
void Erase(std::vector<std::string>* v, const std::string& x) {
  v->erase(std::remove(v->begin(), v->end(), x), v->end());
}
bool InGroup(const cluster::ShardInfo& s, const std::string& n) {
  return s.HasReplica(n) || Contains(s.joining, n);
}

// Writes `next`, the step then in `state`; a lost race (FAILED_PRECONDITION) is a step that
// changed nothing (and is not done, whatever `state` it was to reach).
absl::StatusOr<MoveStep> Write(cluster::ClusterMap* map, const cluster::ShardInfo& next,
                               MoveStep::State state, const std::string& what) {
  absl::StatusOr<int64_t> rev = map->UpdateShard(next, {});
  if (rev.status().code() == absl::StatusCode::kFailedPrecondition) {
    return MoveStep{state == MoveStep::State::kDone ? MoveStep::State::kHandingOver : state,
                    "the map changed meanwhile; reading it again"};
  }
  if (!rev.ok()) return rev.status();
  return MoveStep{state, absl::StrCat(what, " (epoch ", next.epoch, ", revision ", *rev, ")")};
}

// The first step's reading of the request: `from` (the primary when empty) and its role;
// refused when the move makes no sense.
absl::Status Resolve(const cluster::ShardInfo& s, MoveRequest* req) {
  const std::string prefix = absl::StrCat("shard ", s.id, ": ");
  if (req->from.empty()) {
    if (s.primary.empty()) {
      return absl::UnavailableError(prefix + "has no primary now (a failover may be under way)");
    }
    req->from = s.primary;
  }
  if (req->from == req->to) {
    return absl::InvalidArgumentError(prefix + "--from and --to name the same node " + req->to);
  }
  if (!InGroup(s, req->from)) {
    return absl::FailedPreconditionError(
        absl::StrCat(prefix, "node ", req->from, " holds no role in it (primary ",
                     s.primary.empty() ? "(none)" : s.primary, ")"));
  }
  req->primary = s.primary == req->from;
  // Only the primary's role may go to a replica the group has (a backup, or one joining).
  if (InGroup(s, req->to) && (!req->primary || s.primary == req->to)) {
    return absl::FailedPreconditionError(
        absl::StrCat(prefix, "node ", req->to, " already holds a role in it"));
  }
  req->resolved = true;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<MoveStep> StepMove(cluster::ClusterMap* map, MoveRequest* req) {
  absl::StatusOr<cluster::ClusterView> view = map->Read();
  if (!view.ok()) return view.status();
  const cluster::ShardInfo* found = view->ShardById(req->shard);
  if (found == nullptr) {
    return absl::NotFoundError(absl::StrCat("cluster map has no shard ", req->shard, " (it has ",
                                            view->shard_list.size(), ")"));
  }
  const cluster::ShardInfo& s = *found;
  const std::string prefix = absl::StrCat("shard ", s.id, ": ");
  if (!req->resolved) {
    if (absl::Status st = Resolve(s, req); !st.ok()) return st;
  }
  const std::string& from = req->from;
  const std::string& to = req->to;
  // Done: `to` in the role it took, and (a backup's) `from` out of the group. The primary's
  // role leaves `from` in the group when `to` was one of its backups (a swap: it rejoins).
  if (req->primary ? s.primary == to : !InGroup(s, from) && Contains(s.backups, to)) {
    return MoveStep{MoveStep::State::kDone,
                    absl::StrCat(prefix, to, " holds the ", req->primary ? "primary" : "backup",
                                 " role ", from, " held (epoch ", s.epoch, ")")};
  }
  if (req->primary && s.primary.empty()) {
    return MoveStep{MoveStep::State::kHandingOver,
                    absl::StrCat(prefix, "waiting for ", to, " to take over")};
  }
  if (!InGroup(s, from)) {
    return absl::FailedPreconditionError(
        absl::StrCat(prefix, "node ", from, " holds no role in it (primary ",
                     s.primary.empty() ? "(none)" : s.primary, ")"));
  }
  if (req->primary && s.primary == from && s.handover_to == to) {
    // Asked: the primary decides. It calls the hand-over off itself when `to` is not a live
    // backup (a lease lapsed), so the move refuses only once the map says so; refusing here
    // would race the primary's resignation (found by cluster_fault_test's
    // EtcdPausedMidHandOver: the move reported itself undone, and then `to` took over).
    return MoveStep{MoveStep::State::kHandingOver,
                    absl::StrCat(prefix, "waiting for ", from,
                                 " to let its writes in flight commit and resign")};
  }
  if (!view->IsLive(to)) {
    return absl::FailedPreconditionError(
        absl::StrCat(prefix, "node ", to, " is not registered (not running, or its lease lapsed)"));
  }
  cluster::ShardInfo next = s;
  if (!InGroup(s, to)) {
    next.joining.push_back(to);
    return Write(map, next, MoveStep::State::kJoining,
                 absl::StrCat(prefix, to, " joins; the primary sends it the shard's live values"));
  }
  if (Contains(s.joining, to)) {
    return MoveStep{MoveStep::State::kJoining,
                    absl::StrCat(prefix, "waiting for ", to, " to catch up")};
  }
  // `to` is a backup: hand the role over.
  next.epoch = s.epoch + 1;
  if (!req->primary) {
    Erase(&next.backups, from);
    Erase(&next.joining, from);
    return Write(map, next, MoveStep::State::kDone,
                 absl::StrCat(prefix, from, " leaves; its backup role is ", to, "'s"));
  }
  if (s.primary != from) {  // a failover meanwhile: the role to move is not from's any more
    return absl::FailedPreconditionError(absl::StrCat(prefix, "the primary changed meanwhile (now ",
                                                      s.primary, "): ", from,
                                                      " no longer holds the role to move"));
  }
  // The primary hands over itself (ClusterNode::HandOver): it stops taking writes (the SDK
  // retries them), lets those in flight commit, then resigns with `to` first in line, and
  // leaves the group (a move) or rejoins it (a swap).
  next = s;
  next.handover_to = to;
  return Write(map, next, MoveStep::State::kHandingOver,
               absl::StrCat(prefix, "asks ", from, " to hand the primary's role over to ", to));
}

absl::StatusOr<MoveRequest> NextDrainMove(const cluster::ClusterView& view,
                                          const std::string& node) {
  std::map<std::string, int> roles;  // of every live node
  for (const auto& [name, info] : view.nodes) roles[name] = 0;
  for (const cluster::ShardInfo& s : view.shard_list) {
    for (const std::string& n : s.Replicas()) {
      if (roles.count(n) > 0) ++roles[n];
    }
  }
  for (const cluster::ShardInfo& s : view.shard_list) {
    if (!InGroup(s, node)) continue;
    std::string best;
    for (const auto& [name, count] : roles) {
      if (name == node || InGroup(s, name)) continue;
      if (best.empty() || count < roles[best]) best = name;
    }
    if (best.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("shard ", s.id, ": no live node outside its group can take ", node,
                       "'s role; start another node first"));
    }
    MoveRequest req;
    req.shard = s.id;
    req.from = node;
    req.to = best;
    return req;
  }
  return absl::NotFoundError(absl::StrCat("node ", node, " holds no role"));
}

absl::StatusOr<std::string> UndoMove(cluster::ClusterMap* map, const MoveRequest& req) {
  absl::StatusOr<cluster::ClusterView> view = map->Read();
  if (!view.ok()) return view.status();
  const cluster::ShardInfo* s = view->ShardById(req.shard);
  if (s == nullptr || req.to.empty()) return std::string();
  cluster::ShardInfo next = *s;
  std::string what;
  if (s->handover_to == req.to) {
    next.handover_to.clear();
    what = absl::StrCat("the hand-over to ", req.to, " called off");
  }
  const size_t members = (s->primary.empty() ? 0 : 1) + s->backups.size() + s->joining.size();
  if (s->primary != req.to && members > static_cast<size_t>(view->replicas) &&
      (Contains(s->backups, req.to) || Contains(s->joining, req.to))) {
    if (Contains(s->backups, req.to)) next.epoch = s->epoch + 1;
    Erase(&next.backups, req.to);
    Erase(&next.joining, req.to);
    absl::StrAppend(&what, what.empty() ? "" : "; ", req.to, " left the group again");
  }
  if (what.empty()) return what;
  absl::StatusOr<int64_t> rev = map->UpdateShard(next, {});
  if (!rev.ok()) return rev.status();
  return absl::StrCat("shard ", s->id, ": ", what, " (epoch ", next.epoch, ")");
}

absl::Status RunMove(cluster::ClusterMap* map, MoveRequest req, absl::Duration timeout,
                     absl::Duration poll, const std::function<void(const std::string&)>& say,
                     const MoveProgress& progress) {
  ProgressLines lines(say);
  absl::Time progress_said = lines.start();
  auto tell = [&lines](const std::string& what) { lines.Tell(what); };
  absl::Status failed;
  while (true) {
    absl::StatusOr<MoveStep> step = StepMove(map, &req);
    if (step.ok()) {
      tell(step->said);
      if (step->state == MoveStep::State::kDone) return absl::OkStatus();
      if (step->state == MoveStep::State::kJoining && progress &&
          absl::Now() - progress_said >= absl::Seconds(1)) {
        progress_said = absl::Now();
        const std::string how_far = progress(req.shard, req.to);
        if (!how_far.empty()) {
          tell(absl::StrCat("shard ", req.shard, ": ", req.to, " catching up: ", how_far));
        }
      }
    } else if (step.status().code() != absl::StatusCode::kUnavailable) {
      failed = step.status();  // a refusal
      break;
    } else {
      // No primary yet, or the map unreachable (etcd restarting): either may pass; the
      // timeout bounds the wait.
      tell(std::string(step.status().message()));
    }
    if (absl::Now() - lines.start() > timeout) {
      failed = absl::DeadlineExceededError(absl::StrCat(
          "shard ", req.shard, ": the move of ", req.from.empty() ? "the primary" : req.from,
          "'s role to ", req.to, " did not end within ", absl::FormatDuration(timeout)));
      break;
    }
    absl::SleepFor(poll);
  }
  if (req.resolved) {
    absl::StatusOr<std::string> undone = UndoMove(map, req);
    if (!undone.ok()) {
      tell(absl::StrCat("could not undo what the move left: ", undone.status().message(),
                        " (kvclient cluster status)"));
    } else if (!undone->empty()) {
      tell(*undone);
    }
  }
  return failed;
}

absl::Status RunDrain(cluster::ClusterMap* map, const std::string& node, absl::Duration timeout,
                      absl::Duration poll, const std::function<void(const std::string&)>& say,
                      const MoveProgress& progress) {
  for (int moves = 0;; ++moves) {
    absl::StatusOr<cluster::ClusterView> view = map->Read();
    if (!view.ok()) return view.status();
    absl::StatusOr<MoveRequest> next = NextDrainMove(*view, node);
    if (next.status().code() == absl::StatusCode::kNotFound) {
      say(absl::StrCat("node ", node, " holds no role: drained (", moves, " moves)"));
      return absl::OkStatus();
    }
    if (!next.ok()) return next.status();
    say(absl::StrCat("shard ", next->shard, ": moving ", node, "'s role to ", next->to));
    if (absl::Status st = RunMove(map, *next, timeout, poll, say, progress); !st.ok()) return st;
  }
}

}  // namespace unloadkv
