// ycsb with unloadkv on the simulated fabric too: `-p unloadkv.transport=sim` runs the kvserver
// and the clients in this process, in virtual time (figures modeled; docs/sim-kv.md); every
// other binding and transport as //client/ycsb:ycsb.
//   bazel run -c opt //tests/sim:ycsb -- run unloadkv -P client/ycsb/workloads/workloada \
//       -p unloadkv.transport=sim -p recordcount=100000 -threads 8
#include <cstdio>
#include <string>
#include <vector>

#include "client/ycsb/ycsb_cli.h"
#include "tests/sim/sim_binding.h"
#include "transport/base/logging.h"

namespace unloadkv::ycsb {
namespace {

// `ycsb load|run unloadkv -p unloadkv.transport=sim`: the server and clients in this process
// on the simulated fabric (tests/sim/sim_binding.h).
int RunOnSim(const CliRun& cli) {
  const std::string& command = cli.command;
  const Properties& props = cli.props;
  const WorkloadConfig& config = cli.config;
  RunOptions o = cli.options;
  const std::vector<double>& percentiles = cli.percentiles;
  absl::StatusOr<SimOptions> so = ReadSimOptions(props, config);
  if (!so.ok()) return Usage(std::string(so.status().message()));
  absl::StatusOr<std::unique_ptr<SimYcsb>> sim = SimYcsb::Create(*so, config.field_count);
  if (!sim.ok()) {
    std::fprintf(stderr, "ycsb: %s\n", sim.status().ToString().c_str());
    return 1;
  }
  Workload workload(config);
  if (command == "run") {  // the simulated server starts empty: load it first, unmeasured
    std::fprintf(stderr, "ycsb: loading %lld records on the simulated fabric (not measured)\n",
                 static_cast<long long>(config.insert_count));
    RunOptions load = o;
    load.load = true;
    load.target_ops = 0;
    load.status = nullptr;
    absl::StatusOr<SimPhase> loaded = (*sim)->Run(workload, load);
    if (!loaded.ok() || Errors(loaded->run.measurements) > 0) {
      std::fprintf(
          stderr, "ycsb: loading failed: %s\n",
          loaded.ok() ? "some inserts returned errors" : loaded.status().ToString().c_str());
      return 1;
    }
  }
  std::fprintf(
      stderr, "ycsb: %s unloadkv on the simulated fabric: %lld %s, %d threads\n", command.c_str(),
      static_cast<long long>(command == "load" ? config.insert_count : config.operation_count),
      command == "load" ? "records" : "operations", o.threads);
  absl::StatusOr<SimPhase> phase = (*sim)->Run(workload, o);
  if (!phase.ok()) {
    std::fprintf(stderr, "ycsb: %s\n", phase.status().ToString().c_str());
    return 1;
  }
  std::printf(
      "[MODELED] virtual time on the simulated fabric (docs/sim-kv.md); policy %s, seed %llu\n",
      so->policy.c_str(), static_cast<unsigned long long>(so->seed));
  std::fputs(
      FormatSummary(phase->run.runtime, phase->run.operations, phase->run.measurements, percentiles)
          .c_str(),
      stdout);
  const ValueLog::Counts checks = (*sim)->log().counts();
  std::fputs(FormatSimSummary(*phase, checks).c_str(), stdout);
  const bool bad = checks.bad_reads > 0 || checks.bad_scanned_values > 0;
  return Errors(phase->run.measurements) == 0 && !bad ? 0 : 1;
}

}  // namespace
}  // namespace unloadkv::ycsb

int main(int argc, char** argv) {
  unloadkv::SetMinLogLevel(unloadkv::LogLevel::kError);
  return unloadkv::ycsb::YcsbMain(argc, argv, unloadkv::ycsb::RunOnSim);
}
