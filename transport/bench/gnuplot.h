// Drawing a benchmark's figures with gnuplot (Debian's gnuplot-nox), for the benchmarks that
// write PNGs (writebench --png, sim_compare).
#ifndef UNLOADKV_TRANSPORT_BENCH_GNUPLOT_H_
#define UNLOADKV_TRANSPORT_BENCH_GNUPLOT_H_

#include <string>

#include "absl/status/status.h"

namespace unloadkv::bench {

// Writes `script` to `script_path` (kept, so that the plot can be redrawn by hand) and runs
// gnuplot on it. FailedPrecondition naming the package when gnuplot fails or is missing;
// InvalidArgument when the script cannot be written.
absl::Status RunGnuplot(const std::string& script_path, const std::string& script);

}  // namespace unloadkv::bench

#endif  // UNLOADKV_TRANSPORT_BENCH_GNUPLOT_H_
