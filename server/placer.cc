#include "server/placer.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "transport/base/logging.h"
#include "transport/placement/rebalance.h"

namespace unloadkv::server {
namespace {

// Decisions in a row a shard stays over-replicated before the placer trims it: a move under
// way (its destination joining) is not mistaken for a leftover.
constexpr int kTrimAfter = 3;
// The longest back-off after failed changes: interval times this.
constexpr int kMaxBackoffShift = 3;
// Between two steps of a change: a step that asks again what a node just called off (a
// hand-over while a backup fails) would otherwise ask at every map change, with no time
// passing in between (found by cluster_sim --placement, seed 11: a livelock).
constexpr absl::Duration kStepPause = absl::Milliseconds(50);

size_t Members(const cluster::ShardInfo& s) {
  return (s.primary.empty() ? 0 : 1) + s.backups.size() + s.joining.size();
}

// Every shard served by a live primary with its whole group, nothing planned or joining.
bool Settled(const cluster::ClusterView& view) {
  for (const cluster::ShardInfo& s : view.shard_list) {
    if (view.StateOf(s) != cluster::ShardState::kServing || !s.joining.empty() ||
        !s.handover_to.empty() || !s.split_at.empty() || s.merge_with != 0) {
      return false;
    }
  }
  return true;
}

}  // namespace

Placer::Placer(cluster::ClusterMap* map, Options options, const Clock* clock)
    : map_(map), options_(std::move(options)), clock_(clock) {}

bool Placer::Lead(const cluster::ClusterView& view, cluster::LeaseId lease) {
  bool leading = view.placer == options_.node;
  if (!leading && view.placer.empty() && clock_->Now() >= next_campaign_) {
    // Nobody holds the role (the first placer, or its node's lease ended): one try a second.
    next_campaign_ = clock_->Now() + absl::Seconds(1);
    absl::StatusOr<bool> won = map_->Campaign(options_.node, lease);
    leading = won.ok() && *won;
    if (leading) Log(LogLevel::kInfo, absl::StrCat("placer: ", options_.node, " is the placer"));
  }
  SetLeading(leading);
  return leading;
}

void Placer::SetLeading(bool leading) {
  if (leading != leading_ && options_.metrics != nullptr) options_.metrics->SetPlacer(leading);
  leading_ = leading;
}

void Placer::Tick(const cluster::ClusterView& view, cluster::LeaseId lease) {
  if (!view.policy.auto_rebalance && current_) {
    End(false, "automatic placement was turned off");  // undone: nobody would finish it
  }
  if (!view.policy.auto_rebalance) SetLeading(false);
  if (!view.policy.auto_rebalance || !Lead(view, lease)) {
    // Another node decides: what this one started is the map's now (a trim by the next placer
    // takes back a move left half done).
    current_.reset();
    over_replicated_.clear();
    return;
  }
  if (current_) return Step();
  if (clock_->Now() < next_decision_) return;
  next_decision_ = clock_->Now() + options_.interval;
  current_ = Decide(view);
  if (current_) Step();
}

std::optional<Placer::Change> Placer::Decide(const cluster::ClusterView& view) {
  if (std::optional<Change> trim = Trim(view)) return trim;
  if (!Settled(view)) return std::nullopt;
  if (std::optional<Change> split = SplitLarge(view)) return split;
  std::vector<MoveRequest> moves = PlanRebalance(view);
  if (moves.empty()) return std::nullopt;
  Change c{"move", moves.front(), std::nullopt, clock_->Now()};
  Log(LogLevel::kInfo,
      absl::StrCat("placer: moving shard ", c.move->shard, "'s ",
                   c.move->from.empty() ? "primary" : c.move->from, " role to ", c.move->to));
  return c;
}

std::optional<Placer::Change> Placer::Trim(const cluster::ClusterView& view) {
  std::map<uint32_t, int> seen;
  std::optional<Change> out;
  for (const cluster::ShardInfo& s : view.shard_list) {
    // A joiner may be a transfer under way (an operator's move): its group is trimmed only
    // once it joined.
    if (Members(s) <= static_cast<size_t>(view.replicas) || s.primary.empty() ||
        !s.joining.empty() || s.backups.empty()) {
      continue;
    }
    const int rounds = seen[s.id] = over_replicated_[s.id] + 1;
    if (rounds < kTrimAfter || out) continue;
    MoveRequest m;  // the newest backup leaves
    m.shard = s.id;
    m.to = s.backups.back();
    out = Change{"trim", m, std::nullopt, clock_->Now()};
  }
  over_replicated_ = std::move(seen);
  return out;
}

std::optional<Placer::Change> Placer::SplitLarge(const cluster::ClusterView& view) const {
  const uint64_t limit = view.policy.max_shard_bytes;
  if (limit == 0 || view.shards >= cluster::kMaxShards) return std::nullopt;
  for (const cluster::ShardInfo& s : view.shard_list) {
    auto it = view.loads.find(s.id);
    if (it == view.loads.end()) continue;
    const cluster::ShardLoad& load = it->second;
    // A measurement of this shard as it is: by its primary, at its epoch, of its range.
    if (load.node != s.primary || load.epoch != s.epoch || load.live_bytes <= limit ||
        load.median_key.empty() || !s.Contains(load.median_key) || load.median_key == s.start) {
      continue;
    }
    SplitRequest r;
    r.shard = s.id;
    r.at = load.median_key;
    Log(LogLevel::kInfo, absl::StrCat("placer: splitting shard ", s.id, " (", load.live_bytes,
                                      " live bytes, over ", limit, ") at its median key"));
    return Change{"split", std::nullopt, r, clock_->Now()};
  }
  return std::nullopt;
}

void Placer::Step() {
  if (clock_->Now() < next_step_) return;
  next_step_ = clock_->Now() + kStepPause;
  Change& c = *current_;
  if (c.kind == "trim") {
    absl::StatusOr<std::string> undone = UndoMove(map_, *c.move);
    if (!undone.ok()) return End(false, undone.status().ToString());
    return End(true, undone->empty() ? "nothing left to trim" : *undone);
  }
  if (clock_->Now() - c.began > options_.timeout) {
    return End(false, absl::StrCat("not done within ", absl::FormatDuration(options_.timeout)));
  }
  // As the operator's commands do, a shard without a primary and an unreachable map are
  // waited for (until the timeout); any other refusal ends the change.
  auto refused = [](const absl::Status& st) { return st.code() != absl::StatusCode::kUnavailable; };
  if (c.move) {
    absl::StatusOr<MoveStep> step = StepMove(map_, &*c.move);
    if (!step.ok()) {
      if (refused(step.status())) End(false, step.status().ToString());
      return;
    }
    if (step->state == MoveStep::State::kDone) End(true, step->said);
  } else {
    absl::StatusOr<SplitStep> step = StepSplit(map_, &*c.split);
    if (!step.ok()) {
      if (refused(step.status())) End(false, step.status().ToString());
      return;
    }
    if (step->done) End(true, step->said);
  }
}

void Placer::End(bool ok, const std::string& why) {
  Change c = *std::move(current_);
  current_.reset();
  std::string undone;
  if (!ok && c.kind != "trim") {
    absl::StatusOr<std::string> u = c.move ? UndoMove(map_, *c.move) : UndoSplit(map_, *c.split);
    undone = u.ok() ? *u : u.status().ToString();
  }
  Log(ok ? LogLevel::kInfo : LogLevel::kWarning,
      absl::StrCat("placer: ", c.kind, " of shard ", c.move ? c.move->shard : c.split->shard,
                   ok ? " done: " : " failed: ", why, undone.empty() ? "" : "; ", undone));
  if (options_.metrics != nullptr) options_.metrics->AddPlacementChange(c.kind, ok);
  ok ? ++done_ : ++failed_;
  failures_in_a_row_ = ok ? 0 : failures_in_a_row_ + 1;
  const int shift = std::min(failures_in_a_row_, kMaxBackoffShift);
  next_decision_ = clock_->Now() + options_.interval * (1 << shift);
}

}  // namespace unloadkv::server
