// ShardReplica: as backup, following a primary: the attach and applying its records in order.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
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
    // A state the primary may extend by delta: a backup's (recovered, or followed before)
    // whose last record was live and is in its log, if it logs.
    const bool keep = req.delta() && !was_primary && role_ == Role::kBackup && check_epoch_ != 0 &&
                      (log_ == nullptr || (!log_behind_ && logged_ >= check_seq_));
    role_ = Role::kBackup;
    epoch_ = req.epoch();
    fence_ = req.epoch();
    recovered_ = false;
    proto::AttachResponse resp;
    resp.set_arena_addr(mr_->address());
    resp.set_arena_rkey(mr_->rkey());
    if (keep) {
      applied_seq_ = state_seq_;  // the next live record must follow it
      first_seq_ = 0;
      kept_ = true;
      resp.set_last_seq(state_seq_);
      resp.set_check_seq(check_seq_);
      resp.set_check_epoch(check_epoch_);
    } else {
      ClearStateLocked();
    }
    if (primary_peer_ != peer) old_peer = primary_peer_;
    primary_peer_ = peer;
    result = resp;
  }
  // The previous primary's connection: none of its writes may land in the new state.
  if (old_peer != 0 && close_peer_) close_peer_(old_peer);
  Retire(&closed);
  out.Run();
  // Before the new primary writes the mirror: clients' windows onto it end here.
  Demoted(was_primary);
  return result;
}

absl::StatusOr<proto::ReplicateResponse> ShardReplica::Apply(const proto::ReplicateRequest& req,
                                                             uint64_t peer) {
  absl::StatusOr<proto::ReplicateResponse> out;
  Apply(req, peer, [&out](absl::StatusOr<proto::ReplicateResponse> r) { out = std::move(r); });
  return out;  // without a log the reply ran inline
}

void ShardReplica::Apply(const proto::ReplicateRequest& req, uint64_t peer, ApplyDone reply) {
  // The replicas SPLIT records copy into, found or created before this one's lock is taken
  // (the node's table locks replicas while it holds its own lock).
  TargetMap targets;
  for (const proto::ReplicationRecord& r : req.records()) {
    if (r.op() != proto::ReplicationRecord::SPLIT || targets.count(r.split_shard()) > 0) continue;
    SplitTargets find;
    {
      MutexLock l(&mu_);
      if (peer != primary_peer_) break;  // ApplyLocked refuses the request
      find = split_targets_;
    }
    std::shared_ptr<ShardReplica>& target = targets[r.split_shard()];
    if (find && r.split_shard() != id_ && r.split_shard() < uint32_t{kMaxSplitTarget}) {
      absl::StatusOr<std::shared_ptr<ShardReplica>> t = find(r.split_shard());
      if (t.ok()) target = *std::move(t);
    }
  }
  absl::StatusOr<proto::ReplicateResponse> result;
  {
    MutexLock l(&mu_);
    std::vector<proto::LogEntry> to_log;
    result = ApplyLocked(req, peer, log_ != nullptr ? &to_log : nullptr, targets);
    if (log_ != nullptr) {
      // Under mu_, so that the log gets records in the order they were applied. What was
      // applied is logged even when a later record failed; that failure fails the link, and
      // the backup is attached again (a new state) before it counts for anything.
      if (result.ok() && req.snapshot() && req.snapshot_end() && state_open_) {
        to_log.push_back(proto::LogEntry());
        to_log.back().set_kind(proto::LogEntry::STATE_END);
        to_log.back().set_epoch(epoch_);
        to_log.back().mutable_record()->set_seq(first_seq_ > 0 ? first_seq_ - 1 : 0);
        state_open_ = false;
      }
      std::weak_ptr<ShardReplica> self = weak_from_this();
      for (size_t i = 0; i < to_log.size(); ++i) {
        const bool live = to_log[i].kind() == proto::LogEntry::LIVE;
        const uint64_t seq = to_log[i].record().seq();
        const bool last = i + 1 == to_log.size() && result.ok();
        LogWriter::Done done = [self, live, seq, last, reply,
                                resp = result.ok() ? *result
                                                   : proto::ReplicateResponse()](absl::Status st) {
          if (auto r = self.lock()) r->NoteLogged(live ? seq : 0, st);
          if (!last) return;
          if (!st.ok()) {
            return reply(absl::Status(st.code(), absl::StrCat("the shard's log: ", st.message())));
          }
          reply(resp);
        };
        log_->Submit(std::move(to_log[i]), std::move(done));
      }
      if (result.ok() && !to_log.empty()) return;  // answered by the log
    }
  }
  reply(std::move(result));
}

