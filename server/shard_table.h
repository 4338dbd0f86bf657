// The shard replicas one node holds, by shard id. A single node (no --etcd) holds one: shard
// 0, covering every key, primary at epoch 0.
//
// Thread-safety: every method may be called from any thread; replicas are shared, so a
// request that found one keeps it alive while the table drops it.
#ifndef UNLOADKV_SERVER_SHARD_TABLE_H_
#define UNLOADKV_SERVER_SHARD_TABLE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "server/shard_replica.h"
#include "transport/base/mutex.h"

namespace unloadkv::server {

class ShardTable {
 public:
  using Factory = std::function<absl::StatusOr<std::shared_ptr<ShardReplica>>(uint32_t shard)>;
  explicit ShardTable(Factory create) : create_(std::move(create)) {}

  std::shared_ptr<ShardReplica> Get(uint32_t shard) const;
  // The replica of `shard`, created (empty backup) when absent.
  absl::StatusOr<std::shared_ptr<ShardReplica>> GetOrCreate(uint32_t shard);
  // The replica serving `key` as primary; nullptr when this node is not its primary.
  std::shared_ptr<ShardReplica> PrimaryFor(absl::string_view key) const;
  // Drops the replica (it steps down and closes its log first). Returns it (or nullptr).
  std::shared_ptr<ShardReplica> Remove(uint32_t shard, const std::string& why);
  std::vector<std::shared_ptr<ShardReplica>> All() const;
  // What the logs of removed replicas counted (so that the node's totals never go down).
  LogWriter::Stats retired_log_stats() const;

 private:
  const Factory create_;
  mutable Mutex mu_;
  std::map<uint32_t, std::shared_ptr<ShardReplica>> replicas_ ABSL_GUARDED_BY(mu_);
  LogWriter::Stats retired_ ABSL_GUARDED_BY(mu_);
};

}  // namespace unloadkv::server

#endif  // UNLOADKV_SERVER_SHARD_TABLE_H_
