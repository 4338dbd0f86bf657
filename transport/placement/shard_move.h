// Moving a shard's role (its primary's or a backup's) to another node, and draining a node,
// through the cluster map alone (docs/cluster.md, "Moves and drains"). The nodes do the work
// as they do for any change of the map: a node named joining is attached by the primary and
// sent the shard's live values as engine writes (or caught up by delta from the primary's
// log), then named a backup; a primary that resigns is replaced by the first live backup in
// line, which raises its fence before the map names it (no two primaries at one epoch).
//
// A move of `from`'s role to `to`:
//   1. `to` joins the group (one more replica than wanted while it catches up), unless it is
//      a backup already (the primary's role may go to one: a swap);
//   2. once `to` is a backup: a backup role ends with `from` leaving the group (epoch + 1);
//      the primary role with the shard's `handover_to` set: the primary stops taking writes,
//      lets those in flight commit and resigns, `to` first in line (epoch + 1); it leaves the
//      group when `to` joined for the move, and rejoins as a backup in a swap;
//   3. the move is done when `to` holds the role (and a backup's `from` holds none).
// Each step reads the map and makes at most one change, compared against the revision it
// read: a node changing the map meanwhile fails the write, and the next step reads again.
// Faults meanwhile (the primary dying mid-join) are the nodes' to mend; the steps follow.
//
// Thread-safety: one step at a time per map handle.
#ifndef UNLOADKV_TRANSPORT_PLACEMENT_SHARD_MOVE_H_
#define UNLOADKV_TRANSPORT_PLACEMENT_SHARD_MOVE_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "transport/cluster/cluster_map.h"

namespace unloadkv {

struct MoveRequest {
  uint32_t shard = 0;
  std::string to;    // a live node outside the group (or a backup, to take the primary role)
  std::string from;  // the replica whose role moves; "" = the shard's primary (filled in)
  // Filled in by the first step: the role moved is the primary's.
  bool primary = false;
  bool resolved = false;
};

struct MoveStep {
  enum class State { kJoining, kHandingOver, kDone };
  State state = State::kJoining;
  std::string said;  // what was done or is awaited, for the operator
};

// One step of the move (see above). Refused, changing nothing: NOT_FOUND for an unknown
// shard; INVALID_ARGUMENT when `to` is `from`; FAILED_PRECONDITION when `to` is not
// registered, already holds the role (or another that cannot become it), or `from` holds no
// role; UNAVAILABLE while the shard has no primary to move from. A write that lost a race
// with a node is not an error: the step says so and the next one reads again.
absl::StatusOr<MoveStep> StepMove(cluster::ClusterMap* map, MoveRequest* req);

// The next move that takes a role off `node` (docs/cluster.md): its first shard by id, to the
// live node outside that shard's group holding the fewest roles (then by name). NOT_FOUND
// when `node` holds no role (the drain is done); FAILED_PRECONDITION when no live node can
// take the role (the message names the shard).
absl::StatusOr<MoveRequest> NextDrainMove(const cluster::ClusterView& view,
                                          const std::string& node);

// Takes back what an unfinished move left (after a refusal or a timeout): `req.to` leaves the
// group when the group holds more replicas than wanted (it was the move's extra one), and a
// hand-over to it is called off. Returns what it did ("" when nothing was left to undo).
absl::StatusOr<std::string> UndoMove(cluster::ClusterMap* map, const MoveRequest& req);

// Steps `req` until done, each new line of progress to `say` (prefixed with the seconds since
// it began), a step every `poll`; DEADLINE_EXCEEDED after `timeout`, or the first refusal (a
// shard without a primary and an unreachable map are waited for, within `timeout`); either way
// what the move left is undone (UndoMove, said). Blocks: for a command line.
// While the destination catches up, `progress` (optional) is asked at most once a second how
// far it got (`kvclient`: the transfer's bytes and ETA from the primary's /metrics); a non-empty
// answer is said.
using MoveProgress = std::function<std::string(uint32_t shard, const std::string& to)>;
absl::Status RunMove(cluster::ClusterMap* map, MoveRequest req, absl::Duration timeout,
                     absl::Duration poll, const std::function<void(const std::string&)>& say,
                     const MoveProgress& progress = nullptr);

// Moves every role off `node`, one move at a time (NextDrainMove), each within `timeout`.
absl::Status RunDrain(cluster::ClusterMap* map, const std::string& node, absl::Duration timeout,
                      absl::Duration poll, const std::function<void(const std::string&)>& say,
                      const MoveProgress& progress = nullptr);

}  // namespace unloadkv

#endif  // UNLOADKV_TRANSPORT_PLACEMENT_SHARD_MOVE_H_
