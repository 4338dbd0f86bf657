#include "server/shard_replica.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "transport/base/logging.h"

namespace unloadkv::server {
namespace {

// Snapshot records per REPLICATE request, and their key bytes: well inside a message.
constexpr size_t kSnapshotRecords = 256;
constexpr size_t kSnapshotKeyBytes = 32 << 10;

proto::ReplicationRecord ToRecord(const KvStore::Mutation& m, uint64_t seq) {
  proto::ReplicationRecord r;
  r.set_op(m.op == KvStore::Mutation::Op::kPut ? proto::ReplicationRecord::PUT
                                               : proto::ReplicationRecord::DELETE);
  r.set_seq(seq);
  r.set_key(m.key);
  r.set_offset(m.slot.offset);
  r.set_capacity(m.slot.capacity);
  r.set_size(m.size);
  r.set_version(m.version);
  return r;
}

absl::StatusOr<KvStore::Mutation> FromRecord(const proto::ReplicationRecord& r) {
  KvStore::Mutation m;
  switch (r.op()) {
    case proto::ReplicationRecord::PUT:
      m.op = KvStore::Mutation::Op::kPut;
      break;
    case proto::ReplicationRecord::DELETE:
      m.op = KvStore::Mutation::Op::kDelete;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("record op ", r.op(), " is not a mutation"));
  }
  m.key = r.key();
  m.slot = Slot{r.offset(), r.capacity()};
  m.size = r.size();
  m.version = r.version();
  return m;
}

}  // namespace

absl::StatusOr<std::shared_ptr<ShardReplica>> ShardReplica::Create(
    engine::Engine* engine, uint32_t id, uint64_t arena_bytes, bool huge_pages, Reaper* reaper,
    std::function<void(uint64_t)> close_peer, void* address_hint,
    uint64_t max_grant_bytes_per_client) {
  std::shared_ptr<ShardReplica> r(new ShardReplica());
  r->id_ = id;
  r->reaper_ = reaper;
  r->close_peer_ = std::move(close_peer);
  r->arena_bytes_ = arena_bytes;
  r->memory_ = std::make_unique<MappedMemory>(arena_bytes, huge_pages, address_hint);
  if (r->memory_->data() == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("arena: cannot map ", arena_bytes, " bytes; lower --arena_bytes"));
  }
  uint32_t access = rnic::kLocalWrite | rnic::kRemoteWrite | rnic::kRemoteRead;
  if (r->memory_->huge()) access |= rnic::kHugePageBacked;
  auto mr = engine->RegisterMemory(r->memory_->data(), r->memory_->size(), access);
  if (!mr.ok()) return mr.status();
  r->mr_ = std::move(*mr);
  // Every replica of a shard manages exactly arena_bytes, whatever its mapping rounded to,
  // so that slots mirror.
  r->store_ =
      std::make_unique<KvStore>(r->memory_->data(), arena_bytes, max_grant_bytes_per_client);
  return r;
}

ShardReplica::~ShardReplica() {
  std::map<std::string, LinkState> links;
  Callbacks out;
  {
    MutexLock l(&mu_);
    links.swap(links_);
    FailPendingLocked("replica closed", &out);
  }
  for (auto& f : out) f();
  Retire(&links);  // their callbacks find the replica gone
}

void ShardReplica::Retire(std::map<std::string, LinkState>* links) {
  if (reaper_ != nullptr) {
    for (auto& [node, ls] : *links) reaper_->Release(std::move(ls.link));
  }
  links->clear();
}

ShardReplica::Role ShardReplica::role() const {
  MutexLock l(&mu_);
  return role_;
}

uint64_t ShardReplica::epoch() const {
  MutexLock l(&mu_);
  return epoch_;
}

uint64_t ShardReplica::fence() const {
  MutexLock l(&mu_);
  return fence_;
}

size_t ShardReplica::pending() const {
  MutexLock l(&mu_);
  return pending_.size();
}

