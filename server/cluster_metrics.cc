#include "server/cluster_metrics.h"

#include <set>

#include "absl/strings/str_cat.h"

namespace unloadkv::server {

ClusterMetrics::ClusterMetrics(std::shared_ptr<prometheus::Registry> registry) {
  writes_ = &prometheus::BuildCounter()
                 .Name("unloadkv_replication_value_writes_total")
                 .Help("Value writes this primary made into a backup's arena, by engine path")
                 .Register(*registry);
  in_flight_ = &prometheus::BuildGauge()
                    .Name("unloadkv_replication_records_in_flight")
                    .Help("Replication requests queued or unanswered on the link to a backup")
                    .Register(*registry);
  requests_ = &prometheus::BuildCounter()
                   .Name("unloadkv_replication_requests_total")
                   .Help(
                       "REPLICATE requests this primary sent to a backup (each carries one or "
                       "more records)")
                   .Register(*registry);
  epoch_ = &prometheus::BuildGauge()
                .Name("unloadkv_shard_epoch")
                .Help("Epoch of each shard this node holds a replica of")
                .Register(*registry);
  role_ = &prometheus::BuildGauge()
               .Name("unloadkv_shard_role")
               .Help("1 for the role this node holds in each shard (primary or backup)")
               .Register(*registry);
  replicas_ = &prometheus::BuildGauge()
                   .Name("unloadkv_shard_replicas")
                   .Help(
                       "On a shard's primary: replicas in its group (primary and backups) per "
                       "the cluster map; 0 on other nodes")
                   .Register(*registry);
  wanted_ = &prometheus::BuildGauge()
                 .Name("unloadkv_shard_replicas_wanted")
                 .Help("On a shard's primary: the configured group size; 0 on other nodes")
                 .Register(*registry);
  transfer_bytes_ = &prometheus::BuildGauge()
                         .Name("unloadkv_transfer_bytes")
                         .Help(
                             "Value bytes a state transfer in flight from this primary sends "
                             "(a node joining, a move, a rejoin), by shard and backup")
                         .Register(*registry);
  transfer_sent_ = &prometheus::BuildGauge()
                        .Name("unloadkv_transfer_sent_bytes")
                        .Help("Value bytes of a state transfer in flight the joiner acknowledged")
                        .Register(*registry);
  transfer_seconds_ = &prometheus::BuildGauge()
                           .Name("unloadkv_transfer_seconds")
                           .Help("Seconds since a state transfer in flight began")
                           .Register(*registry);
  state_ = &prometheus::BuildGauge()
                .Name("unloadkv_shard_state")
                .Help(
                    "1 for each shard's state in the cluster map as this node last read it "
                    "(serving, under-replicated, primary-down, no-primary), 0 for the others")
                .Register(*registry);
  catchup_bytes_ = &prometheus::BuildCounter()
                        .Name("unloadkv_catchup_bytes_total")
                        .Help("Value bytes this node sent to joining backups by state transfer")
                        .Register(*registry)
                        .Add({});
  failovers_ = &prometheus::BuildCounter()
                    .Name("unloadkv_failovers_total")
                    .Help("Shards this node took over as primary from a failed primary")
                    .Register(*registry)
                    .Add({});
  map_errors_ = &prometheus::BuildCounter()
                     .Name("unloadkv_cluster_map_errors_total")
                     .Help("Cluster map reads, keepalives and transactions that failed")
                     .Register(*registry)
                     .Add({});
  lease_valid_ = &prometheus::BuildGauge()
                      .Name("unloadkv_lease_valid")
                      .Help("1 while this node's lease allows serving reads without a barrier")
                      .Register(*registry)
                      .Add({});
  RegisterPlacement(*registry);
}

void ClusterMetrics::RegisterPlacement(prometheus::Registry& registry) {
  live_bytes_ = &prometheus::BuildGauge()
                     .Name("unloadkv_shard_live_bytes")
                     .Help("On a shard's primary: the live value bytes it last measured")
                     .Register(registry);
  placement_changes_ = &prometheus::BuildCounter()
                            .Name("unloadkv_placement_changes_total")
                            .Help(
                                "Placement changes this node made as the placer, by kind (move, "
                                "split, trim) and outcome (done, failed)")
                            .Register(registry);
  placer_ = &prometheus::BuildGauge()
                 .Name("unloadkv_placer")
                 .Help("1 while this node makes the cluster's automatic placement decisions")
                 .Register(registry)
                 .Add({});
}

void ClusterMetrics::SetLiveBytes(uint32_t shard, uint64_t bytes) {
  live_bytes_->Add({{"shard", absl::StrCat(shard)}}).Set(static_cast<double>(bytes));
}

void ClusterMetrics::AddPlacementChange(const std::string& kind, bool done) {
  placement_changes_->Add({{"kind", kind}, {"outcome", done ? "done" : "failed"}}).Increment();
}

LinkMetrics* ClusterMetrics::ForBackup(const std::string& node) {
  MutexLock l(&mu_);
  std::unique_ptr<LinkMetrics>& m = links_[node];
  if (m == nullptr) {
    m = std::make_unique<LinkMetrics>();
    m->writes[static_cast<int>(engine::Path::kOffload)] =
        &writes_->Add({{"backup", node}, {"path", "offload"}});
    m->writes[static_cast<int>(engine::Path::kUnload)] =
        &writes_->Add({{"backup", node}, {"path", "unload"}});
    m->in_flight = &in_flight_->Add({{"backup", node}});
    m->requests = &requests_->Add({{"backup", node}});
  }
  return m.get();
}

void ClusterMetrics::SetShard(uint32_t shard, const std::string& role, uint64_t epoch, int replicas,
                              int wanted) {
  const std::string id = absl::StrCat(shard);
  replicas_->Add({{"shard", id}}).Set(replicas);
  wanted_->Add({{"shard", id}}).Set(wanted);
  epoch_->Add({{"shard", id}}).Set(static_cast<double>(epoch));
  role_->Add({{"shard", id}, {"role", "primary"}}).Set(role == "primary" ? 1 : 0);
  role_->Add({{"shard", id}, {"role", "backup"}}).Set(role == "backup" ? 1 : 0);
}

void ClusterMetrics::SetShardState(uint32_t shard, cluster::ShardState state) {
  const std::string id = absl::StrCat(shard);
  for (cluster::ShardState s :
       {cluster::ShardState::kServing, cluster::ShardState::kUnderReplicated,
        cluster::ShardState::kPrimaryDown, cluster::ShardState::kNoPrimary}) {
    state_->Add({{"shard", id}, {"state", std::string(cluster::ShardStateName(s))}})
        .Set(s == state ? 1 : 0);
  }
}

void ClusterMetrics::SetTransfers(uint32_t shard, const std::vector<TransferFigures>& transfers) {
  const std::string id = absl::StrCat(shard);
  MutexLock l(&mu_);
  std::set<std::string>& shown = transfers_shown_[shard];
  std::set<std::string> now;
  for (const TransferFigures& t : transfers) {
    const prometheus::Labels labels = {{"shard", id}, {"backup", t.backup}};
    transfer_bytes_->Add(labels).Set(static_cast<double>(t.bytes));
    transfer_sent_->Add(labels).Set(static_cast<double>(t.sent_bytes));
    transfer_seconds_->Add(labels).Set(t.seconds);
    now.insert(t.backup);
  }
  for (const std::string& gone : shown) {
    if (now.count(gone) > 0) continue;
    const prometheus::Labels labels = {{"shard", id}, {"backup", gone}};
    transfer_bytes_->Remove(&transfer_bytes_->Add(labels));
    transfer_sent_->Remove(&transfer_sent_->Add(labels));
    transfer_seconds_->Remove(&transfer_seconds_->Add(labels));
  }
  shown = std::move(now);
}

}  // namespace unloadkv::server
