// Runs a YCSB phase (load or run) with N client threads, each with its own Db, optionally
// throttled to a target rate with intended-latency measurement (coordinated omission: a
// stalled operation is charged from when it should have started), printing status lines.
#ifndef UNLOADKV_CLIENT_YCSB_RUNNER_H_
#define UNLOADKV_CLIENT_YCSB_RUNNER_H_

#include <cstdio>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "client/ycsb/db.h"
#include "client/ycsb/measurements.h"
#include "client/ycsb/workload.h"
#include "transport/base/clock.h"

namespace unloadkv::ycsb {

using DbFactory = std::function<absl::StatusOr<std::unique_ptr<Db>>()>;
// Runs every body as a client thread and returns when all returned (an error: they could not
// all finish). The default starts OS threads; the simulated fabric runs them in lockstep.
using ThreadRunner = std::function<absl::Status(std::vector<std::function<void()>> bodies)>;

struct RunOptions {
  bool load = false;  // insert recordcount records instead of running operations
  int threads = 1;
  double target_ops = 0;  // total ops/s; 0 = as fast as possible
  double status_interval_s = 10;
  FILE* status = stderr;  // status lines go here (nullptr: none)
  uint64_t seed = 1;
  // Where time comes from (latencies, runtime, pacing, status lines): virtual time on the
  // simulated fabric. Not owned.
  const Clock* clock = RealClock::Get();
  // Null: OS threads, and status lines from a thread of their own. Set: the client threads
  // run under `run_threads` and print the status lines themselves, when an operation ends
  // past the next interval of real time (a stalled run then prints none); the figures in them
  // are on `clock`.
  ThreadRunner run_threads;
  // The unit latencies are recorded in (YCSB prints microseconds; the simulated fabric's
  // comparison records nanoseconds, its latencies being a few microseconds).
  absl::Duration latency_unit = absl::Microseconds(1);
};

struct RunResult {
  int64_t runtime_ms = 0;
  absl::Duration runtime;  // exact: throughput comes from it (virtual runs last milliseconds)
  uint64_t operations = 0;
  Measurements measurements;
};

absl::StatusOr<RunResult> RunPhase(Workload& workload, const RunOptions& options,
                                   const DbFactory& connect);

}  // namespace unloadkv::ycsb

#endif  // UNLOADKV_CLIENT_YCSB_RUNNER_H_
