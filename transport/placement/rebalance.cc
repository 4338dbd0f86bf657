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

// Step 2: one primary role off a node above its share. A primary role moves only by a
// hand-over to a backup of its shard, so the role may travel along a chain: u hands shard s1 to
// its backup v, v hands s2 to its backup w, ... so that only the chain's ends change count. The
// shortest chain from a node above its share to one primary of two fewer is planned (breadth
// first over the hand-overs); its moves are made from the far end back, so no node on the way
// ever holds more than it did. False when no such chain exists.
bool PlanOnePrimary(Placement* p, int share, std::vector<MoveRequest>* out) {
  for (const auto& [node, count] : p->primaries) {
    if (count <= share) continue;
    // via[n]: the shard whose hand-over reaches n on the shortest chain from `node`.
    std::map<std::string, cluster::ShardInfo*> via;
    std::vector<std::string> frontier = {node};
    std::string end;
    via[node] = nullptr;
    for (size_t i = 0; i < frontier.size() && end.empty(); ++i) {
      const std::string from = frontier[i];
      for (cluster::ShardInfo& s : p->shards) {
        if (s.primary != from) continue;
        for (const std::string& b : s.backups) {
          if (p->roles.count(b) == 0 || via.count(b) > 0) continue;  // not live, or reached
          via[b] = &s;
          frontier.push_back(b);
          if (p->primaries[b] + 1 < count) end = b;
          if (!end.empty()) break;
        }
        if (!end.empty()) break;
      }
    }
    if (end.empty()) continue;
    for (std::string to = end; to != node;) {
      cluster::ShardInfo* s = via[to];
      const std::string from = s->primary;
      MoveRequest m;
      m.shard = s->id;
      m.to = to;
      out->push_back(m);
      std::replace(s->backups.begin(), s->backups.end(), to, from);
      s->primary = to;
      --p->primaries[from];
      ++p->primaries[to];
      to = from;
    }
    return true;
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
