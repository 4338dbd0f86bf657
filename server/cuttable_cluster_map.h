// Fault injection for tests (kvserver --fault_signals): a ClusterMap that fails every call
// with UNAVAILABLE, and silences its watch, while `cut` is set, as if the network between this
// node and the coordination service were down. See docs/cluster.md ("Fault matrix") for what
// the node-level cut models and what it does not.
#ifndef UNLOADKV_SERVER_CUTTABLE_CLUSTER_MAP_H_
#define UNLOADKV_SERVER_CUTTABLE_CLUSTER_MAP_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "transport/cluster/cluster_map.h"

namespace unloadkv::server {

class CuttableClusterMap : public cluster::ClusterMap {
 public:
  // `inner` and `cut` must outlive this map.
  CuttableClusterMap(cluster::ClusterMap* inner, const std::atomic<bool>* cut)
      : inner_(inner), cut_(cut) {}

  std::string Describe() const override { return inner_->Describe(); }
  absl::StatusOr<cluster::ClusterView> Read() override {
    if (absl::Status st = Check(); !st.ok()) return st;
    return inner_->Read();
  }
  absl::StatusOr<int64_t> Create(int replicas,
                                 const std::vector<cluster::ShardInfo>& shards) override {
    if (absl::Status st = Check(); !st.ok()) return st;
    return inner_->Create(replicas, shards);
  }
  absl::StatusOr<int64_t> UpdateShard(const cluster::ShardInfo& shard,
                                      const std::vector<std::string>& absent_nodes) override {
    if (absl::Status st = Check(); !st.ok()) return st;
    return inner_->UpdateShard(shard, absent_nodes);
  }
  absl::StatusOr<int64_t> SplitShard(const cluster::ShardInfo& left,
                                     const cluster::ShardInfo& right,
                                     const cluster::ClusterView& read) override {
    if (absl::Status st = Check(); !st.ok()) return st;
    return inner_->SplitShard(left, right, read);
  }
  absl::StatusOr<int64_t> MergeShards(const cluster::ShardInfo& merged, uint32_t right_id,
                                      const cluster::ClusterView& read) override {
    if (absl::Status st = Check(); !st.ok()) return st;
    return inner_->MergeShards(merged, right_id, read);
  }
  absl::StatusOr<int64_t> SetPolicy(const cluster::PlacementPolicy& policy,
                                    const cluster::ClusterView& read) override {
    if (absl::Status st = Check(); !st.ok()) return st;
    return inner_->SetPolicy(policy, read);
  }
  absl::Status PublishLoad(const cluster::ShardLoad& load, cluster::LeaseId lease) override {
    if (absl::Status st = Check(); !st.ok()) return st;
    return inner_->PublishLoad(load, lease);
  }
  absl::StatusOr<bool> Campaign(const std::string& node, cluster::LeaseId lease) override {
    if (absl::Status st = Check(); !st.ok()) return st;
    return inner_->Campaign(node, lease);
  }
  absl::StatusOr<cluster::LeaseId> GrantLease(absl::Duration ttl) override {
    if (absl::Status st = Check(); !st.ok()) return st;
    return inner_->GrantLease(ttl);
  }
  absl::StatusOr<absl::Duration> KeepAlive(cluster::LeaseId lease) override {
    if (absl::Status st = Check(); !st.ok()) return st;
    return inner_->KeepAlive(lease);
  }
  absl::Status RevokeLease(cluster::LeaseId lease) override {
    if (absl::Status st = Check(); !st.ok()) return st;
    return inner_->RevokeLease(lease);
  }
  absl::Status RegisterNode(const cluster::NodeInfo& node, cluster::LeaseId lease) override {
    if (absl::Status st = Check(); !st.ok()) return st;
    return inner_->RegisterNode(node, lease);
  }
  absl::StatusOr<std::unique_ptr<cluster::MapWatch>> Watch(
      std::function<void(int64_t revision)> on_change) override {
    if (absl::Status st = Check(); !st.ok()) return st;
    const std::atomic<bool>* cut = cut_;
    return inner_->Watch([cut, on_change = std::move(on_change)](int64_t revision) {
      if (!cut->load()) on_change(revision);
    });
  }

 private:
  absl::Status Check() const {
    if (!cut_->load()) return absl::OkStatus();
    return absl::UnavailableError(absl::StrCat(Describe(), ": unreachable (network cut injected)"));
  }

  cluster::ClusterMap* const inner_;
  const std::atomic<bool>* const cut_;
};

}  // namespace unloadkv::server

#endif  // UNLOADKV_SERVER_CUTTABLE_CLUSTER_MAP_H_
