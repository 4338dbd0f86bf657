// ClusterNode: splits (docs/cluster.md, "Splits"). The primary of a shard asked to split puts
// a SPLIT record into its replication stream; every replica that applies it copies the keys
// from the split key on into its replica of the new shard, at the same seq, so that the copies
// are equal. Once the record committed, the primary makes its own copy and splits the map in
// one transaction; the new shard's backups are those that voted on the record, and the new
// primary links them again without sending anything (they hold its state).
#include <algorithm>
#include <mutex>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/cluster_node.h"
#include "transport/base/logging.h"
#include "transport/cluster/map_records.h"

namespace unloadkv::server {
namespace {

// How long a shard just split off holds its writes for its backups to be linked again.
constexpr absl::Duration kBornLinkWait = absl::Seconds(4);
// How long a replica whose shard is not in the map stays before it is removed.
constexpr int kOrphanLeaseTtls = 2;

// The two shards the split asked of `s` makes (ranges and ids only).
void Halves(const cluster::ShardInfo& s, cluster::ShardInfo* left, cluster::ShardInfo* right) {
  *left = s;
  left->end = s.split_at;
  left->split_at.clear();
  left->split_id = 0;
  *right = cluster::ShardInfo();
  right->id = s.split_id;
  right->start = s.split_at;
  right->end = s.end;
}

bool Has(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

struct ClusterNode::SplitCommit {
  std::mutex mu;
  bool done = false;  // guarded by mu
  absl::StatusOr<uint64_t> seq;
};

void ClusterNode::GiveUpSplit(const cluster::ShardInfo& s,
                              const std::shared_ptr<ShardReplica>& local, const std::string& why) {
  splits_.erase(s.id);
  local->EndSplit();
  cluster::ShardInfo next = s;
  next.split_at.clear();
  next.split_id = 0;
  Update(next, {}, absl::StrCat("give up the split: ", why));
}

bool ClusterNode::Split(const cluster::ClusterView& view, const cluster::ShardInfo& s,
                        const std::shared_ptr<ShardReplica>& local) {
  if (s.split_id == 0) {
    if (splits_.erase(s.id) > 0 || local->splitting()) local->EndSplit();
    return false;
  }
  // What the map asks must be a split of this shard into an id nobody holds.
  cluster::ShardInfo left, right;
  Halves(s, &left, &right);
  if (absl::Status st = cluster::CheckSplit(view, left, right); !st.ok()) {
    GiveUpSplit(s, local, std::string(st.message()));
    return true;
  }
  auto it = splits_.find(s.id);
  if (it != splits_.end() && (it->second.at != s.split_at || it->second.id != s.split_id)) {
    local->EndSplit();  // another split was asked meanwhile: start over
    splits_.erase(it);
    it = splits_.end();
  }
  if (it == splits_.end()) {
    PendingSplit p;
    p.at = s.split_at;
    p.id = s.split_id;
    p.epoch = local->epoch();
    p.commit = std::make_shared<SplitCommit>();
    std::shared_ptr<SplitCommit> commit = p.commit;
    splits_[s.id] = std::move(p);
    Log(LogLevel::kInfo, absl::StrCat("cluster: shard ", s.id, ": splitting at \"",
                                      absl::CHexEscape(s.split_at), "\" into shard ", s.split_id));
    local->BeginSplit(s.split_at, s.split_id, [commit, wake = wake_](absl::StatusOr<uint64_t> seq) {
      {
        std::lock_guard<std::mutex> l(commit->mu);
        commit->done = true;
        commit->seq = std::move(seq);
      }
      wake->Signal();
    });
    return true;
  }
  return FinishSplit(view, s, local, &it->second);
}

bool ClusterNode::FinishSplit(const cluster::ClusterView& view, const cluster::ShardInfo& s,
                              const std::shared_ptr<ShardReplica>& local, PendingSplit* pending) {
  PendingSplit& p = *pending;
  if (p.seq == 0) {
    absl::StatusOr<uint64_t> seq;
    {
      std::lock_guard<std::mutex> l(p.commit->mu);
      if (!p.commit->done) return true;  // its voters have not all applied it yet
      seq = p.commit->seq;
    }
    if (!seq.ok()) {
      Log(LogLevel::kWarning, absl::StrCat("cluster: shard ", s.id, ": the SPLIT record failed (",
                                           seq.status().message(), "); trying again"));
      splits_.erase(s.id);
      local->EndSplit();
      return true;
    }
    p.seq = *seq;
  }
  absl::StatusOr<std::shared_ptr<ShardReplica>> target = shards_->GetOrCreate(s.split_id);
  if (!target.ok()) {
    GiveUpSplit(s, local,
                absl::StrCat("no replica of shard ", s.split_id,
                             " on this node: ", target.status().message()));
    return true;
  }
  if (!p.copied) {
    if (absl::Status st = local->CopyRangeTo(target->get(), s.split_at, s.end, p.seq, p.epoch);
        !st.ok()) {
      shards_->Remove(s.split_id, "split copy failed");
      GiveUpSplit(s, local, absl::StrCat("copying the range: ", st.message()));
      return true;
    }
    p.copied = true;
  }
  // The new shard's backups: the live ones that voted on the record (each made its copy).
  const std::vector<std::string> voters = local->VotersAt(p.seq);
  cluster::ShardInfo left, right;
  Halves(s, &left, &right);
  left.epoch = s.epoch + 1;
  right.epoch = s.epoch + 1;
  right.primary = name();
  right.durable = s.durable;
  for (const std::string& b : s.backups) {
    if (view.IsLive(b) && Has(voters, b)) right.backups.push_back(b);
  }
  absl::StatusOr<int64_t> rev = map_->SplitShard(left, right, view);
  if (!rev.ok()) {
    if (rev.status().code() != absl::StatusCode::kFailedPrecondition) NoteMapError();
    Log(LogLevel::kInfo,
        absl::StrCat("cluster: shard ", s.id, ": split not applied: ", rev.status().message()));
    Signal();
    return true;  // the next round decides again from a fresh view; the copies stay valid
  }
  Log(LogLevel::kInfo,
      absl::StrCat("cluster: shard ", s.id, ": split at \"", absl::CHexEscape(s.split_at),
                   "\" (SPLIT record seq ", p.seq, "): shard ", right.id, " epoch ", right.epoch,
                   ", primary ", right.primary, ", backups [", absl::StrJoin(right.backups, ","),
                   "]"));
  splits_.erase(s.id);
  local->SetRange(left.start, left.end);
  local->AdvanceEpoch(left.epoch);
  local->EndSplit();
  std::shared_ptr<ShardReplica> born = *target;
  born->SetRange(right.start, right.end);
  born->BecomePrimary(right.epoch);
  if (!right.backups.empty()) {
    born->HoldWrites(absl::StrCat("shard ", right.id,
                                  " was just split off; its backups are "
                                  "being linked"));
    born_[right.id] = clock_->Now() + kBornLinkWait;
  }
  Signal();
  return true;
}

bool ClusterNode::LinkSplitBackups(const cluster::ClusterView& view, const cluster::ShardInfo& s,
                                   const std::shared_ptr<ShardReplica>& local) {
  auto it = born_.find(s.id);
  if (it == born_.end()) return false;
  const std::vector<std::string> linked = local->LinkNodes();
  const std::vector<std::string> failed = local->FailedLinks();
  std::vector<std::string> missing;
  for (const std::string& b : s.backups) {
    if (!view.IsLive(b)) continue;  // gone with its copy: the membership round drops it
    if (!Has(linked, b) || Has(failed, b) || !local->CaughtUp(b)) missing.push_back(b);
  }
  if (missing.empty() || clock_->Now() >= it->second) {
    if (!missing.empty()) {
      Log(LogLevel::kWarning,
          absl::StrCat("cluster: shard ", s.id, ": backups [", absl::StrJoin(missing, ","),
                       "] were not linked in time after the split; they rejoin"));
    }
    born_.erase(it);
    local->ReleaseWrites();
    return false;
  }
  std::vector<std::string> attach;
  for (const std::string& b : missing) {
    if (!Has(linked, b)) attach.push_back(b);
  }
  AttachNodes(view, s, local, attach, /*delta=*/true);
  return true;
}

void ClusterNode::RemoveOrphans(const cluster::ClusterView& view) {
  const absl::Time now = clock_->Now();
  std::map<uint32_t, absl::Time> still;
  for (const std::shared_ptr<ShardReplica>& r : shards_->All()) {
    const uint32_t id = r->id();
    bool wanted = view.ShardById(id) != nullptr;
    for (const cluster::ShardInfo& s : view.shard_list) wanted = wanted || s.split_id == id;
    if (wanted) continue;
    auto since = orphan_since_.find(id);
    const absl::Time first = since == orphan_since_.end() ? now : since->second;
    if (now - first >= kOrphanLeaseTtls * options_.lease_ttl) {
      shards_->Remove(id, "its shard is not in the map (a split that was given up)");
      continue;
    }
    still[id] = first;
  }
  orphan_since_ = std::move(still);
}

}  // namespace unloadkv::server