void ShardReplica::SetRange(const std::string& start, const std::string& end) {
  MutexLock l(&mu_);
  start_ = start;
  end_ = end;
}

bool ShardReplica::ServesKey(absl::string_view key) const {
  MutexLock l(&mu_);
  return role_ == Role::kPrimary && key >= start_ && (end_.empty() || key < end_);
}

bool ShardReplica::ContainsRange(absl::string_view start, absl::string_view end) const {
  MutexLock l(&mu_);
  if (start < start_) return false;
  if (end_.empty()) return true;
  return !end.empty() && end <= end_;
}

void ShardReplica::BecomePrimary(uint64_t epoch) {
  uint64_t old_peer;
  {
    MutexLock l(&mu_);
    role_ = Role::kPrimary;
    epoch_ = epoch;
    fence_ = std::max(fence_, epoch);
    next_seq_ = 1;
    old_peer = std::exchange(primary_peer_, 0);
    Retire(&links_);
  }
  if (old_peer != 0 && close_peer_) close_peer_(old_peer);
}

void ShardReplica::AdvanceEpoch(uint64_t epoch) {
  MutexLock l(&mu_);
  epoch_ = std::max(epoch_, epoch);
  fence_ = std::max(fence_, epoch);
}

ReplicaLink::Item ShardReplica::ItemFor(const Entry& e) {
  ReplicaLink::Item item;
  const KvStore::Mutation& m = e.mutation;
  if (!e.barrier && m.op == KvStore::Mutation::Op::kPut && m.size > 0) {
    item.writes.push_back(
        {rnic::ScatterGatherEntry{mr_->address() + m.slot.offset, m.size, mr_->lkey()},
         m.slot.offset});
  }
  item.request.set_shard(id_);
  item.request.set_epoch(epoch_);
  if (e.barrier) {
    proto::ReplicationRecord* r = item.request.add_records();
    r->set_op(proto::ReplicationRecord::NOOP);
    r->set_seq(e.seq);
  } else {
    *item.request.add_records() = ToRecord(m, e.seq);
  }
  return item;
}

void ShardReplica::Submit(KvStore::Mutation m, Done done) {
  Entry e;
  e.mutation = std::move(m);
  e.done = std::move(done);
  Append(std::move(e));
}

void ShardReplica::Barrier(std::function<void(absl::Status)> done) {
  Entry e;
  e.barrier = true;
  e.on_barrier = std::move(done);
  Append(std::move(e));
}

void ShardReplica::Append(Entry entry) {
  Callbacks out;
  std::vector<std::shared_ptr<ReplicaLink>> flush;
  {
    MutexLock l(&mu_);
    if (role_ != Role::kPrimary) {
      if (entry.barrier) {
        out.push_back([f = std::move(entry.on_barrier)] {
          f(absl::AbortedError("not the primary of this shard"));
        });
      } else {
        store_->Abandon(entry.mutation);
        out.push_back([f = std::move(entry.done)] {
          f(absl::AbortedError("not the primary of this shard"));
        });
      }
    } else {
      Entry& e = pending_.emplace_back(std::move(entry));
      e.seq = next_seq_++;
      std::weak_ptr<ShardReplica> self = weak_from_this();
      for (auto& [node, ls] : links_) {
        if (ls.failed) continue;
        ReplicaLink::Item item = ItemFor(e);
        item.done = [self, node = node, seq = e.seq](auto r) {
          if (auto s = self.lock()) s->OnAck(node, seq, false, r);
        };
        ls.link->Push(std::move(item));  // queued only: sent by Flush, outside the lock
        flush.push_back(ls.link);
      }
      CommitReady(&out);
    }
  }
  for (auto& link : flush) link->Flush();
  for (auto& f : out) f();
}

