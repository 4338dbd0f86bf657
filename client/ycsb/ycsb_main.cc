// ycsb: YCSB's core workloads against unloadkv, Redis, memcached, or the loopback limit (echo:
// echo_db.h), with YCSB's command line and output.
//   ycsb load unloadkv -P client/ycsb/workloads/workloada -p recordcount=100000 -threads 8 -s
//   ycsb run  redis    -P client/ycsb/workloads/workloada -p redis.port=6379 -target 5000
// Binding properties: unloadkv.server (127.0.0.1:7070), unloadkv.transport (soft, verbs; sim:
// the kvserver and the clients in this process on the simulated fabric, figures modeled, in
// the build that embeds the server: bazel run -c opt //tests/sim:ycsb; tests/sim/sim_binding.h),
// unloadkv.policy (adaptive), unloadkv.caller_progress (true: each client thread drives its own
// connection), unloadkv.layout (record: a record is one value; field_per_key: a key per field;
// unloadkv_db.h); unloadkv.etcd and unloadkv.cluster (a cluster, docs/cluster.md: keys are routed
// by the map instead of going to unloadkv.server), unloadkv.auth_file and unloadkv.user (the
// credentials to prove, docs/security.md); redis.host (127.0.0.1), redis.port (6379);
// memcached.host (127.0.0.1), memcached.port (11211); echo.host (127.0.0.1), echo.port (7000).
// Other properties: threadcount, target, status.interval (s, default 10),
// hdrhistogram.percentiles (default 95,99), plus the core workload's (docs/ycsb.md).
// Exit status: 0 when every operation returned OK (NOT_FOUND included), 1 on errors, 2 on
// usage errors.
#include "client/ycsb/ycsb_cli.h"
#include "transport/base/logging.h"

int main(int argc, char** argv) {
  unloadkv::SetMinLogLevel(unloadkv::LogLevel::kError);
  return unloadkv::ycsb::YcsbMain(argc, argv, nullptr);
}
