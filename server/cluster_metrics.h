// A cluster node's Prometheus metrics, next to ServerMetrics in one registry:
//   unloadkv_replication_value_writes_total{backup,path}  value writes this primary made into
//                                                          a backup's arena, by engine path
//   unloadkv_replication_records_in_flight{backup}         replication requests queued or
//                                                          unanswered on the link to a backup
//   unloadkv_catchup_bytes_total                           value bytes sent by state transfer
//   unloadkv_failovers_total                               shards this node took over
//   unloadkv_shard_epoch{shard}                            epoch of each shard held here
//   unloadkv_shard_role{shard,role}                        1 for the role held (primary, backup)
//   unloadkv_shard_replicas{shard}                         on the primary: replicas in the group
//                                                          (primary and backups) per the map; 0
//                                                          on other nodes
//   unloadkv_shard_replicas_wanted{shard}                  on the primary: the configured group
//                                                          size; 0 on other nodes
//   unloadkv_shard_state{shard,state}                      1 for each shard's state in the map as
//                                                          this node last read it (every node
//                                                          reports every shard), 0 for the others
//   unloadkv_transfer_bytes{shard,backup}             on a primary, while a state transfer to
//   unloadkv_transfer_sent_bytes{shard,backup}        `backup` is in flight: its value bytes,
//   unloadkv_transfer_seconds{shard,backup}           those acknowledged, its age (the series
//                                                      go when it caught up)
//   unloadkv_lease_valid                                   1 while the node may serve reads
//                                                          locally (docs/cluster.md)
//   unloadkv_cluster_map_errors_total                      map reads/transactions that failed
//   unloadkv_shard_live_bytes{shard}                       on a shard's primary: the live value
//                                                          bytes it last measured (placement)
//   unloadkv_placer                                        1 while this node is the placer
//   unloadkv_placement_changes_total{kind,outcome}         changes the placer made here: kind
//                                                          move, split or trim; outcome done or
//                                                          failed (undone)
// Labels are node names and shard ids: bounded by the cluster's size.
#ifndef UNLOADKV_SERVER_CLUSTER_METRICS_H_
#define UNLOADKV_SERVER_CLUSTER_METRICS_H_

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "transport/base/mutex.h"
#include "transport/cluster/shard_map.h"
#include "transport/engine/path.h"

namespace unloadkv::server {

// The series of one backup link; the link updates them directly.
struct LinkMetrics {
  prometheus::Counter* writes[2] = {nullptr, nullptr};  // by engine::Path
  prometheus::Gauge* in_flight = nullptr;
  prometheus::Counter* requests = nullptr;  // REPLICATE requests sent (one or more records each)
};

// Thread-safe.
class ClusterMetrics {
 public:
  explicit ClusterMetrics(std::shared_ptr<prometheus::Registry> registry);

  // The series of backup `node` (created on first use; they outlive every link).
  LinkMetrics* ForBackup(const std::string& node);
  void AddCatchupBytes(uint64_t bytes) { catchup_bytes_->Increment(static_cast<double>(bytes)); }
  void AddFailovers(uint64_t n) { failovers_->Increment(static_cast<double>(n)); }
  void AddMapErrors(uint64_t n) { map_errors_->Increment(static_cast<double>(n)); }
  // `role`: "primary", "backup" or "" (not held: its series go to 0). `replicas` and `wanted`:
  // the group's size and the configured one, as the primary sees them (0 and 0 elsewhere).
  void SetShard(uint32_t shard, const std::string& role, uint64_t epoch, int replicas = 0,
                int wanted = 0);
  void SetLeaseValid(bool valid) { lease_valid_->Set(valid ? 1 : 0); }
  void SetShardState(uint32_t shard, cluster::ShardState state);
  // The state transfers in flight from this node's primary of `shard` (none: its series go).
  struct TransferFigures {
    std::string backup;
    uint64_t bytes = 0, sent_bytes = 0;
    double seconds = 0;
  };
  void SetTransfers(uint32_t shard, const std::vector<TransferFigures>& transfers);
  // Automatic placement (server/placer.h).
  void SetLiveBytes(uint32_t shard, uint64_t bytes);
  void SetPlacer(bool placer) { placer_->Set(placer ? 1 : 0); }
  void AddPlacementChange(const std::string& kind, bool done);

 private:
  Mutex mu_;
  prometheus::Family<prometheus::Counter>* writes_;
  prometheus::Family<prometheus::Gauge>* in_flight_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Family<prometheus::Gauge>* epoch_;
  prometheus::Family<prometheus::Gauge>* role_;
  prometheus::Family<prometheus::Gauge>* replicas_;
  prometheus::Family<prometheus::Gauge>* wanted_;
  prometheus::Family<prometheus::Gauge>* state_;
  prometheus::Family<prometheus::Gauge>* transfer_bytes_;
  prometheus::Family<prometheus::Gauge>* transfer_sent_;
  prometheus::Family<prometheus::Gauge>* transfer_seconds_;
  std::map<uint32_t, std::set<std::string>> transfers_shown_ ABSL_GUARDED_BY(mu_);
  prometheus::Counter* catchup_bytes_;
  prometheus::Counter* failovers_;
  prometheus::Counter* map_errors_;
  prometheus::Gauge* lease_valid_;
  void RegisterPlacement(prometheus::Registry& registry);
  prometheus::Family<prometheus::Gauge>* live_bytes_;
  prometheus::Family<prometheus::Counter>* placement_changes_;
  prometheus::Gauge* placer_;
  std::map<std::string, std::unique_ptr<LinkMetrics>> links_ ABSL_GUARDED_BY(mu_);
};

}  // namespace unloadkv::server

#endif  // UNLOADKV_SERVER_CLUSTER_METRICS_H_