void ShardReplica::CommitReady(Callbacks* out) {
  while (!pending_.empty()) {
    Entry& e = pending_.front();
    for (const auto& [node, ls] : links_) {
      if (e.seq >= ls.votes_from && ls.acked < e.seq) return;  // still waits on this link
    }
    if (e.barrier) {
      out->push_back([f = std::move(e.on_barrier)] { f(absl::OkStatus()); });
    } else {
      if (store_->Commit(e.mutation)) {
        out->push_back([f = std::move(e.done), v = e.mutation.version] { f(v); });
      } else {  // a DELETE that found the key already deleted by a write committed before it
        out->push_back([f = std::move(e.done)] { f(absl::NotFoundError("no such key")); });
      }
    }
    pending_.pop_front();
  }
}

void ShardReplica::FailPendingLocked(const std::string& why, Callbacks* out) {
  for (Entry& e : pending_) {
    if (e.barrier) {
      out->push_back([f = std::move(e.on_barrier), why] {
        f(absl::AbortedError(absl::StrCat("not the primary: ", why)));
      });
    } else {
      // Not abandoned: a backup may have applied it, so its slot stays as the data may be.
      out->push_back([f = std::move(e.done), why] {
        f(absl::UnavailableError(absl::StrCat("write outcome unknown: ", why)));
      });
    }
  }
  pending_.clear();
}

void ShardReplica::OnAck(const std::string& node, uint64_t seq, bool snapshot,
                         const absl::StatusOr<proto::ReplicateResponse>& r) {
  Callbacks out;
  std::map<std::string, LinkState> closed;
  {
    MutexLock l(&mu_);
    auto it = links_.find(node);
    if (it == links_.end() || role_ != Role::kPrimary) return;
    LinkState& ls = it->second;
    if (!r.ok()) {
      if (r.status().code() == absl::StatusCode::kAborted) {
        // The backup follows a newer epoch: this replica is no longer the primary.
        Log(LogLevel::kWarning,
            absl::StrCat("shard ", id_, ": backup ", node, " refused epoch ", epoch_, " (",
                         r.status().message(), "); stepping down"));
        role_ = Role::kDeposed;
        FailPendingLocked(absl::StrCat("deposed at epoch ", epoch_), &out);
        closed.swap(links_);
      } else if (!ls.failed) {
        Log(LogLevel::kWarning, absl::StrCat("shard ", id_, ": link to backup ", node,
                                             " failed: ", r.status().ToString()));
        ls.failed = true;
      }
    } else if (snapshot) {
      --ls.snapshot_pending;
    } else {
      ls.acked = std::max(ls.acked, std::max(seq, r->applied_seq()));
      CommitReady(&out);
    }
  }
  Retire(&closed);
  for (auto& f : out) f();
}

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

void ShardReplica::StepDown(const std::string& why) {
  Callbacks out;
  std::map<std::string, LinkState> closed;
  uint64_t old_peer;
  {
    MutexLock l(&mu_);
    if (role_ == Role::kPrimary) role_ = Role::kDeposed;
    FailPendingLocked(why, &out);
    closed.swap(links_);
    old_peer = std::exchange(primary_peer_, 0);
  }
  Retire(&closed);
  // The attached primary's connection serves this replica only. Its primary may never close
  // it: a link that failed on a cut network sends nothing more, so this end would hold it
  // forever (found by cluster_sim, seed 5 of the partition sweep).
  if (old_peer != 0 && close_peer_) close_peer_(old_peer);
  for (auto& f : out) f();
}

void ShardReplica::Tick() {
  std::vector<std::shared_ptr<ReplicaLink>> links;
  {
    MutexLock l(&mu_);
    for (auto& [node, ls] : links_) links.push_back(ls.link);
  }
  for (auto& link : links) {
    link->CheckDeadlines();
    link->Flush();  // what waited behind a full window or an injected cut
  }
}

