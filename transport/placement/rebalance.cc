#include "transport/placement/rebalance.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"

namespace unloadkv {
namespace {

bool Contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// The plan's picture of the cluster, changed as moves are planned.
struct Placement {
  std::vector<cluster::ShardInfo> shards;  // the ones a pass may touch
  std::map<std::string, int> roles;        // of every live node
  std::map<std::string, int> primaries;

  // The live node outside `s`'s group with the fewest roles (then by name); "" when none.
  std::string Emptiest(const cluster::ShardInfo& s) const {
    std::string best;
    for (const auto& [name, count] : roles) {
      if (s.HasReplica(name)) continue;
      if (best.empty() || count < roles.at(best)) best = name;
    }
    return best;
  }
};

// Step 1: one role off a node above its share, to the emptiest node; false when none moves.
bool PlanOneRole(Placement* p, int share, std::vector<MoveRequest>* out) {
  for (const auto& [node, count] : p->roles) {
    if (count <= share) continue;
    // A backup's role first (no hand-over), then the primary's.
    for (bool primary : {false, true}) {
      for (cluster::ShardInfo& s : p->shards) {
        if (primary ? s.primary != node : !Contains(s.backups, node)) continue;
        const std::string to = p->Emptiest(s);
        if (to.empty() || p->roles[to] + 1 >= count) continue;  // it would not even out
        MoveRequest m;
        m.shard = s.id;
        m.to = to;
        m.from = primary ? "" : node;
        out->push_back(m);
        if (primary) {
          s.primary = to;
          --p->primaries[node];
          ++p->primaries[to];
        } else {
          std::replace(s.backups.begin(), s.backups.end(), node, to);
        }
        --p->roles[node];
        ++p->roles[to];
        return true;
      }
    }
  }
  return false;
}

// Step 2: one primary role off a node above its share, to a backup of that shard below it.
bool PlanOnePrimary(Placement* p, int share, std::vector<MoveRequest>* out) {
  for (const auto& [node, count] : p->primaries) {
    if (count <= share) continue;
    for (cluster::ShardInfo& s : p->shards) {
      if (s.primary != node) continue;
      std::string to;
      for (const std::string& b : s.backups) {
        if (p->roles.count(b) == 0) continue;  // not live
        if (to.empty() || p->primaries[b] < p->primaries[to]) to = b;
      }
      if (to.empty() || p->primaries[to] + 1 >= count) continue;
      MoveRequest m;
      m.shard = s.id;
      m.to = to;
      out->push_back(m);
      std::replace(s.backups.begin(), s.backups.end(), to, node);
      s.primary = to;
      --p->primaries[node];
      ++p->primaries[to];
      return true;
    }
  }
  return false;
}

}  // namespace

std::vector<MoveRequest> PlanRebalance(const cluster::ClusterView& view) {
  Placement p;
  for (const auto& [name, info] : view.nodes) {
    p.roles[name] = 0;
    p.primaries[name] = 0;
  }
  if (p.roles.empty()) return {};
  int total = 0;
  for (const cluster::ShardInfo& s : view.shard_list) {
    for (const std::string& n : s.Replicas()) {
      if (p.roles.count(n) > 0) ++p.roles[n];
      ++total;
    }
    if (p.primaries.count(s.primary) > 0) ++p.primaries[s.primary];
    // A shard in flux (no primary, or a node joining) is left to the nodes this pass.
    if (!s.primary.empty() && s.joining.empty() && s.handover_to.empty()) p.shards.push_back(s);
  }
  const int nodes = static_cast<int>(p.roles.size());
  // Floor shares: a node above one gives a role only to a node holding two fewer (the moves'
  // guard), so the counts end within one of each other.
  const int role_share = total / nodes;
  const int primary_share = static_cast<int>(view.shard_list.size()) / nodes;
  std::vector<MoveRequest> out;
  // Bounded: each planned move lowers a count above its share.
  for (int i = 0; i < total + 1 && PlanOneRole(&p, role_share, &out); ++i) {
  }
  for (int i = 0; i < total + 1 && PlanOnePrimary(&p, primary_share, &out); ++i) {
  }
  return out;
}

absl::Status RunRebalance(cluster::ClusterMap* map, absl::Duration timeout, absl::Duration poll,
                          const std::function<void(const std::string&)>& say,
                          const MoveProgress& progress) {
  absl::StatusOr<cluster::ClusterView> view = map->Read();
  if (!view.ok()) return view.status();
  const std::vector<MoveRequest> plan = PlanRebalance(*view);
  if (plan.empty()) {
    say(absl::StrCat("the roles are spread already (", view->nodes.size(), " live nodes, ",
                     view->shard_list.size(), " shards)"));
    return absl::OkStatus();
  }
  say(absl::StrCat(plan.size(), " moves planned"));
  for (size_t i = 0; i < plan.size(); ++i) {
    const MoveRequest& m = plan[i];
    say(absl::StrCat("move ", i + 1, "/", plan.size(), ": shard ", m.shard, ", ",
                     m.from.empty() ? "the primary's" : m.from + "'s", " role to ", m.to));
    if (absl::Status st = RunMove(map, m, timeout, poll, say, progress); !st.ok()) return st;
  }
  say(absl::StrCat("rebalanced: ", plan.size(), " moves"));
  return absl::OkStatus();
}

}  // namespace unloadkv
