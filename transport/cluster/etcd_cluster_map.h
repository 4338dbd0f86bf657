// ClusterMap on a real etcd 3.4, through its v3 JSON gateway (etcd_gateway.h). Keys and
// records as in map_records.h; every shard change is one etcd transaction comparing the
// shard key's mod_revision (and, for failover, that the dead node's key is gone); nodes are
// keys under etcd leases; watches are etcd watch streams on the cluster's prefix, reopened
// from the last revision seen when etcd restarts.
#ifndef UNLOADKV_TRANSPORT_CLUSTER_ETCD_CLUSTER_MAP_H_
#define UNLOADKV_TRANSPORT_CLUSTER_ETCD_CLUSTER_MAP_H_

#include <memory>
#include <string>

#include "transport/cluster/cluster_map.h"
#include "transport/cluster/etcd_gateway.h"

namespace unloadkv::cluster {

// Per-request timeout of every etcd call.
inline constexpr absl::Duration kEtcdRequestTimeout = absl::Seconds(2);

class EtcdClusterMap : public ClusterMap {
 public:
  // `endpoints`: the --etcd flag ("HOST:PORT[,HOST:PORT...]"); `cluster`: the --cluster name;
  // `security`: TLS and etcd user (EtcdGateway::Create checks them and reads the files).
  // Does not contact etcd (the first call does).
  static absl::StatusOr<std::unique_ptr<EtcdClusterMap>> Open(
      absl::string_view endpoints, absl::string_view cluster,
      const EtcdSecurity& security = EtcdSecurity());

  std::string Describe() const override;
  absl::StatusOr<ClusterView> Read() override;
  absl::StatusOr<int64_t> Create(int replicas, const std::vector<ShardInfo>& shards) override;
  absl::StatusOr<int64_t> SplitShard(const ShardInfo& left, const ShardInfo& right,
                                     const ClusterView& read) override;
  absl::StatusOr<int64_t> MergeShards(const ShardInfo& merged, uint32_t right_id,
                                      const ClusterView& read) override;
  absl::StatusOr<int64_t> UpdateShard(const ShardInfo& shard,
                                      const std::vector<std::string>& absent_nodes) override;
  absl::StatusOr<int64_t> SetPolicy(const PlacementPolicy& policy,
                                    const ClusterView& read) override;
  absl::Status PublishLoad(const ShardLoad& load, LeaseId lease) override;
  absl::StatusOr<bool> Campaign(const std::string& node, LeaseId lease) override;
  absl::StatusOr<LeaseId> GrantLease(absl::Duration ttl) override;
  absl::StatusOr<absl::Duration> KeepAlive(LeaseId lease) override;
  absl::Status RevokeLease(LeaseId lease) override;
  absl::Status RegisterNode(const NodeInfo& node, LeaseId lease) override;
  absl::StatusOr<std::unique_ptr<MapWatch>> Watch(
      std::function<void(int64_t revision)> on_change) override;

 private:
  EtcdClusterMap(std::unique_ptr<EtcdGateway> gateway, std::string cluster)
      : gateway_(std::move(gateway)), cluster_(std::move(cluster)) {}
  // Prefixes etcd's error with the cluster's description.
  absl::Status Annotate(const absl::Status& s) const;

  const std::unique_ptr<EtcdGateway> gateway_;
  const std::string cluster_;
};

}  // namespace unloadkv::cluster

#endif  // UNLOADKV_TRANSPORT_CLUSTER_ETCD_CLUSTER_MAP_H_
