// The ycsb command line (YCSB's own: `ycsb load|run BINDING [-P file]... [-p key=value]...
// [-threads N] [-target OPS] [-s]`), shared by //client/ycsb:ycsb and the build of it that also
// runs unloadkv on the simulated fabric (//tests/sim:ycsb: the server embedded in the same
// process, which client/ must not depend on). docs/ycsb.md.
#ifndef UNLOADKV_CLIENT_YCSB_YCSB_CLI_H_
#define UNLOADKV_CLIENT_YCSB_YCSB_CLI_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "client/ycsb/measurements.h"
#include "client/ycsb/properties.h"
#include "client/ycsb/runner.h"
#include "client/ycsb/workload.h"

namespace unloadkv::ycsb {

// One parsed command line.
struct CliRun {
  std::string command;  // load or run
  Properties props;
  WorkloadConfig config;
  RunOptions options;
  std::vector<double> percentiles;  // hdrhistogram.percentiles
};

// Runs `ycsb load|run unloadkv -p unloadkv.transport=sim`; returns the exit status.
using SimRunner = std::function<int(const CliRun& run)>;

// Parses argv and runs it; returns the exit status (0: every operation OK, 1: errors, 2: usage).
// unloadkv.transport=sim goes to `sim`; without one it is a usage error naming //tests/sim:ycsb.
int YcsbMain(int argc, char** argv, const SimRunner& sim);

// Prints `why` and the usage line to stderr; returns 2.
int Usage(const std::string& why);
// Operations that returned ERROR, over every series.
uint64_t Errors(const Measurements& m);

}  // namespace unloadkv::ycsb

#endif  // UNLOADKV_CLIENT_YCSB_YCSB_CLI_H_
