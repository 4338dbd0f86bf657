#include "transport/cluster/map_records.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/util/json_util.h"
#include "proto/cluster.pb.h"

namespace unloadkv::cluster {
namespace {

std::string ToJson(const google::protobuf::Message& m) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string out;
  // Printing a well-formed message cannot fail.
  (void)google::protobuf::util::MessageToJsonString(m, &out, options);
  return out;
}

absl::Status FromJson(absl::string_view key, absl::string_view json, google::protobuf::Message* m) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;  // records written by a newer version still read
  const auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), m, options);
  if (!status.ok()) {
    return absl::DataLossError(
        absl::StrCat("cluster map record ", key, " does not parse: ", status.ToString()));
  }
  return absl::OkStatus();
}

}  // namespace

std::string ClusterPrefix(absl::string_view cluster) {
  return absl::StrCat("/unloadkv/", cluster, "/");
}
std::string ConfigKey(absl::string_view cluster) {
  return absl::StrCat(ClusterPrefix(cluster), "config");
}
std::string NodesPrefix(absl::string_view cluster) {
  return absl::StrCat(ClusterPrefix(cluster), "nodes/");
}
std::string NodeKey(absl::string_view cluster, absl::string_view node) {
  return absl::StrCat(NodesPrefix(cluster), node);
}
std::string ShardsPrefix(absl::string_view cluster) {
  return absl::StrCat(ClusterPrefix(cluster), "shards/");
}
std::string ShardKey(absl::string_view cluster, uint32_t id) {
  return absl::StrFormat("%s%08u", ShardsPrefix(cluster), id);
}

std::string LoadsPrefix(absl::string_view cluster) {
  return absl::StrCat(ClusterPrefix(cluster), "loads/");
}
std::string LoadKey(absl::string_view cluster, uint32_t shard) {
  return absl::StrFormat("%s%08u", LoadsPrefix(cluster), shard);
}
std::string PlacerKey(absl::string_view cluster) {
  return absl::StrCat(ClusterPrefix(cluster), "placer");
}

std::string PrefixEnd(absl::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) < 0xff) {
      end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // etcd: "\0" as range_end means "every key >= key"
}

std::string EncodeConfig(int shards, int replicas, const PlacementPolicy& policy) {
  ClusterConfig c;
  c.set_shards(static_cast<uint32_t>(shards));
  c.set_replicas(static_cast<uint32_t>(replicas));
  c.set_auto_rebalance(policy.auto_rebalance);
  c.set_max_shard_bytes(policy.max_shard_bytes);
  return ToJson(c);
}

std::string EncodeLoad(const ShardLoad& load) {
  ShardLoadRecord r;
  r.set_node(load.node);
  r.set_epoch(load.epoch);
  r.set_keys(load.keys);
  r.set_live_bytes(load.live_bytes);
  r.set_median_key(load.median_key);
  return ToJson(r);
}

std::string EncodePlacer(absl::string_view node) {
  PlacerRecord r;
  r.set_node(std::string(node));
  return ToJson(r);
}

absl::StatusOr<std::string> DecodePlacer(absl::string_view key, absl::string_view value) {
  PlacerRecord r;
  if (absl::Status s = FromJson(key, value, &r); !s.ok()) return s;
  return r.node();
}

std::string EncodeNode(const NodeInfo& node) {
  NodeRecord r;
  r.set_rpc_address(node.rpc_address);
  r.set_metrics_address(node.metrics_address);
  for (const auto& [shard, at] : node.logs) {
    LogPosition* p = r.add_logs();
    p->set_shard(shard);
    p->set_epoch(at.first);
    p->set_seq(at.second);
  }
  return ToJson(r);
}

std::string EncodeShard(const ShardInfo& shard) {
  ShardRecord r;
  r.set_id(shard.id);
  r.set_start(shard.start);
  r.set_end(shard.end);
  r.set_epoch(shard.epoch);
  r.set_primary(shard.primary);
  for (const std::string& b : shard.backups) r.add_backups(b);
  for (const std::string& j : shard.joining) r.add_joining(j);
  r.set_durable(shard.durable);
  r.set_handover_to(shard.handover_to);
  r.set_split_at(shard.split_at);
  r.set_split_id(shard.split_id);
  r.set_merge_with(shard.merge_with);
  return ToJson(r);
}

absl::Status CheckSplit(const ClusterView& read, const ShardInfo& left, const ShardInfo& right) {
  const ShardInfo* was = read.ShardById(left.id);
  if (was == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("shard ", left.id, " is not in the map"));
  }
  if (read.ShardById(right.id) != nullptr || right.id >= static_cast<uint32_t>(kMaxShards)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard id ", right.id, " is taken or over ", kMaxShards - 1));
  }
  if (read.shards >= kMaxShards) {
    return absl::InvalidArgumentError(absl::StrCat("the cluster has ", kMaxShards, " shards"));
  }
  const bool fits = left.start == was->start && right.end == was->end && left.end == right.start &&
                    !right.start.empty() && right.start > was->start &&
                    (was->end.empty() || right.start < was->end);
  if (!fits) {
    return absl::InvalidArgumentError(absl::StrCat("shards ", left.id, " and ", right.id,
                                                   " do not split shard ", left.id,
                                                   "'s range in two at a key inside it"));
  }
  return absl::OkStatus();
}

