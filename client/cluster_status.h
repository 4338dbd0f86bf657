// `kvclient cluster status`: the cluster map as a table (one line per shard) or as JSON.
#ifndef UNLOADKV_CLIENT_CLUSTER_STATUS_H_
#define UNLOADKV_CLIENT_CLUSTER_STATUS_H_

#include <string>
#include <vector>

#include "client/transfer_progress.h"
#include "transport/cluster/shard_map.h"

namespace unloadkv {

// A header line, then per shard: id, [start, end) with keys escaped as by Printable ("-inf"
// and "+inf" for the open ends), epoch, primary ("-" when none), backups (comma-separated, "-"
// when none), state; then the transfers in flight (sent of total MiB, time, ETA), then one line
// per live node with its addresses, then the placement line and, with automatic placement on,
// the shards' sizes as their primaries published them.
std::string ClusterStatusTable(const cluster::ClusterView& view,
                               const std::vector<TransferProgress>& transfers = {});

// One JSON object: {"revision", "replicas", "shards": [{"id", "start", "end", "epoch",
// "primary", "backups", "joining", "state", and "keys", "live_bytes" where published with
// automatic placement on}...],
// "nodes": [{"name", "rpc_address", "metrics_address"}...], "placement": {"auto_rebalance",
// "max_shard_bytes", "placer"}, "transfers": [{"shard", "from", "to", "bytes", "sent_bytes",
// "seconds", "eta_seconds" (-1: not known yet)}...]}. Keys as JSON strings of their bytes
// (JsonString); "end" is "" for the last shard (no upper bound); "primary" is "" when there is
// none.
// "placement: automatic, shards split above N live bytes, placer NODE" or "placement: by the
// operator (...)".
std::string PlacementLine(const cluster::ClusterView& view);

std::string ClusterStatusJson(const cluster::ClusterView& view,
                              const std::vector<TransferProgress>& transfers = {});

}  // namespace unloadkv

#endif  // UNLOADKV_CLIENT_CLUSTER_STATUS_H_
