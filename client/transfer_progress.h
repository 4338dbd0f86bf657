// State transfers in flight (a node joining, a move, a rejoin) as `kvclient cluster status`
// shows them: read from the primaries' /metrics (unloadkv_transfer_bytes, _sent_bytes,
// _seconds{shard,backup}; server/cluster_metrics.h). The map says who joins; only the primary
// knows how far its transfer got.
#ifndef UNLOADKV_CLIENT_TRANSFER_PROGRESS_H_
#define UNLOADKV_CLIENT_TRANSFER_PROGRESS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "transport/cluster/shard_map.h"

namespace unloadkv {

struct TransferProgress {
  uint32_t shard = 0;
  std::string from, to;   // the primary sending, the node joining
  double bytes = 0;       // value bytes the transfer sends
  double sent_bytes = 0;  // of those, acknowledged
  double seconds = 0;     // since it began
  // Seconds left at the rate so far; negative when nothing was acknowledged yet.
  double EtaSeconds() const;
  // "1.0 of 4.0 MiB (25%)".
  std::string Done() const;
  // "6.0 s", or "-" when not known yet.
  std::string Eta() const;
};

// The transfers in `metrics` (Prometheus text exposition from node `from`). Lines that do not
// parse, and transfers missing one of the three series, are skipped: the text is the network's.
std::vector<TransferProgress> ParseTransfers(absl::string_view metrics, const std::string& from);

// GET http://ADDRESS/metrics within `timeout`.
absl::StatusOr<std::string> FetchMetrics(const std::string& address, absl::Duration timeout);

// The transfers in flight to every node joining a shard of `view`, from each such shard's
// primary (its metrics address in the map; one without is skipped); a primary that does not
// answer is skipped and named in *unreachable (nullable).
std::vector<TransferProgress> CollectTransfers(const cluster::ClusterView& view,
                                               absl::Duration timeout,
                                               std::vector<std::string>* unreachable);

}  // namespace unloadkv

#endif  // UNLOADKV_CLIENT_TRANSFER_PROGRESS_H_