absl::StatusOr<proto::AttachResponse> ShardReplica::Attach(const proto::AttachRequest& req,
                                                           uint64_t peer) {
  Callbacks out;
  std::map<std::string, LinkState> closed;
  absl::StatusOr<proto::AttachResponse> result;
  uint64_t old_peer = 0;
  {
    MutexLock l(&mu_);
    if (req.epoch() < fence_) {
      return absl::AbortedError(absl::StrCat("shard ", id_, ": attach at epoch ", req.epoch(),
                                             " below this replica's fence ", fence_));
    }
    if (req.arena_bytes() != arena_bytes_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "shard ", id_, ": the primary's arena is ", req.arena_bytes(), " bytes, this node's ",
          arena_bytes_, "; give every node the same --arena_bytes"));
    }
    if (role_ == Role::kPrimary) {
      // A newer primary exists: this one was deposed without learning it yet.
      FailPendingLocked(absl::StrCat("node ", req.primary(), " took over at epoch ", req.epoch()),
                        &out);
      closed.swap(links_);
    }
    store_->Clear();
    role_ = Role::kBackup;
    epoch_ = req.epoch();
    fence_ = req.epoch();
    applied_seq_ = 0;
    first_seq_ = 0;
    if (primary_peer_ != peer) old_peer = primary_peer_;
    primary_peer_ = peer;
    proto::AttachResponse resp;
    resp.set_arena_addr(mr_->address());
    resp.set_arena_rkey(mr_->rkey());
    result = resp;
  }
  // The previous primary's connection: none of its writes may land in the new state.
  if (old_peer != 0 && close_peer_) close_peer_(old_peer);
  Retire(&closed);
  for (auto& f : out) f();
  return result;
}

absl::StatusOr<proto::ReplicateResponse> ShardReplica::Apply(const proto::ReplicateRequest& req,
                                                             uint64_t peer) {
  MutexLock l(&mu_);
  if (peer != primary_peer_) {
    return absl::AbortedError(
        absl::StrCat("shard ", id_, ": records from a connection that did not attach it"));
  }
  if (req.epoch() < fence_) {
    return absl::AbortedError(absl::StrCat("shard ", id_, ": stale epoch ", req.epoch(),
                                           " (this replica follows epoch ", fence_, ")"));
  }
  if (role_ != Role::kBackup) {
    return absl::AbortedError(absl::StrCat("shard ", id_, ": not a backup here"));
  }
  epoch_ = std::max(epoch_, req.epoch());
  fence_ = std::max(fence_, req.epoch());
  if (req.snapshot()) {
    if (applied_seq_ != 0) {
      return absl::FailedPreconditionError("snapshot request after live records");
    }
    if (req.next_seq() != 0) first_seq_ = req.next_seq();
  }
  for (const proto::ReplicationRecord& r : req.records()) {
    if (!req.snapshot()) {
      if (r.seq() == 0 || (applied_seq_ != 0 && r.seq() != applied_seq_ + 1)) {
        return absl::FailedPreconditionError(absl::StrCat("shard ", id_, ": record ", r.seq(),
                                                          " out of sequence after ", applied_seq_));
      }
      if (applied_seq_ == 0 && first_seq_ != 0 && r.seq() != first_seq_) {
        return absl::FailedPreconditionError(absl::StrCat("shard ", id_, ": first live record ",
                                                          r.seq(), ", expected ", first_seq_,
                                                          " (an earlier one was lost)"));
      }
    }
    if (r.op() != proto::ReplicationRecord::NOOP) {
      absl::StatusOr<KvStore::Mutation> m = FromRecord(r);
      if (!m.ok()) return m.status();
      if (absl::Status st = store_->ApplyMirrored(*m); !st.ok()) return st;
    }
    if (!req.snapshot()) applied_seq_ = r.seq();
  }
  proto::ReplicateResponse resp;
  resp.set_applied_seq(applied_seq_);
  return resp;
}

void ShardReplica::RaiseFence(uint64_t epoch) {
  uint64_t old_peer = 0;
  {
    MutexLock l(&mu_);
    if (epoch > fence_) old_peer = std::exchange(primary_peer_, 0);
    fence_ = std::max(fence_, epoch);
  }
  if (old_peer != 0 && close_peer_) close_peer_(old_peer);
}

}  // namespace unloadkv::server
