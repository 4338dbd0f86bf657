// ShardReplica: as backup, following a primary: the attach and applying its records in order.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/replication_records.h"
#include "server/shard_replica.h"

namespace unloadkv::server {
absl::StatusOr<proto::AttachResponse> ShardReplica::Attach(const proto::AttachRequest& req,
                                                           uint64_t peer) {
  Callbacks out;
  std::map<std::string, LinkState> closed;
  absl::StatusOr<proto::AttachResponse> result;
  uint64_t old_peer = 0;
  bool was_primary = false;
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
      was_primary = true;
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
  // Before the new primary writes the mirror: clients' windows onto it end here.
  Demoted(was_primary);
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

uint32_t ShardReplica::mirror_key() const {
  MutexLock l(&mu_);
  return mirror_window_ != nullptr ? mirror_window_->rkey() : 0;
}

void ShardReplica::BindMirror(const std::shared_ptr<engine::Connection>& conn, uint64_t peer,
                              std::function<void(absl::StatusOr<uint32_t>)> done) {
  if (!protection_.windows) return done(mr_->rkey());
  rnic::MemoryWindow* window = nullptr;
  {
    MutexLock l(&mu_);
    if (primary_peer_ != peer) {
      return done(absl::AbortedError(
          absl::StrCat("shard ", id_, ": connection ", peer, " is not the attached primary's")));
    }
    if (mirror_window_ != nullptr && mirror_peer_ == peer) return done(mirror_window_->rkey());
    // A window of an earlier primary's connection died with it (close_peer_ closed it).
    absl::StatusOr<std::unique_ptr<rnic::MemoryWindow>> w = device_->AllocateWindow();
    if (!w.ok()) return done(w.status());
    mirror_window_ = std::move(*w);
    mirror_peer_ = peer;
    window = mirror_window_.get();
  }
  engine::WindowGrant g{window, mr_.get(), mr_->address(), arena_bytes_};
  std::weak_ptr<ShardReplica> self = weak_from_this();
  absl::Status st = conn->BindWindows({&g, 1}, [self, window, done](absl::Status s) {
    std::shared_ptr<ShardReplica> r = self.lock();
    if (!s.ok() || r == nullptr) return done(s.ok() ? absl::AbortedError("replica gone") : s);
    uint32_t key = 0;
    {
      MutexLock l(&r->mu_);
      if (r->mirror_window_.get() == window) key = window->rkey();
    }
    if (key == 0) return done(absl::AbortedError("another primary attached meanwhile"));
    done(key);
  });
  if (!st.ok()) done(st);
}

}  // namespace unloadkv::server
