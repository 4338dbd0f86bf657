// Automatic placement (docs/cluster.md, "Automatic placement"): with the cluster's policy on
// (`kvclient cluster init --auto_rebalance` or `cluster config`), one node at a time, the
// placer, changes the placement the way an operator would with `cluster split` and `cluster
// move`, through ClusterMap only:
//   * trim: a shard whose group stayed larger than wanted (a move whose placer died) loses
//     its extra replica;
//   * split: a shard whose primary measured more live value bytes than max_shard_bytes is
//     split at its median key;
//   * spread: the first move of a rebalance pass (PlanRebalance), so that no node holds more
//     than its share of roles or primaries and a node added to the cluster takes its share.
// The role is held under the node's lease (ClusterMap::Campaign): it ends with the node.
// One change at a time; a decision waits until every shard is settled (a live primary, a
// full group, nothing planned); `interval` between decisions, doubled after each change that
// failed (at most 8x); a change not done within `timeout` is undone (UndoMove, UndoSplit), as
// is one under way when the policy is turned off.
//
// Thread-safety: Tick from one thread at a time (the node's control thread).
#ifndef UNLOADKV_SERVER_PLACER_H_
#define UNLOADKV_SERVER_PLACER_H_

#include <map>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "server/cluster_metrics.h"
#include "transport/base/clock.h"
#include "transport/cluster/cluster_map.h"
#include "transport/placement/shard_move.h"
#include "transport/placement/shard_split.h"

namespace unloadkv::server {

class Placer {
 public:
  struct Options {
    std::string node;                             // this node's name
    absl::Duration interval = absl::Seconds(10);  // between two decisions
    absl::Duration timeout = absl::Minutes(5);    // a change not done by then is undone
    ClusterMetrics* metrics = nullptr;            // nullable; outlives the placer
  };
  // `map` and `clock` must outlive the placer.
  Placer(cluster::ClusterMap* map, Options options, const Clock* clock);

  // One step with the view the control thread just read (and reconciled) and the node's
  // lease: campaigns for the role when nobody holds it, then steps the change under way or,
  // when it is time, decides the next one. Map calls block (etcd: 2 s timeout).
  void Tick(const cluster::ClusterView& view, cluster::LeaseId lease);

  bool leading() const { return leading_; }
  // Changes ended since the start: done and failed (undone).
  int done() const { return done_; }
  int failed() const { return failed_; }

 private:
  struct Change {
    std::string kind;  // "move", "split", "trim"
    std::optional<MoveRequest> move;
    std::optional<SplitRequest> split;
    absl::Time began;
  };
  // Whether this node holds the placer's role, campaigning when nobody does.
  bool Lead(const cluster::ClusterView& view, cluster::LeaseId lease);
  void SetLeading(bool leading);
  // The next change for `view`, if any.
  std::optional<Change> Decide(const cluster::ClusterView& view);
  std::optional<Change> Trim(const cluster::ClusterView& view);
  std::optional<Change> SplitLarge(const cluster::ClusterView& view) const;
  void Step();
  void End(bool ok, const std::string& why);

  cluster::ClusterMap* const map_;
  const Options options_;
  const Clock* const clock_;
  bool leading_ = false;
  absl::Time next_campaign_ = absl::InfinitePast();
  absl::Time next_decision_ = absl::InfinitePast();
  absl::Time next_step_ = absl::InfinitePast();
  int failures_in_a_row_ = 0;
  int done_ = 0, failed_ = 0;
  std::optional<Change> current_;
  // Shards seen with more replicas than wanted, by id: decisions in a row.
  std::map<uint32_t, int> over_replicated_;
};

}  // namespace unloadkv::server

#endif  // UNLOADKV_SERVER_PLACER_H_
