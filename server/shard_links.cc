// ShardReplica: as primary, its links to backups: adding one with a state transfer, catching up,
// removing.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/replication_records.h"
#include "server/shard_replica.h"

namespace unloadkv::server {
namespace {

// Snapshot records per REPLICATE request, and their key bytes: well inside a message.
constexpr size_t kSnapshotRecords = 256;
constexpr size_t kSnapshotKeyBytes = 32 << 10;

}  // namespace

uint64_t ShardReplica::AddLink(std::shared_ptr<ReplicaLink> link) {
  const std::string node = link->node();
  uint64_t bytes = 0;
  {
    MutexLock l(&mu_);
    if (role_ != Role::kPrimary) return 0;
    std::weak_ptr<ShardReplica> self = weak_from_this();
    LinkState ls;
    ls.link = link;
    ls.votes_from = next_seq_;
    ls.transfer_end = pending_.empty() ? 0 : pending_.back().seq;
    // The first live record this link carries: the backup checks it (a lost one would leave
    // the backup without a write the others have, while acks for later ones commit it).
    const uint64_t first_live = pending_.empty() ? next_seq_ : pending_.front().seq;
    // The committed state, in requests of bounded size; at least one, to say first_live.
    std::vector<KvStore::Mutation> snapshot = store_->Snapshot();
    size_t i = 0;
    do {
      ReplicaLink::Item item;
      item.request.set_shard(id_);
      item.request.set_epoch(epoch_);
      item.request.set_snapshot(true);
      item.request.set_next_seq(first_live);
      size_t key_bytes = 0;
      for (; i < snapshot.size() && item.request.records_size() < int{kSnapshotRecords} &&
             key_bytes < kSnapshotKeyBytes;
           ++i) {
        const KvStore::Mutation& m = snapshot[i];
        key_bytes += m.key.size();
        bytes += m.size;
        *item.request.add_records() = ToRecord(m, 0);
        if (m.size > 0) {
          item.writes.push_back(
              {rnic::ScatterGatherEntry{mr_->address() + m.slot.offset, m.size, mr_->lkey()},
               m.slot.offset});
        }
      }
      item.request.set_snapshot_end(i == snapshot.size());
      item.done = [self, node](auto r) {
        if (auto s = self.lock()) s->OnAck(node, 0, true, r);
      };
      ++ls.snapshot_pending;
      link->Push(std::move(item));
    } while (i < snapshot.size());
    // Then the writes in flight, which commit without this link but must reach it.
    for (const Entry& e : pending_) {
      ReplicaLink::Item item = ItemFor(e);
      item.done = [self, node, seq = e.seq](auto r) {
        if (auto s = self.lock()) s->OnAck(node, seq, false, r);
      };
      link->Push(std::move(item));
    }
    links_[node] = std::move(ls);
  }
  link->Flush();
  return bytes;
}

bool ShardReplica::CaughtUp(const std::string& node) const {
  MutexLock l(&mu_);
  auto it = links_.find(node);
  if (it == links_.end()) return false;
  const LinkState& ls = it->second;
  return !ls.failed && ls.snapshot_pending == 0 && ls.acked >= ls.transfer_end;
}

void ShardReplica::RemoveLink(const std::string& node) {
  Callbacks out;
  std::shared_ptr<ReplicaLink> closed;
  {
    MutexLock l(&mu_);
    auto it = links_.find(node);
    if (it == links_.end()) return;
    closed = std::move(it->second.link);
    links_.erase(it);
    if (role_ == Role::kPrimary) CommitReady(&out);
  }
  if (reaper_ != nullptr) reaper_->Release(std::move(closed));
  for (auto& f : out) f();
}

std::vector<std::string> ShardReplica::FailedLinks() const {
  MutexLock l(&mu_);
  std::vector<std::string> out;
  for (const auto& [node, ls] : links_) {
    if (ls.failed || ls.link->failed()) out.push_back(node);
  }
  return out;
}

std::vector<std::string> ShardReplica::LinkNodes() const {
  MutexLock l(&mu_);
  std::vector<std::string> out;
  for (const auto& [node, ls] : links_) out.push_back(node);
  return out;
}

}  // namespace unloadkv::server
