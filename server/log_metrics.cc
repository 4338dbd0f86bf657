#include "server/log_metrics.h"

#include <algorithm>

namespace unloadkv::server {

LogMetrics::LogMetrics(prometheus::Registry& registry, const FsyncPolicy& policy) {
  prometheus::BuildGauge()
      .Name("unloadkv_log_fsync_policy")
      .Help("1 for the node's --fsync policy of its shard logs")
      .Register(registry)
      .Add({{"policy", policy.ToString()}})
      .Set(1);
  records_ = &prometheus::BuildCounter()
                  .Name("unloadkv_log_records_total")
                  .Help("Records the shard logs acknowledged")
                  .Register(registry)
                  .Add({});
  syncs_ = &prometheus::BuildCounter()
                .Name("unloadkv_log_syncs_total")
                .Help("fsyncs of the shard logs")
                .Register(registry)
                .Add({});
  failures_ = &prometheus::BuildCounter()
                   .Name("unloadkv_log_write_failures_total")
                   .Help("Writes a shard log refused (disk full, I/O error)")
                   .Register(registry)
                   .Add({});
  compactions_ = &prometheus::BuildCounter()
                      .Name("unloadkv_log_compactions_total")
                      .Help("Shard log compactions (the live keys rewritten as a new state)")
                      .Register(registry)
                      .Add({});
  compaction_seconds_ =
      &prometheus::BuildCounter()
           .Name("unloadkv_log_compaction_seconds_total")
           .Help("Seconds the shard log compactions took, begin to finish (beside the appends)")
           .Register(registry)
           .Add({});
  stopped_ = &prometheus::BuildGauge()
                  .Name("unloadkv_log_stopped")
                  .Help("1 while a shard log refuses writes (disk full, I/O error), else 0")
                  .Register(registry)
                  .Add({});
}

void LogMetrics::Update(const LogWriter::Stats& sum, bool stopped) {
  auto add = [](prometheus::Counter* c, uint64_t now, uint64_t* last) {
    if (now > *last) c->Increment(static_cast<double>(now - *last));
    *last = std::max(*last, now);
  };
  add(records_, sum.records, &last_.records);
  add(syncs_, sum.syncs, &last_.syncs);
  add(failures_, sum.failed, &last_.failed);
  add(compactions_, sum.compactions, &last_.compactions);
  if (sum.compaction_us > last_.compaction_us) {
    compaction_seconds_->Increment(static_cast<double>(sum.compaction_us - last_.compaction_us) /
                                   1e6);
    last_.compaction_us = sum.compaction_us;
  }
  stopped_->Set(stopped ? 1 : 0);
}

}  // namespace unloadkv::server