absl::StatusOr<proto::ReplicateResponse> ShardReplica::ApplyLocked(
    const proto::ReplicateRequest& req, uint64_t peer, std::vector<proto::LogEntry>* to_log,
    const TargetMap& targets) {
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
  if (req.snapshot() && kept_) ClearStateLocked();  // the primary sends all of it after all
  kept_ = false;
  if (req.snapshot()) {
    if (applied_seq_ != 0) {
      return absl::FailedPreconditionError("snapshot request after live records");
    }
    if (req.next_seq() != 0) first_seq_ = next_seq_ = req.next_seq();
  }
  if (to_log != nullptr && log_behind_) {
    return absl::FailedPreconditionError(
        absl::StrCat("shard ", id_,
                     ": this backup's log refused records it applied; it must be attached "
                     "again"));
  }
  for (const proto::ReplicationRecord& r : req.records()) {
    if (!req.snapshot()) {
      if (absl::Status st = CheckNextLocked(r, to_log); !st.ok()) return st;
    }
    KvStore::Mutation m;
    const bool split = r.op() == proto::ReplicationRecord::SPLIT;
    const bool mutation = r.op() != proto::ReplicationRecord::NOOP && !split;
    if (split) {
      if (req.snapshot()) return absl::InvalidArgumentError("a SPLIT record in a snapshot");
      if (absl::Status st = ApplySplitLocked(r, req.epoch(), targets); !st.ok()) return st;
    } else if (mutation) {
      absl::StatusOr<KvStore::Mutation> parsed = FromRecord(r);
      if (!parsed.ok()) return parsed.status();
      if (absl::Status st = store_->ApplyMirrored(*parsed); !st.ok()) return st;
      m = *std::move(parsed);
    }
    if (to_log != nullptr) {
      if (!mutation) {
        // Logged as a barrier: the shard's own state is what a SPLIT leaves unchanged.
        proto::LogEntry noop;
        noop.set_epoch(epoch_);
        noop.mutable_record()->set_op(proto::ReplicationRecord::NOOP);
        noop.mutable_record()->set_seq(r.seq());
        to_log->push_back(std::move(noop));
      } else {
        to_log->push_back(
            EntryOf(m, r.seq(), req.snapshot() ? proto::LogEntry::STATE : proto::LogEntry::LIVE));
      }
    }
    if (!req.snapshot()) {
      applied_seq_ = state_seq_ = r.seq();
      next_seq_ = r.seq() + 1;
      if (mutation) {
        check_seq_ = r.seq();
        check_epoch_ = req.epoch();
      }
    }
  }
  proto::ReplicateResponse resp;
  resp.set_applied_seq(applied_seq_);
  return resp;
}

absl::Status ShardReplica::CheckNextLocked(const proto::ReplicationRecord& r,
                                           std::vector<proto::LogEntry>* to_log) {
  if (r.seq() == 0 || (applied_seq_ != 0 && r.seq() != applied_seq_ + 1)) {
    return absl::FailedPreconditionError(
        absl::StrCat("shard ", id_, ": record ", r.seq(), " out of sequence after ", applied_seq_));
  }
  if (applied_seq_ == 0 && first_seq_ != 0 && r.seq() != first_seq_) {
    return absl::FailedPreconditionError(absl::StrCat("shard ", id_, ": first live record ",
                                                      r.seq(), ", expected ", first_seq_,
                                                      " (an earlier one was lost)"));
  }
  if (to_log != nullptr && state_open_) {
    // A primary that does not mark its transfer's end: the state ends before its first live
    // record.
    proto::LogEntry end;
    end.set_kind(proto::LogEntry::STATE_END);
    end.set_epoch(epoch_);
    end.mutable_record()->set_seq(r.seq() - 1);
    to_log->push_back(std::move(end));
    state_open_ = false;
  }
  return absl::OkStatus();
}

void ShardReplica::NoteLogged(uint64_t seq, const absl::Status& st) {
  MutexLock l(&mu_);
  if (st.ok()) {
    logged_ = std::max(logged_, seq);
  } else {
    log_behind_ = true;  // the store holds what the log does not: no more records, no delta
  }
}

void ShardReplica::ClearStateLocked() {
  store_->Clear();
  applied_seq_ = 0;
  first_seq_ = 0;
  next_seq_ = 1;
  state_seq_ = check_seq_ = check_epoch_ = 0;
  kept_ = false;
  // The log forgets what it held: the transfer that follows is its new state.
  if (log_ != nullptr) {
    LogMarker(proto::LogEntry::STATE_BEGIN, 0);
    log_behind_ = false;
  }
}

bool ShardReplica::WaitLogged(absl::Duration limit) {
  const absl::Time deadline = absl::Now() + limit;
  while (true) {
    {
      MutexLock l(&mu_);
      if (log_ == nullptr || logged_ >= applied_seq_) return true;
    }
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
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
