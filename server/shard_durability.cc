// ShardReplica: its log on disk (docs/durability.md): recovery by replay, then logging.
#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/replication_records.h"
#include "server/shard_replica.h"

namespace unloadkv::server {

absl::Status ShardReplica::RecoverAndLog(storage::Disk* disk, const std::string& dir,
                                         FsyncPolicy policy, const Clock* clock,
                                         ReplicaLog::Recovery* recovery, bool own_thread,
                                         const ReplicaLog::Options& log_options) {
  ReplicaLog::Recovery local;
  if (recovery == nullptr) recovery = &local;
  char* const arena = reinterpret_cast<char*>(mr_->address());
  uint64_t last_live = 0, check_seq = 0, check_epoch = 0;  // see state_seq_
  auto replay = [&, this, arena](const proto::LogEntry& e) -> absl::Status {
    if (e.kind() == proto::LogEntry::LIVE) {
      last_live = e.record().seq();
      if (e.record().op() != proto::ReplicationRecord::NOOP) {
        check_seq = e.record().seq();
        check_epoch = e.epoch();
      }
    } else if (e.kind() == proto::LogEntry::STATE_BEGIN) {
      last_live = check_seq = check_epoch = 0;
    }
    switch (e.kind()) {
      case proto::LogEntry::STATE_BEGIN:
        store_->Clear();  // a state follows: nothing before it counts
        return absl::OkStatus();
      case proto::LogEntry::STATE_END:
        return absl::OkStatus();
      default:
        break;
    }
    if (e.record().op() == proto::ReplicationRecord::NOOP) return absl::OkStatus();
    absl::StatusOr<KvStore::Mutation> m = FromRecord(e.record());
    auto bad = [&](absl::string_view why) {
      return absl::DataLossError(absl::StrCat(dir, ": log record ", e.record().seq(), " ", why));
    };
    if (!m.ok()) return bad(m.status().message());
    if (m->op == KvStore::Mutation::Op::kPut) {
      if (e.value().size() != m->size || m->slot.offset + m->size > arena_bytes_) {
        return bad(absl::StrCat("holds ", e.value().size(), " value bytes for a slot of ", m->size,
                                " at offset ", m->slot.offset, " in an arena of ", arena_bytes_));
      }
      std::memcpy(arena + m->slot.offset, e.value().data(), m->size);
    }
    if (absl::Status st = store_->ApplyMirrored(*m); !st.ok()) return bad(st.message());
    return absl::OkStatus();
  };
  absl::StatusOr<std::unique_ptr<ReplicaLog>> log =
      ReplicaLog::Open(disk, dir, log_options, replay, recovery);
  if (!log.ok()) return log.status();
  const uint64_t last = (*log)->last_seq();
  auto writer = std::make_unique<LogWriter>(*std::move(log), policy, clock);
  if (own_thread) writer->Start();
  MutexLock l(&mu_);
  next_seq_ = std::max(next_seq_, last + 1);
  logged_ = last;
  log_ = std::move(writer);
  disk_ = disk;
  log_dir_ = dir;
  const bool whole = recovery->complete;
  state_seq_ = whole ? last_live : 0;
  check_seq_ = whole ? check_seq : 0;
  check_epoch_ = whole ? check_epoch : 0;
  recovered_ = recovery->complete;
  recovered_position_ = {recovery->last_epoch, recovery->last_seq};
  if (!recovery->complete) store_->Clear();  // nothing it may serve
  return absl::OkStatus();
}

bool ShardReplica::recovered() const {
  MutexLock l(&mu_);
  return recovered_ && role_ == Role::kBackup;
}

std::pair<uint64_t, uint64_t> ShardReplica::recovered_position() const {
  MutexLock l(&mu_);
  return recovered_position_;
}

uint64_t ShardReplica::last_seq() const {
  MutexLock l(&mu_);
  return next_seq_ - 1;
}

void ShardReplica::ClearForClaim() {
  MutexLock l(&mu_);
  store_->Clear();
  recovered_ = false;
  if (log_ == nullptr) return;
  LogMarker(proto::LogEntry::STATE_BEGIN, 0);
  LogMarker(proto::LogEntry::STATE_END, next_seq_ - 1);
}

int ShardReplica::PollLog() { return log_ != nullptr ? log_->Poll() : 0; }

bool ShardReplica::LogPending() const { return log_ != nullptr && log_->pending(); }

void ShardReplica::CrashLog() {
  if (log_ != nullptr) log_->Crash();
}

void ShardReplica::CloseLog() {
  if (log_ != nullptr) log_->Stop();  // log_ itself stays: readers may hold its stats
}

void ShardReplica::LogMarker(proto::LogEntry::Kind kind, uint64_t seq) {
  proto::LogEntry e;
  e.set_kind(kind);
  e.set_epoch(epoch_);
  e.mutable_record()->set_seq(seq);
  state_open_ = kind == proto::LogEntry::STATE_BEGIN;
  log_->Submit(std::move(e), [](absl::Status) {});  // a failure shows in what follows it
}

proto::LogEntry ShardReplica::EntryOf(const KvStore::Mutation& m, uint64_t seq,
                                      proto::LogEntry::Kind kind) {
  proto::LogEntry entry;
  entry.set_kind(kind);
  entry.set_epoch(epoch_);
  *entry.mutable_record() = ToRecord(m, seq);
  if (m.op == KvStore::Mutation::Op::kPut) {
    entry.set_value(reinterpret_cast<const char*>(mr_->address() + m.slot.offset), m.size);
  }
  return entry;
}

}  // namespace unloadkv::server
