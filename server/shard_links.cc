// ShardReplica: as primary, its links to backups: adding one with a state transfer, catching up,
// removing.
#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/replication_records.h"
#include "server/shard_replica.h"
#include "transport/base/logging.h"

namespace unloadkv::server {
namespace {

// Snapshot records per REPLICATE request, and their key bytes: well inside a message.
constexpr size_t kSnapshotRecords = 256;
constexpr size_t kSnapshotKeyBytes = 32 << 10;
// Value writes per delta request (each one record's value).
constexpr size_t kDeltaWrites = 256;

}  // namespace

uint64_t ShardReplica::AddLink(std::shared_ptr<ReplicaLink> link,
                               const proto::AttachResponse& attached, absl::Time now) {
  const std::string node = link->node();
  // Delta catch-up (docs/durability.md): the backup kept a state; the log's records after it
  // are read outside the lock (they may be many), and what committed meanwhile under it.
  std::vector<proto::LogEntry> tail;
  if (attached.check_epoch() != 0 && disk_ != nullptr) {
    absl::StatusOr<std::vector<proto::LogEntry>> t =
        ReplicaLog::ReadLive(disk_, log_dir_, attached.check_seq());
    if (t.ok()) tail = *std::move(t);
  }
  uint64_t bytes = 0;
  bool delta = false, same = false;
  uint64_t to = 0;
  {
    MutexLock l(&mu_);
    if (role_ != Role::kPrimary) return 0;
    LinkState ls;
    ls.link = link;
    // A replica born by a split, attaching a backup that made the same copy at the same record
    // (SPLIT's seq and epoch) while this one has taken nothing since: it holds this very state.
    same = born_seq_ != 0 && attached.check_epoch() == born_epoch_ &&
           attached.check_seq() == born_seq_ && attached.last_seq() == born_seq_ &&
           pending_.empty() && next_seq_ - 1 == born_seq_;
    if (same) {
      ls.acked = ls.transfer_end = born_seq_;
    } else {
      delta = !tail.empty() && SendDeltaLocked(attached, std::move(tail), &ls, &bytes);
      if (!delta) SendSnapshotLocked(&ls, &bytes);
    }
    to = next_seq_ - 1;
    // Then the writes in flight, which commit without this link but must reach it.
    std::weak_ptr<ShardReplica> self = weak_from_this();
    for (const Entry& e : pending_) {
      ReplicaLink::Item item = ItemFor(e);
      item.done = [self, node, seq = e.seq](auto r) {
        if (auto s = self.lock()) s->OnAck(node, seq, false, r);
      };
      PushLiveLocked(&ls, std::move(item));
    }
    ls.transfer_bytes = bytes;
    ls.transfer_started = now;
    StartVotingLocked(&ls);  // a delta with nothing to send is through at once
    links_[node] = std::move(ls);
  }
  link->Flush();
  Log(LogLevel::kInfo,
      same ? absl::StrCat("shard ", id_, ": ", node, " holds the state the split gave it (seq ",
                          attached.last_seq(), "): nothing to send")
      : delta
          ? absl::StrCat("shard ", id_, ": catching ", node, " up by delta: seqs ",
                         attached.last_seq() + 1, "..", to, ", ", bytes, " value bytes")
          : absl::StrCat(
                "shard ", id_, ": transferring the whole state to ", node, " (", bytes,
                " value bytes)",
                attached.check_epoch() != 0 ? "; its kept state is not one this log extends" : ""));
  return bytes;
}

void ShardReplica::SendSnapshotLocked(LinkState* ls, uint64_t* bytes) {
  ls->transfer_end = pending_.empty() ? 0 : pending_.back().seq;
  // The first live record this link carries: the backup checks it (a lost one would leave
  // the backup without a write the others have, while acks for later ones commit it).
  const uint64_t first_live = pending_.empty() ? next_seq_ : pending_.front().seq;
  ls->snapshot_through = first_live - 1;
  // The committed state, in requests of bounded size (at least one, to say first_live), sent
  // as the transfer rate allows.
  ls->snapshot = store_->Snapshot();
  for (const KvStore::Mutation& m : ls->snapshot) *bytes += m.size;
  ls->snapshot_next = 0;
  ls->snapshot_open = true;
  PushSnapshotLocked(ls);
}

void ShardReplica::RefillTransferBudgetLocked() {
  if (transfer_rate_ == 0 || transfer_clock_ == nullptr) return;
  const absl::Time now = transfer_clock_->Now();
  const double rate = static_cast<double>(transfer_rate_);
  transfer_budget_ = std::min(
      rate / 10, transfer_budget_ + rate * absl::ToDoubleSeconds(now - transfer_refilled_));
  transfer_refilled_ = now;
}

bool ShardReplica::PushSnapshotLocked(LinkState* ls) {
  if (!ls->snapshot_open || ls->failed) return false;
  RefillTransferBudgetLocked();
  const std::string node = ls->link->node();
  std::weak_ptr<ShardReplica> self = weak_from_this();
  const std::vector<KvStore::Mutation>& snapshot = ls->snapshot;
  size_t& i = ls->snapshot_next;
  bool pushed = false;
  while (ls->snapshot_open && (transfer_rate_ == 0 || transfer_budget_ > 0)) {
    ReplicaLink::Item item;
    item.request.set_shard(id_);
    item.request.set_epoch(epoch_);
    item.request.set_snapshot(true);
    item.request.set_next_seq(ls->snapshot_through + 1);
    size_t key_bytes = 0;
    uint64_t value_bytes = 0;
    for (; i < snapshot.size() && item.request.records_size() < int{kSnapshotRecords} &&
           key_bytes < kSnapshotKeyBytes;
         ++i) {
      const KvStore::Mutation& m = snapshot[i];
      key_bytes += m.key.size();
      value_bytes += m.size;
      *item.request.add_records() = ToRecord(m, 0);
      if (m.size > 0) {
        item.writes.push_back(
            {rnic::ScatterGatherEntry{mr_->address() + m.slot.offset, m.size, mr_->lkey()},
             m.slot.offset});
      }
    }
    item.request.set_snapshot_end(i == snapshot.size());
    item.done = [self, node, value_bytes](auto r) {
      if (auto s = self.lock()) s->OnAck(node, 0, true, r, value_bytes);
    };
    if (transfer_rate_ != 0) transfer_budget_ -= static_cast<double>(value_bytes + key_bytes);
    ++ls->snapshot_pending;
    ls->link->Push(std::move(item));
    pushed = true;
    if (i == snapshot.size()) {
      // All of it queued: the live records held behind it follow, in order.
      ls->snapshot_open = false;
      ls->snapshot = std::vector<KvStore::Mutation>();
      PushHeldLocked(ls);
    }
  }
  return pushed;
}

void ShardReplica::PushHeldLocked(LinkState* ls) {
  // One request per held write made the hold's drain after a paced copy cost the clients as
  // much as an unpaced copy (migration_bench: a 10 MiB/s copy ran 11-21 s past its pace).
  using Done = decltype(ReplicaLink::Item::done);
  ReplicaLink::Item batch;
  std::vector<Done> dones;
  size_t key_bytes = 0;
  auto push = [&] {
    if (dones.empty()) return;
    if (dones.size() == 1) {
      batch.done = std::move(dones.front());
    } else {
      batch.done = [dones = std::move(dones)](absl::StatusOr<proto::ReplicateResponse> r) {
        for (const Done& d : dones) d(r);
      };
    }
    ls->link->Push(std::move(batch));
    batch = ReplicaLink::Item();
    dones.clear();
    key_bytes = 0;
  };
  auto has_split = [](const proto::ReplicateRequest& r) {
    for (const proto::ReplicationRecord& rec : r.records()) {
      if (rec.op() == proto::ReplicationRecord::SPLIT) return true;
    }
    return false;
  };
  for (ReplicaLink::Item& h : ls->held) {
    const bool alone = has_split(h.request);
    if (!dones.empty() && (alone || h.request.epoch() != batch.request.epoch() ||
                           batch.request.records_size() + h.request.records_size() >
                               static_cast<int>(kSnapshotRecords) ||
                           key_bytes >= kSnapshotKeyBytes)) {
      push();
    }
    for (const proto::ReplicationRecord& rec : h.request.records()) key_bytes += rec.key().size();
    if (dones.empty()) {
      batch.request = std::move(h.request);
      batch.writes = std::move(h.writes);
    } else {
      for (proto::ReplicationRecord& rec : *h.request.mutable_records()) {
        *batch.request.add_records() = std::move(rec);
      }
      batch.writes.insert(batch.writes.end(), h.writes.begin(), h.writes.end());
    }
    dones.push_back(std::move(h.done));
    if (alone) push();
  }
  push();
  ls->held.clear();
}

void ShardReplica::PushLiveLocked(LinkState* ls, ReplicaLink::Item item) {
  if (ls->snapshot_open) {
    ls->held.push_back(std::move(item));
  } else {
    ls->link->Push(std::move(item));
  }
}

std::vector<ShardReplica::Transfer> ShardReplica::Transfers() const {
  std::vector<Transfer> out;
  MutexLock l(&mu_);
  if (role_ != Role::kPrimary) return out;
  for (const auto& [node, ls] : links_) {
    if (ls.failed || ls.caught_up()) continue;
    out.push_back({node, ls.transfer_bytes, ls.transfer_sent, ls.transfer_started});
  }
  return out;
}

void ShardReplica::SetProgressHook(std::function<void()> hook) {
  MutexLock l(&mu_);
  progress_hook_ = std::move(hook);
}

void ShardReplica::SetTransferRate(uint64_t bytes_per_second, const Clock* clock) {
  MutexLock l(&mu_);
  transfer_rate_ = clock != nullptr ? bytes_per_second : 0;
  transfer_clock_ = clock;
  transfer_budget_ = static_cast<double>(transfer_rate_) / 10;
  if (clock != nullptr) transfer_refilled_ = clock->Now();
}

bool ShardReplica::SendDeltaLocked(const proto::AttachResponse& attached,
                                   std::vector<proto::LogEntry> tail, LinkState* ls,
                                   uint64_t* bytes) {
  // The backup followed this history only if this log holds its last write, from the same
  // epoch, and nothing but barriers (never logged) after it up to where it stopped.
  const uint64_t from = attached.last_seq() + 1;
  const uint64_t committed = (pending_.empty() ? next_seq_ : pending_.front().seq) - 1;
  if (tail.front().record().seq() != attached.check_seq() ||
      tail.front().epoch() != attached.check_epoch() || from > committed + 1) {
    return false;
  }
  // What committed while the tail was read: every committed write is in the log's file.
  const uint64_t read_to = tail.back().record().seq();
  if (read_to < committed) {
    absl::StatusOr<std::vector<proto::LogEntry>> more =
        ReplicaLog::ReadLive(disk_, log_dir_, read_to + 1);
    if (!more.ok()) return false;
    for (proto::LogEntry& e : *more) tail.push_back(std::move(e));
  }
  std::vector<const proto::LogEntry*> records;  // the PUTs and DELETEs in (last_seq, committed]
  uint64_t value_bytes = 0;
  for (size_t i = 1; i < tail.size(); ++i) {
    const uint64_t seq = tail[i].record().seq();
    if (seq < from) return false;  // a write where the backup had a barrier: another history
    if (seq > committed) break;
    records.push_back(&tail[i]);
    value_bytes += tail[i].value().size();
  }
  // A delta that moves more than the whole state would is not worth it.
  if (value_bytes > store_->stats().arena_used_bytes) return false;
  // The values leave from a buffer of their own, registered for the link's writes: the arena's
  // slots may hold newer values by now.
  auto buffer = std::make_shared<DeltaBuffer>();
  buffer->bytes.resize(std::max<uint64_t>(value_bytes, 1));
  absl::StatusOr<std::unique_ptr<rnic::MemoryRegion>> mr =
      engine_->RegisterMemory(buffer->bytes.data(), buffer->bytes.size(), rnic::kLocalWrite);
  if (!mr.ok()) return false;
  buffer->mr = *std::move(mr);
  ls->link->Hold(buffer);
  PushDeltaLocked(records, from, committed, buffer, ls);
  ls->acked = from - 1;              // it holds everything up to there
  ls->transfer_end = next_seq_ - 1;  // caught up once it acknowledged every seq so far
  *bytes += value_bytes;
  return true;
}

void ShardReplica::PushDeltaLocked(const std::vector<const proto::LogEntry*>& records,
                                   uint64_t from, uint64_t to,
                                   const std::shared_ptr<DeltaBuffer>& buffer, LinkState* ls) {
  const std::string node = ls->link->node();
  std::weak_ptr<ShardReplica> self = weak_from_this();
  size_t next = 0;      // into records
  uint64_t offset = 0;  // into the buffer
  ReplicaLink::Item item;
  uint64_t item_bytes = 0;  // value bytes in `item`
  auto flush = [&](uint64_t last) {
    if (item.request.records_size() == 0) return;
    item.request.set_shard(id_);
    item.request.set_epoch(epoch_);
    item.done = [self, node, last, buffer, bytes = item_bytes](auto r) {
      if (auto s = self.lock()) s->OnAck(node, last, false, r, bytes);
    };
    ls->link->Push(std::move(item));
    item = ReplicaLink::Item();
    item_bytes = 0;
  };
  for (uint64_t seq = from; seq <= to; ++seq) {
    proto::ReplicationRecord* r = item.request.add_records();
    if (next < records.size() && records[next]->record().seq() == seq) {
      const proto::LogEntry& e = *records[next++];
      *r = e.record();
      if (!e.value().empty()) {
        std::memcpy(buffer->bytes.data() + offset, e.value().data(), e.value().size());
        item.writes.push_back({buffer->mr->Sge(offset, static_cast<uint32_t>(e.value().size())),
                               e.record().offset()});
        offset += e.value().size();
        item_bytes += e.value().size();
      }
    } else {
      r->set_op(proto::ReplicationRecord::NOOP);  // a barrier: never logged
      r->set_seq(seq);
    }
    if (item.request.records_size() >= int{kSnapshotRecords} ||
        item.writes.size() >= kDeltaWrites) {
      flush(seq);
    }
  }
  flush(to);
}

bool ShardReplica::CaughtUp(const std::string& node) const {
  MutexLock l(&mu_);
  auto it = links_.find(node);
  if (it == links_.end()) return false;
  const LinkState& ls = it->second;
  return !ls.failed && ls.caught_up();
}

void ShardReplica::SetHandingOver(const std::string& to) {
  MutexLock l(&mu_);
  handing_over_ = to;
}

bool ShardReplica::Drained() const {
  MutexLock l(&mu_);
  for (const Entry& e : pending_) {
    if (!e.barrier) return false;
  }
  return true;
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
  out.Run();
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

std::vector<std::string> ShardReplica::VotersAt(uint64_t seq) const {
  MutexLock l(&mu_);
  std::vector<std::string> out;
  for (const auto& [node, ls] : links_) {
    if (!ls.failed && ls.votes_from <= seq && ls.acked >= seq) out.push_back(node);
  }
  return out;
}

}  // namespace unloadkv::server
