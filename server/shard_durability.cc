// ShardReplica: its log on disk (docs/durability.md): recovery by replay, then logging.
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/replication_records.h"
#include "server/shard_replica.h"

namespace unloadkv::server {

absl::Status ShardReplica::RecoverAndLog(storage::Disk* disk, const std::string& dir,
                                         FsyncPolicy policy, const Clock* clock,
                                         ReplicaLog::Recovery* recovery) {
  char* const arena = reinterpret_cast<char*>(mr_->address());
  auto replay = [this, arena, &dir](const proto::LogEntry& e) -> absl::Status {
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
      ReplicaLog::Open(disk, dir, ReplicaLog::Options(), replay, recovery);
  if (!log.ok()) return log.status();
  const uint64_t last = (*log)->last_seq();
  auto writer = std::make_unique<LogWriter>(*std::move(log), policy, clock);
  writer->Start();
  MutexLock l(&mu_);
  next_seq_ = std::max(next_seq_, last + 1);
  logged_ = last;
  log_ = std::move(writer);
  return absl::OkStatus();
}

}  // namespace unloadkv::server
