// Runs a YCSB phase (load or run) with N client threads, each with its own Db, optionally
// throttled to a target rate with intended-latency measurement (coordinated omission: a
// stalled operation is charged from when it should have started), printing status lines.
#ifndef UNLOADKV_CLIENT_YCSB_RUNNER_H_
#define UNLOADKV_CLIENT_YCSB_RUNNER_H_

#include <cstdio>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "client/ycsb/db.h"
#include "client/ycsb/measurements.h"
#include "client/ycsb/workload.h"

namespace unloadkv::ycsb {

using DbFactory = std::function<absl::StatusOr<std::unique_ptr<Db>>()>;

struct RunOptions {
  bool load = false;  // insert recordcount records instead of running operations
  int threads = 1;
  double target_ops = 0;  // total ops/s; 0 = as fast as possible
  double status_interval_s = 10;
  FILE* status = stderr;  // status lines go here (nullptr: none)
  uint64_t seed = 1;
};

struct RunResult {
  int64_t runtime_ms = 0;
  uint64_t operations = 0;
  Measurements measurements;
};

absl::StatusOr<RunResult> RunPhase(Workload& workload, const RunOptions& options,
                                   const DbFactory& connect);

}  // namespace unloadkv::ycsb

#endif  // UNLOADKV_CLIENT_YCSB_RUNNER_H_
