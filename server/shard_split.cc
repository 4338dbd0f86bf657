// ShardReplica: splits (docs/cluster.md, "Splits"): the SPLIT record a primary puts into its
// stream, the copy of a range into a replica of the new shard that every replica makes at that
// record, the writes a replica born so holds until its backups are linked, and the purge of
// the keys a split left behind.
#include <cstring>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "proto/limits.h"
#include "server/shard_replica.h"
#include "transport/base/logging.h"

namespace unloadkv::server {

void ShardReplica::BeginSplit(const std::string& at, uint32_t new_shard,
                              std::function<void(absl::StatusOr<uint64_t>)> done) {
  absl::Status bad;
  {
    MutexLock l(&mu_);
    if (new_shard == id_ || new_shard == 0) {
      bad = absl::InvalidArgumentError(
          absl::StrCat("shard ", id_, " cannot split into shard ", new_shard));
    } else if (at.empty() || at <= start_ || (!end_.empty() && at >= end_)) {
      bad = absl::InvalidArgumentError(absl::StrCat(
          "shard ", id_, ": split key \"", absl::CHexEscape(at), "\" is not inside its range"));
    }
  }
  if (!bad.ok()) return done(bad);
  Entry e;
  e.barrier = true;
  e.split_shard = new_shard;
  e.split_at = at;
  e.on_split = std::move(done);
  Append(std::move(e));  // refuses it unless primary and no split is under way
}

void ShardReplica::EndSplit() {
  MutexLock l(&mu_);
  split_open_ = false;
  split_at_.clear();
}

bool ShardReplica::splitting() const {
  MutexLock l(&mu_);
  return split_open_;
}

bool ShardReplica::SplitRefusesLocked(absl::string_view key) const {
  return split_open_ && key >= split_at_ && (end_.empty() || key < end_);
}

void ShardReplica::SetSplitTargets(SplitTargets targets) {
  MutexLock l(&mu_);
  split_targets_ = std::move(targets);
}

absl::Status ShardReplica::CopyRangeTo(ShardReplica* target, absl::string_view start,
                                       absl::string_view end, uint64_t seq, uint64_t epoch) {
  if (target == nullptr || target == this || target->id_ == id_) {
    return absl::FailedPreconditionError(
        absl::StrCat("shard ", id_, ": a split copies into a replica of another shard"));
  }
  if (target->arena_bytes_ != arena_bytes_) {
    return absl::FailedPreconditionError(absl::StrCat("shard ", target->id_, "'s arena is ",
                                                      target->arena_bytes_, " bytes, shard ", id_,
                                                      "'s ", arena_bytes_));
  }
  return target->AdoptState(store_->Snapshot(start, end), store_->arena(), seq, epoch);
}

absl::Status ShardReplica::AdoptState(const std::vector<KvStore::Mutation>& state,
                                      const char* values, uint64_t seq, uint64_t epoch) {
  uint64_t old_peer = 0;
  {
    MutexLock l(&mu_);
    if (role_ != Role::kBackup) {
      return absl::FailedPreconditionError(
          absl::StrCat("shard ", id_, ": its replica here serves; it cannot take a split's copy"));
    }
    if (epoch < fence_) {
      return absl::AbortedError(absl::StrCat("shard ", id_, ": split at epoch ", epoch,
                                             " below this replica's fence ", fence_));
    }
    // It follows no primary until one attaches it (and finds it holding this state).
    old_peer = std::exchange(primary_peer_, 0);
    ClearStateLocked();  // with a log: a new state begins
    epoch_ = epoch;
    fence_ = epoch;
    char* const arena = reinterpret_cast<char*>(mr_->address());
    std::vector<proto::LogEntry> to_log;
    for (const KvStore::Mutation& m : state) {
      if (m.size > 0) std::memcpy(arena + m.slot.offset, values + m.slot.offset, m.size);
      if (absl::Status st = store_->ApplyMirrored(m); !st.ok()) {
        store_->Clear();
        return st;
      }
      if (log_ != nullptr) to_log.push_back(EntryOf(m, 0, proto::LogEntry::STATE));
    }
    applied_seq_ = state_seq_ = check_seq_ = seq;
    check_epoch_ = epoch;
    next_seq_ = seq + 1;
    born_seq_ = seq;
    born_epoch_ = epoch;
    recovered_ = false;
    if (log_ != nullptr) {
      logged_ = 0;  // the new state counts as logged once its end is (keep at an attach)
      for (proto::LogEntry& e : to_log) log_->Submit(std::move(e), [](absl::Status) {});
      proto::LogEntry end;
      end.set_kind(proto::LogEntry::STATE_END);
      end.set_epoch(epoch);
      end.mutable_record()->set_seq(seq);
      state_open_ = false;
      std::weak_ptr<ShardReplica> self = weak_from_this();
      log_->Submit(std::move(end), [self, seq](absl::Status st) {
        if (auto r = self.lock()) r->NoteLogged(seq, st);
      });
    }
  }
  if (old_peer != 0 && close_peer_) close_peer_(old_peer);
  Log(LogLevel::kInfo, absl::StrCat("shard ", id_, ": took ", state.size(),
                                    " keys from a split at seq ", seq, " of epoch ", epoch));
  return absl::OkStatus();
}

absl::Status ShardReplica::ApplySplitLocked(const proto::ReplicationRecord& r, uint64_t epoch,
                                            const TargetMap& targets) {
  if (absl::Status st = proto::CheckKey(r.key()); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("SPLIT record: ", st.message()));
  }
  if (!r.split_end().empty() && r.split_end() <= r.key()) {
    return absl::InvalidArgumentError("SPLIT record: its range is empty");
  }
  auto it = targets.find(r.split_shard());
  if (it == targets.end() || it->second == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shard ", id_, ": no replica of shard ", r.split_shard(), " to split into on this node"));
  }
  return CopyRangeTo(it->second.get(), r.key(), r.split_end(), r.seq(), epoch);
}

void ShardReplica::HoldWrites(const std::string& why) {
  MutexLock l(&mu_);
  held_ = why;
}

void ShardReplica::ReleaseWrites() {
  MutexLock l(&mu_);
  held_.clear();
}

uint64_t ShardReplica::born_seq() const {
  MutexLock l(&mu_);
  return born_seq_;
}

size_t ShardReplica::PurgeOutsideRange(size_t max) {
  std::string start, end;
  {
    MutexLock l(&mu_);
    if (role_ != Role::kPrimary || split_open_ || !held_.empty()) return 0;
    start = start_;
    end = end_;
  }
  size_t submitted = 0;
  for (const std::string& key : store_->KeysOutside(start, end, max)) {
    absl::StatusOr<KvStore::Mutation> m = store_->PrepareDelete(key);
    if (!m.ok()) continue;  // deleted meanwhile
    Submit(*std::move(m), [](absl::StatusOr<uint64_t>) {});
    ++submitted;
  }
  return submitted;
}

}  // namespace unloadkv::server
