#include "server/shard_table.h"

namespace unloadkv::server {

std::shared_ptr<ShardReplica> ShardTable::Get(uint32_t shard) const {
  MutexLock l(&mu_);
  auto it = replicas_.find(shard);
  return it == replicas_.end() ? nullptr : it->second;
}

absl::StatusOr<std::shared_ptr<ShardReplica>> ShardTable::GetOrCreate(uint32_t shard) {
  if (auto r = Get(shard)) return r;
  absl::StatusOr<std::shared_ptr<ShardReplica>> made = create_(shard);
  if (!made.ok()) return made.status();
  MutexLock l(&mu_);
  auto [it, inserted] = replicas_.emplace(shard, *made);
  return it->second;  // another thread's, if it won the race
}

std::shared_ptr<ShardReplica> ShardTable::PrimaryFor(absl::string_view key) const {
  MutexLock l(&mu_);
  for (const auto& [id, r] : replicas_) {
    if (r->ServesKey(key)) return r;
  }
  return nullptr;
}

std::shared_ptr<ShardReplica> ShardTable::Remove(uint32_t shard, const std::string& why) {
  std::shared_ptr<ShardReplica> r;
  {
    MutexLock l(&mu_);
    auto it = replicas_.find(shard);
    if (it == replicas_.end()) return nullptr;
    r = std::move(it->second);
    replicas_.erase(it);
  }
  r->StepDown(why);
  r->CloseLog();  // a replica created for the shard later opens the same log
  if (const LogWriter* log = r->log()) {
    const LogWriter::Stats st = log->stats();
    MutexLock l(&mu_);
    retired_ += st;
  }
  return r;
}

LogWriter::Stats ShardTable::retired_log_stats() const {
  MutexLock l(&mu_);
  return retired_;
}

std::vector<std::shared_ptr<ShardReplica>> ShardTable::All() const {
  MutexLock l(&mu_);
  std::vector<std::shared_ptr<ShardReplica>> out;
  for (const auto& [id, r] : replicas_) out.push_back(r);
  return out;
}

}  // namespace unloadkv::server
