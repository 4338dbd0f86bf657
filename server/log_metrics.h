// The shard logs' Prometheus metrics of a node started with --data_dir (docs/durability.md):
//   unloadkv_log_fsync_policy{policy}       1 for the node's --fsync policy
//   unloadkv_log_records_total              records the logs acknowledged
//   unloadkv_log_syncs_total                fsyncs of the logs
//   unloadkv_log_write_failures_total       writes a log refused (disk full, I/O error)
//   unloadkv_log_compactions_total          log compactions (ReplicaLog::FinishCompaction)
//   unloadkv_log_compaction_seconds_total   time they took, begin to finish (built beside the
//   appends) unloadkv_log_stopped                    1 while a log refuses writes (alert
//                                           UnloadkvLogStopped), else 0
// Nothing is registered without --data_dir. Thread-safety: Update from one thread at a time.
#ifndef UNLOADKV_SERVER_LOG_METRICS_H_
#define UNLOADKV_SERVER_LOG_METRICS_H_

#include <memory>
#include <string>

#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "server/log_writer.h"

namespace unloadkv::server {

class LogMetrics {
 public:
  LogMetrics(prometheus::Registry& registry, const FsyncPolicy& policy);
  // The sums over the node's logs now, and whether any of them is stopped.
  void Update(const LogWriter::Stats& sum, bool stopped);

 private:
  prometheus::Counter* records_;
  prometheus::Counter* syncs_;
  prometheus::Counter* failures_;
  prometheus::Counter* compactions_;
  prometheus::Counter* compaction_seconds_;
  prometheus::Gauge* stopped_;
  LogWriter::Stats last_;  // what the counters hold
};

}  // namespace unloadkv::server

#endif  // UNLOADKV_SERVER_LOG_METRICS_H_
