#include "client/cluster_status.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "transport/base/printable.h"

namespace unloadkv {

namespace {
std::string Names(const std::vector<std::string>& names) {
  return names.empty() ? "-" : absl::StrJoin(names, ",");
}

std::string JsonNames(const std::vector<std::string>& names) {
  std::string out = "[";
  for (size_t i = 0; i < names.size(); ++i) {
    absl::StrAppend(&out, i ? "," : "", JsonString(names[i]));
  }
  return out + "]";
}
}  // namespace

namespace {
const std::map<uint32_t, cluster::ShardLoad>& NoLoads() {
  static const auto* const none = new std::map<uint32_t, cluster::ShardLoad>();
  return *none;
}
}  // namespace

std::string ClusterStatusTable(const cluster::ClusterView& view,
                               const std::vector<TransferProgress>& transfers) {
  std::string out = absl::StrFormat("%-6s %-28s %-6s %-12s %-24s %s\n", "shard", "range", "epoch",
                                    "primary", "backups", "state");
  for (const cluster::ShardInfo& s : view.shard_list) {
    const std::string range = absl::StrCat("[", s.start.empty() ? "-inf" : Printable(s.start), ", ",
                                           s.end.empty() ? "+inf" : Printable(s.end), ")");
    std::string backups = Names(s.backups);
    if (!s.joining.empty()) absl::StrAppend(&backups, " (joining: ", Names(s.joining), ")");
    if (!s.handover_to.empty())
      absl::StrAppend(&backups, " (primary moving to ", s.handover_to, ")");
    if (s.merge_with != 0) absl::StrAppend(&backups, " (merging shard ", s.merge_with, " in)");
    if (s.split_id != 0) {
      absl::StrAppend(&backups, " (splitting at ", Printable(s.split_at), " into shard ",
                      s.split_id, ")");
    }
    absl::StrAppendFormat(&out, "%-6u %-28s %-6u %-12s %-24s %s\n", s.id, range, s.epoch,
                          s.primary.empty() ? "-" : s.primary, backups,
                          cluster::ShardStateName(view.StateOf(s)));
  }
  if (!transfers.empty()) absl::StrAppend(&out, "transfers in flight:\n");
  for (const TransferProgress& t : transfers) {
    absl::StrAppendFormat(&out, "  shard %u %s -> %s: %s, %.1f s, ETA %s\n", t.shard, t.from, t.to,
                          t.Done(), t.seconds, t.Eta());
  }
  absl::StrAppendFormat(&out, "nodes: %d live, %d replicas wanted per shard\n", view.nodes.size(),
                        view.replicas);
  for (const auto& [name, n] : view.nodes) {
    absl::StrAppendFormat(&out, "  %-12s rpc %s metrics %s\n", name, n.rpc_address,
                          n.metrics_address.empty() ? "-" : n.metrics_address);
  }
  absl::StrAppend(&out, PlacementLine(view), "\n");
  // With the policy off the records left from when it was on are stale: not shown.
  for (const auto& [id, load] : view.policy.auto_rebalance ? view.loads : NoLoads()) {
    absl::StrAppendFormat(&out, "  shard %u: %u keys, %u live bytes (measured by %s)\n", id,
                          load.keys, load.live_bytes, load.node);
  }
  return out;
}

std::string PlacementLine(const cluster::ClusterView& view) {
  const cluster::PlacementPolicy& p = view.policy;
  if (!p.auto_rebalance) {
    return "placement: by the operator (cluster config --auto_rebalance=true automates it)";
  }
  return absl::StrCat("placement: automatic, ",
                      p.max_shard_bytes == 0
                          ? std::string("no split by size")
                          : absl::StrCat("shards split above ", p.max_shard_bytes, " live bytes"),
                      ", placer ", view.placer.empty() ? "(none yet)" : view.placer);
}

std::string ClusterStatusJson(const cluster::ClusterView& view,
                              const std::vector<TransferProgress>& transfers) {
  std::string out = absl::StrCat("{\"revision\":", view.revision, ",\"replicas\":", view.replicas,
                                 ",\"shards\":[");
  for (size_t i = 0; i < view.shard_list.size(); ++i) {
    const cluster::ShardInfo& s = view.shard_list[i];
    absl::StrAppend(&out, i ? "," : "", "{\"id\":", s.id, ",\"start\":", JsonString(s.start),
                    ",\"end\":", JsonString(s.end), ",\"epoch\":", s.epoch,
                    ",\"primary\":", JsonString(s.primary), ",\"backups\":", JsonNames(s.backups),
                    ",\"joining\":", JsonNames(s.joining),
                    ",\"handover_to\":", JsonString(s.handover_to),
                    ",\"split_at\":", JsonString(s.split_at), ",\"split_id\":", s.split_id,
                    ",\"merge_with\":", s.merge_with,
                    ",\"state\":", JsonString(cluster::ShardStateName(view.StateOf(s))));
    auto load = view.loads.find(s.id);
    if (view.policy.auto_rebalance && load != view.loads.end()) {
      absl::StrAppend(&out, ",\"keys\":", load->second.keys,
                      ",\"live_bytes\":", load->second.live_bytes);
    }
    absl::StrAppend(&out, "}");
  }
  absl::StrAppend(&out, "],\"nodes\":[");
  bool first = true;
  for (const auto& [name, n] : view.nodes) {
    absl::StrAppend(&out, first ? "" : ",", "{\"name\":", JsonString(name),
                    ",\"rpc_address\":", JsonString(n.rpc_address),
                    ",\"metrics_address\":", JsonString(n.metrics_address), "}");
    first = false;
  }
  absl::StrAppend(
      &out, "],\"placement\":{\"auto_rebalance\":", view.policy.auto_rebalance ? "true" : "false",
      ",\"max_shard_bytes\":", view.policy.max_shard_bytes, ",\"placer\":", JsonString(view.placer),
      "},\"transfers\":[");
  for (size_t i = 0; i < transfers.size(); ++i) {
    const TransferProgress& t = transfers[i];
    absl::StrAppend(&out, i ? "," : "", "{\"shard\":", t.shard, ",\"from\":", JsonString(t.from),
                    ",\"to\":", JsonString(t.to),
                    absl::StrFormat(",\"bytes\":%.0f,\"sent_bytes\":%.0f,\"seconds\":%.3f,"
                                    "\"eta_seconds\":%.3f}",
                                    t.bytes, t.sent_bytes, t.seconds, t.EtaSeconds()));
  }
  return out + "]}";
}

}  // namespace unloadkv