absl::Status CheckMerge(const ClusterView& read, const ShardInfo& merged, uint32_t right_id) {
  const ShardInfo* left = read.ShardById(merged.id);
  const ShardInfo* right = read.ShardById(right_id);
  if (left == nullptr || right == nullptr || right_id == merged.id) {
    return absl::InvalidArgumentError(
        absl::StrCat("shards ", merged.id, " and ", right_id, " are not two shards of the map"));
  }
  if (left->end.empty() || left->end != right->start || merged.start != left->start ||
      merged.end != right->end) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard ", right_id, " does not start where shard ", merged.id,
                     " ends, or the merged range is not both of theirs"));
  }
  return absl::OkStatus();
}

namespace {

absl::Status ReadConfig(const StoredKey& k, ClusterView* view) {
  ClusterConfig c;
  if (absl::Status s = FromJson(k.key, k.value, &c); !s.ok()) return s;
  if (c.shards() < 1 || c.shards() > kMaxShards || c.replicas() < 1 ||
      c.replicas() > kMaxReplicas) {
    return absl::DataLossError(
        absl::StrCat("cluster map record ", k.key, " holds an impossible config: ", k.value));
  }
  view->shards = static_cast<int>(c.shards());
  view->replicas = static_cast<int>(c.replicas());
  view->policy.auto_rebalance = c.auto_rebalance();
  view->policy.max_shard_bytes = c.max_shard_bytes();
  view->config_revision = k.mod_revision;
  return absl::OkStatus();
}

absl::Status ReadNode(const StoredKey& k, absl::string_view name, ClusterView* view) {
  NodeRecord r;
  if (absl::Status s = FromJson(k.key, k.value, &r); !s.ok()) return s;
  NodeInfo n;
  n.name = std::string(name);
  n.rpc_address = r.rpc_address();
  n.metrics_address = r.metrics_address();
  for (const LogPosition& p : r.logs()) n.logs[p.shard()] = {p.epoch(), p.seq()};
  view->nodes[n.name] = std::move(n);
  return absl::OkStatus();
}

absl::Status ReadShard(absl::string_view cluster, const StoredKey& k, ClusterView* view) {
  ShardRecord r;
  if (absl::Status s = FromJson(k.key, k.value, &r); !s.ok()) return s;
  ShardInfo s;
  s.id = r.id();
  s.start = r.start();
  s.end = r.end();
  s.epoch = r.epoch();
  s.primary = r.primary();
  s.backups.assign(r.backups().begin(), r.backups().end());
  s.joining.assign(r.joining().begin(), r.joining().end());
  s.durable = r.durable();
  s.handover_to = r.handover_to();
  s.split_at = r.split_at();
  s.split_id = r.split_id();
  s.merge_with = r.merge_with();
  s.mod_revision = k.mod_revision;
  if (k.key != ShardKey(cluster, s.id)) {
    return absl::DataLossError(absl::StrCat("cluster map record ", k.key, " names shard ", s.id));
  }
  view->shard_list.push_back(std::move(s));
  return absl::OkStatus();
}

absl::Status ReadLoad(const StoredKey& k, absl::string_view id, ClusterView* view) {
  ShardLoadRecord r;
  if (absl::Status s = FromJson(k.key, k.value, &r); !s.ok()) return s;
  ShardLoad load;
  if (!absl::SimpleAtoi(id, &load.shard)) {
    return absl::DataLossError(absl::StrCat("cluster map record ", k.key, " names no shard"));
  }
  load.node = r.node();
  load.epoch = r.epoch();
  load.keys = r.keys();
  load.live_bytes = r.live_bytes();
  load.median_key = r.median_key();
  view->loads[load.shard] = std::move(load);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ClusterView> AssembleView(absl::string_view cluster, int64_t revision,
                                         const std::vector<StoredKey>& keys) {
  ClusterView view;
  view.revision = revision;
  const std::string config_key = ConfigKey(cluster);
  const std::string placer_key = PlacerKey(cluster);
  const std::string nodes = NodesPrefix(cluster);
  const std::string shards = ShardsPrefix(cluster);
  const std::string loads = LoadsPrefix(cluster);
  bool have_config = false;
  for (const StoredKey& k : keys) {
    absl::Status s;
    if (k.key == config_key) {
      s = ReadConfig(k, &view);
      have_config = true;
    } else if (k.key == placer_key) {
      absl::StatusOr<std::string> node = DecodePlacer(k.key, k.value);
      if (node.ok()) view.placer = *std::move(node);
      s = node.status();
    } else if (absl::StartsWith(k.key, nodes)) {
      s = ReadNode(k, absl::string_view(k.key).substr(nodes.size()), &view);
    } else if (absl::StartsWith(k.key, shards)) {
      s = ReadShard(cluster, k, &view);
    } else if (absl::StartsWith(k.key, loads)) {
      s = ReadLoad(k, absl::string_view(k.key).substr(loads.size()), &view);
    }
    if (!s.ok()) return s;
  }
  if (!have_config) {
    return absl::NotFoundError(
        absl::StrCat("cluster \"", cluster,
                     "\" has no map; create it with: kvclient --etcd=HOST:PORT --cluster=", cluster,
                     " cluster init --shards=N --replicas=R"));
  }
  std::sort(view.shard_list.begin(), view.shard_list.end(),
            [](const ShardInfo& a, const ShardInfo& b) { return a.start < b.start; });
  if (static_cast<int>(view.shard_list.size()) != view.shards) {
    return absl::DataLossError(absl::StrCat("cluster \"", cluster, "\" config names ", view.shards,
                                            " shards but the map holds ", view.shard_list.size()));
  }
  if (absl::Status s = CheckCoverage(view.shard_list); !s.ok()) {
    return absl::DataLossError(absl::StrCat("cluster \"", cluster, "\": ", s.message()));
  }
  return view;
}

}  // namespace unloadkv::cluster
