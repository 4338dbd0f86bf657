// How the cluster map is laid out in a revisioned key-value store (etcd or the in-memory
// map): the keys, and the records' encoding (protobuf JSON of proto/cluster.proto). Shared by
// both ClusterMap backends so that they store byte-identical data.
#ifndef UNLOADKV_TRANSPORT_CLUSTER_MAP_RECORDS_H_
#define UNLOADKV_TRANSPORT_CLUSTER_MAP_RECORDS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "transport/cluster/shard_map.h"

namespace unloadkv::cluster {

// "/unloadkv/<cluster>/": every key of one cluster starts with it.
std::string ClusterPrefix(absl::string_view cluster);
std::string ConfigKey(absl::string_view cluster);
std::string NodesPrefix(absl::string_view cluster);
std::string NodeKey(absl::string_view cluster, absl::string_view node);
std::string ShardsPrefix(absl::string_view cluster);
std::string ShardKey(absl::string_view cluster, uint32_t id);
std::string LoadsPrefix(absl::string_view cluster);
std::string LoadKey(absl::string_view cluster, uint32_t shard);
std::string PlacerKey(absl::string_view cluster);
// The smallest key greater than every key starting with `prefix` (etcd's range_end).
std::string PrefixEnd(absl::string_view prefix);

std::string EncodeConfig(int shards, int replicas, const PlacementPolicy& policy);
std::string EncodeLoad(const ShardLoad& load);
std::string EncodePlacer(absl::string_view node);
// The node a stored PlacerRecord names; DATA_LOSS when it does not parse.
absl::StatusOr<std::string> DecodePlacer(absl::string_view key, absl::string_view value);
std::string EncodeNode(const NodeInfo& node);
std::string EncodeShard(const ShardInfo& shard);

// Whether `left` and `right` split the record of left.id in `read` in two (same start and
// end together, a new unused id, below kMaxShards, room for one more shard). INVALID_ARGUMENT
// saying why not.
absl::Status CheckSplit(const ClusterView& read, const ShardInfo& left, const ShardInfo& right);

// Whether `merged` (shard merged.id's record after a merge) covers exactly the ranges of
// shards merged.id and `right_id` in `read`, the second starting where the first ends.
// INVALID_ARGUMENT saying why not.
absl::Status CheckMerge(const ClusterView& read, const ShardInfo& merged, uint32_t right_id);

// One stored key as read from the store.
struct StoredKey {
  std::string key;
  std::string value;
  int64_t mod_revision = 0;
};

// Builds the view from every key under ClusterPrefix(cluster), read at `revision`.
// NOT_FOUND when there is no config (the message says how to create the map); DATA_LOSS when
// a record does not parse or the shards do not cover the key space (naming the key).
absl::StatusOr<ClusterView> AssembleView(absl::string_view cluster, int64_t revision,
                                         const std::vector<StoredKey>& keys);

}  // namespace unloadkv::cluster

#endif  // UNLOADKV_TRANSPORT_CLUSTER_MAP_RECORDS_H_
