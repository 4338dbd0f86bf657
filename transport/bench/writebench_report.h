// writebench's reports (writebench_main.cc): the table, the CSV, the sweep's targets and its
// plot.
#ifndef UNLOADKV_TRANSPORT_BENCH_WRITEBENCH_REPORT_H_
#define UNLOADKV_TRANSPORT_BENCH_WRITEBENCH_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "transport/bench/writebench_run.h"

namespace unloadkv::bench {

// "4GiB", "64KiB", "100B".
std::string HumanBytes(uint64_t b);
// The table: its header, and one row per run.
void PrintHeader();
void PrintRow(const Result& r);
// Appends `rows` to the CSV file at `path` (with a header when new); nothing when empty.
absl::Status AppendCsv(const std::string& path, const std::vector<Result>& rows);
// Writes after each phase change until adaptive's `window`-write moving mean is within 10% of
// the best static policy's mean over the second half of that phase; -1 if it never gets there.
// The count is at least `window`: a window that starts at the phase change ends there.
inline constexpr int64_t kReconvergenceWindow = 200;
std::vector<int64_t> Reconvergence(const std::vector<Result>& runs, int64_t window);
// The run of `policy` at that point, or nullptr.
const Result* Find(const std::vector<Result>& all, const std::string& policy, Pattern pattern,
                   uint64_t ws, uint32_t size);
// The sweep's targets (calibration, worst point, 4 GiB gain, zipfian, phased) and, with --png,
// its plot; the exit status.
int ReportSweep(const std::vector<Result>& all);

}  // namespace unloadkv::bench

#endif  // UNLOADKV_TRANSPORT_BENCH_WRITEBENCH_REPORT_H_
