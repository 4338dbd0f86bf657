// ClusterNode: what automatic placement needs of every node (docs/cluster.md, "Automatic
// placement"): the sizes of the shards it is primary of. The decisions are the placer's
// (server/placer.h).
#include "server/cluster_node.h"

namespace unloadkv::server {

void ClusterNode::PublishLoads(const cluster::ClusterView& view) {
  if (!view.policy.auto_rebalance || clock_->Now() < next_load_) return;
  next_load_ = clock_->Now() + options_.load_interval;
  for (const cluster::ShardInfo& s : view.shard_list) {
    if (s.primary != name()) continue;
    std::shared_ptr<ShardReplica> local = shards_->Get(s.id);
    if (local == nullptr || local->role() != ShardReplica::Role::kPrimary) continue;
    const KvStore::Size size = local->store().Measure();
    cluster::ShardLoad load{s.id, name(), s.epoch, size.keys, size.live_bytes, size.median_key};
    if (options_.metrics != nullptr) options_.metrics->SetLiveBytes(s.id, size.live_bytes);
    // Written only when the map holds another figure (each write wakes every node's watch).
    auto stored = view.loads.find(s.id);
    const bool same = stored != view.loads.end() && stored->second.node == load.node &&
                      stored->second.epoch == load.epoch && stored->second.keys == load.keys &&
                      stored->second.live_bytes == load.live_bytes &&
                      stored->second.median_key == load.median_key;
    if (!same && !map_->PublishLoad(load, lease_.load()).ok()) NoteMapError();
  }
}

}  // namespace unloadkv::server
