// ClusterNode: merges (docs/cluster.md, "Merges"). The primary of two adjacent shards, asked to
// merge them, holds the writes of the right one, waits for those in flight, and writes its keys
// into the left one as ordinary replicated writes (the values copied from the right shard's
// arena on this node), a window at a time. Once every copy committed, one map transaction
// extends the left shard over both ranges and deletes the right one's record; this node drops
// its replica, the right shard's backups drop theirs as orphans. Until then the right shard
// serves its reads, and the copies in the left one are outside its range: a merge given up
// leaves them to the purge.
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/cluster_node.h"
#include "transport/base/logging.h"

namespace unloadkv::server {
namespace {

// Copy writes in flight at once.
constexpr size_t kMergeWindow = 1024;

}  // namespace

struct ClusterNode::MergeCopy {
  std::mutex mu;
  size_t in_flight = 0;  // guarded by mu
  absl::Status failed;   // guarded by mu: the first copy write that failed
};

void ClusterNode::GiveUpMerge(const cluster::ShardInfo& s, const std::string& why) {
  auto it = merges_.find(s.id);
  if (it != merges_.end()) {
    if (it->second.from != nullptr) it->second.from->ReleaseWrites();
    merges_.erase(it);
  }
  cluster::ShardInfo next = s;
  next.merge_with = 0;
  Update(next, {}, absl::StrCat("give up the merge: ", why));
}

bool ClusterNode::CopyForMerge(const cluster::ShardInfo& s,
                               const std::shared_ptr<ShardReplica>& local,
                               const std::shared_ptr<ShardReplica>& right, PendingMerge* pending) {
  PendingMerge& p = *pending;
  size_t in_flight;
  absl::Status failed;
  {
    std::lock_guard<std::mutex> l(p.copy->mu);
    in_flight = p.copy->in_flight;
    failed = p.copy->failed;
  }
  if (!failed.ok()) {
    GiveUpMerge(s, absl::StrCat("a copy write failed: ", failed.message()));
    return false;
  }
  for (; p.next < p.keys.size() && in_flight < kMergeWindow; ++p.next, ++in_flight) {
    const KvStore::Mutation& m = p.keys[p.next];
    absl::StatusOr<KvStore::Mutation> copy = local->store().PrepareCopy(
        m.key, absl::string_view(right->store().arena() + m.slot.offset, m.size), m.version);
    if (!copy.ok()) {
      GiveUpMerge(s, absl::StrCat("shard ", s.id, " cannot take key ", p.next, " of ",
                                  p.keys.size(), ": ", copy.status().message()));
      return false;
    }
    {
      std::lock_guard<std::mutex> l(p.copy->mu);
      ++p.copy->in_flight;
    }
    local->Submit(*std::move(copy),
                  [copy = p.copy, wake = wake_](absl::StatusOr<uint64_t> version) {
                    {
                      std::lock_guard<std::mutex> l(copy->mu);
                      --copy->in_flight;
                      if (!version.ok() && copy->failed.ok()) copy->failed = version.status();
                    }
                    wake->Signal();
                  });
  }
  return p.next == p.keys.size() && in_flight == 0;
}

bool ClusterNode::Merge(const cluster::ClusterView& view, const cluster::ShardInfo& s,
                        const std::shared_ptr<ShardReplica>& local) {
  auto it = merges_.find(s.id);
  if (s.merge_with == 0 || (it != merges_.end() && it->second.right != s.merge_with)) {
    if (it != merges_.end()) {  // called off (or another asked): the right shard writes again
      if (it->second.from != nullptr) it->second.from->ReleaseWrites();
      merges_.erase(it);
    }
    if (s.merge_with == 0) return false;
    it = merges_.end();
  }
  const cluster::ShardInfo* r = view.ShardById(s.merge_with);
  std::shared_ptr<ShardReplica> right = shards_->Get(s.merge_with);
  std::string why;
  if (r == nullptr || s.end.empty() || r->start != s.end) {
    why = absl::StrCat("shard ", s.merge_with, " does not start where shard ", s.id, " ends");
  } else if (r->primary != name() || right == nullptr ||
             right->role() != ShardReplica::Role::kPrimary) {
    why = absl::StrCat("this node is not shard ", r->id, "'s primary");
  } else if (!s.split_at.empty() || r->split_id != 0 || !r->handover_to.empty()) {
    why = "a split or a hand-over is asked of one of the two";
  }
  if (!why.empty()) {
    GiveUpMerge(s, why);
    return true;
  }
  if (born_.count(r->id) > 0) return true;  // just split off: its backups come first
  if (it == merges_.end()) {
    PendingMerge p;
    p.right = r->id;
    p.from = right;
    p.copy = std::make_shared<MergeCopy>();
    merges_[s.id] = std::move(p);
    right->SetProgressHook([wake = wake_] { wake->Signal(); });  // when it drained
    right->HoldWrites(absl::StrCat("shard ", r->id, " is merging into shard ", s.id));
    Log(LogLevel::kInfo, absl::StrCat("cluster: shard ", s.id, ": merging shard ", r->id,
                                      " into it; its writes are held"));
    return true;
  }
  PendingMerge& p = it->second;
  if (!p.drained) {
    if (!right->Drained()) return true;
    p.keys = right->store().Snapshot();
    p.drained = true;
  }
  if (!CopyForMerge(s, local, right, &p)) return true;  // not yet, or given up
  cluster::ShardInfo merged = s;
  merged.end = r->end;
  merged.epoch = s.epoch + 1;
  merged.merge_with = 0;
  absl::StatusOr<int64_t> rev = map_->MergeShards(merged, r->id, view);
  if (!rev.ok()) {
    if (rev.status().code() != absl::StatusCode::kFailedPrecondition) NoteMapError();
    Log(LogLevel::kInfo,
        absl::StrCat("cluster: shard ", s.id, ": merge not applied: ", rev.status().message()));
    Signal();
    return true;  // the next round tries again: the right shard's keys are still held
  }
  Log(LogLevel::kInfo, absl::StrCat("cluster: shard ", s.id, ": merged shard ", r->id, " (",
                                    p.keys.size(), " keys) into it; epoch ", merged.epoch));
  local->SetRange(merged.start, merged.end);
  local->AdvanceEpoch(merged.epoch);
  const uint32_t gone = r->id;
  merges_.erase(it);
  shards_->Remove(gone, "merged into another shard");
  Signal();
  return true;
}

}  // namespace unloadkv::server
