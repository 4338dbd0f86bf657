// writebench: random-write latency and throughput of the offload/unload engine, per path
// policy, over a working set, on the simulated fabric (modeled numbers) or the soft RNIC
// (measured numbers). See docs/benchmarks.md.
//
//   bazel run -c opt //transport/bench:writebench -- --fabric=sim --working_set=4GiB \
//       --write_size=64 --pattern=uniform --policy=offload,unload,adaptive
//   bazel run -c opt //transport/bench:writebench -- --sweep --csv=/tmp/sweep.csv \
//       --png=/tmp/sweep.png
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gflags/gflags.h"
#include "transport/base/logging.h"
#include "transport/bench/workload.h"
#include "transport/bench/writebench_report.h"
#include "transport/bench/writebench_run.h"
#include "transport/engine/engine.h"

DEFINE_string(fabric, "sim", "sim (virtual time, modeled), soft (TCP, measured) or verbs");
DEFINE_string(policy, "offload,unload,adaptive",
              "one or a comma list of offload, unload, adaptive, split:F (a fixed fraction F "
              "unloaded), unload_after:N (the first N offloaded, then all unloaded) and, with "
              "--pattern=zipfian, oracle:K (the pages of the K most "
              "frequent items offloaded, the rest unloaded)");
DEFINE_string(working_set, "4GiB", "bytes the writes spread over (KiB/MiB/GiB suffixes)");
DEFINE_string(write_size, "64", "bytes per write");
DEFINE_string(pattern, "uniform", "uniform, zipfian, hotcold or phased");
DEFINE_int64(ops, 20000, "writes measured per run (after the warm-up)");
DEFINE_int64(warmup, 2000, "writes issued before measuring");
DEFINE_int32(window, 16, "writes in flight");
DEFINE_int32(unload_workers, 2,
             "unload workers (threads; modeled cores, of which a sim node has 2) per engine");
DEFINE_int32(staging_lanes, 0,
             "staging lanes per connection, each served by its own worker (0: one per worker)");
DEFINE_int32(connections, 1, "connections the writes are spread over, round-robin");
DEFINE_int64(connection_writes, 0,
             "> 0: connections opened one after another, each taking this many writes and "
             "closed after they completed (--fabric=sim; replaces --connections)");
DEFINE_bool(shared_target_model, true,
            "connections into the target share what their policies learn (the engine's "
            "per-target model); false: each connection learns alone");
DEFINE_bool(memory_protection, false,
            "the target region carries no remote rights: each connection writes through a "
            "memory window bound on its own QP, and its staged writes pass a check of that "
            "window (docs/benchmarks.md, \"Memory protection\")");
DEFINE_uint64(seed, 1, "workload seed");
DEFINE_string(csv, "", "append one row per (policy, point) to this CSV file");
DEFINE_bool(sweep, false,
            "sweep working sets 4KiB..4GiB and write sizes 64B..64KiB, plus the zipfian and "
            "phased points, then check the targets");
DEFINE_string(sweep_sizes, "64,1024,16384,65536", "write sizes of the sweep");
DEFINE_string(trace, "",
              "append one line per measured write (policy, index, path, latency_us) to this "
              "file, to see how a policy converges");
DEFINE_string(png, "", "with --sweep: draw latency and throughput vs working set (gnuplot)");

namespace unloadkv::bench {
namespace {

// Checks the flags Main reads directly; prints what is wrong and returns false.
bool FlagsUsable(const std::vector<std::string>& policies, const absl::StatusOr<Pattern>& pattern) {
  for (const std::string& p : policies) {
    absl::StatusOr<std::optional<uint64_t>> oracle =
        ParseOracle(p, pattern.ok() && !FLAGS_sweep ? *pattern : Pattern::kUniform);
    absl::Status st = !oracle.ok()          ? oracle.status()
                      : oracle->has_value() ? absl::OkStatus()
                                            : engine::MakePolicy(p).status();
    if (!st.ok()) {
      std::fprintf(stderr, "writebench: --policy: %s\n", st.ToString().c_str());
      return false;
    }
  }
  if (FLAGS_ops < 1000 || FLAGS_window < 1 || FLAGS_window > 1024 || FLAGS_warmup < 0) {
    std::fprintf(stderr, "writebench: need --ops >= 1000, 1 <= --window <= 1024, --warmup >= 0\n");
    return false;
  }
  if (FLAGS_unload_workers < 1 || FLAGS_unload_workers > engine::kMaxUnloadWorkers ||
      FLAGS_staging_lanes < 0 || FLAGS_staging_lanes > 8 || FLAGS_connections < 1 ||
      FLAGS_connections > 64) {
    std::fprintf(stderr,
                 "writebench: need 1 <= --unload_workers <= 64, 0 <= --staging_lanes <= 8, "
                 "1 <= --connections <= 64\n");
    return false;
  }
  if (FLAGS_connection_writes < 0 ||
      (FLAGS_connection_writes > 0 &&
       (FLAGS_fabric != "sim" || FLAGS_memory_protection || FLAGS_connections != 1 ||
        (FLAGS_warmup + FLAGS_ops) / FLAGS_connection_writes > 4096))) {
    std::fprintf(stderr,
                 "writebench: --connection_writes needs --fabric=sim, no --memory_protection, "
                 "no --connections, and at most 4096 connections in the run\n");
    return false;
  }
  return true;
}

// The sweep: every size of --sweep_sizes at working sets from 4 KiB to 4 GiB (x4), uniform,
// then a zipfian and a phased point at 4 GiB; `run` runs and prints one point. The exit status.
int RunSweep(const std::vector<std::string>& policies,
             const std::function<bool(const Point&)>& run) {
  std::vector<uint32_t> sizes;
  for (absl::string_view s : absl::StrSplit(FLAGS_sweep_sizes, ',', absl::SkipEmpty())) {
    absl::StatusOr<uint64_t> b = ParseBytes(std::string(s));
    if (!b.ok() || *b > (1u << 20)) {
      std::fprintf(stderr, "writebench: --sweep_sizes: bad entry '%s'\n", std::string(s).c_str());
      return 2;
    }
    sizes.push_back(static_cast<uint32_t>(*b));
  }
  int point = 0, points = 0;
  for (uint32_t s : sizes) {
    for (uint64_t w = 4096; w <= (uint64_t{4} << 30); w *= 4) points += w >= s;
  }
  for (uint32_t s : sizes) {
    for (uint64_t w = 4096; w <= (uint64_t{4} << 30); w *= 4) {
      if (w < s) continue;
      std::fprintf(stderr, "[writebench] point %d/%d: size %s, working set %s\n", ++point, points,
                   HumanBytes(s).c_str(), HumanBytes(w).c_str());
      for (const std::string& p : policies) {
        if (!run({p, Pattern::kUniform, w, s})) return 1;
      }
    }
  }
  for (Pattern extra : {Pattern::kZipfian, Pattern::kPhased}) {
    std::fprintf(stderr, "[writebench] %s point, 4GiB\n", PatternName(extra));
    for (const std::string& p : policies) {
      if (!run({p, extra, uint64_t{4} << 30, sizes.front()})) return 1;
    }
  }
  return 0;
}

int Main() {
  SetMinLogLevel(LogLevel::kError);
  std::vector<std::string> policies = absl::StrSplit(FLAGS_policy, ',', absl::SkipEmpty());
  absl::StatusOr<Pattern> pattern = ParsePattern(FLAGS_pattern);
  if (!FlagsUsable(policies, pattern)) return 2;
  absl::StatusOr<uint64_t> ws = ParseBytes(FLAGS_working_set);
  absl::StatusOr<uint64_t> size = ParseBytes(FLAGS_write_size);
  for (const absl::Status& st : {pattern.status(), ws.status(), size.status()}) {
    if (!st.ok()) {
      std::fprintf(stderr, "writebench: %s\n", st.ToString().c_str());
      return 2;
    }
  }
  if (*size > (1u << 20) || *size > *ws) {
    std::fprintf(stderr, "writebench: --write_size must be at most 1 MiB and the working set\n");
    return 2;
  }
  std::printf(
      "writebench on %s: %s numbers; %d unload worker(s), %d staging lane(s) per connection, "
      "%s%s%s; window %d, %lld writes per point after %lld warm-up writes, seed "
      "%llu\n",
      FLAGS_fabric.c_str(),
      Modeled() ? "MODELED (simulated fabric, virtual time)" : "MEASURED (real time)",
      FLAGS_unload_workers, StagingLanes(),
      FLAGS_connection_writes > 0
          ? absl::StrCat("connections one after another, ", FLAGS_connection_writes, " writes each")
                .c_str()
          : absl::StrCat(FLAGS_connections, " connection(s)").c_str(),
      FLAGS_shared_target_model ? "" : ", each learning alone (no shared target model)",
      FLAGS_memory_protection ? " writing through memory windows" : "", FLAGS_window,
      static_cast<long long>(FLAGS_ops), static_cast<long long>(FLAGS_warmup),
      static_cast<unsigned long long>(FLAGS_seed));
  PrintHeader();
  std::vector<Result> all;
  auto run = [&](const Point& pt) -> bool {
    absl::StatusOr<Result> r = RunPoint(pt);
    if (!r.ok()) {
      std::fprintf(stderr, "writebench: %s\n", r.status().ToString().c_str());
      return false;
    }
    PrintRow(*r);
    all.push_back(std::move(*r));
    return true;
  };
  if (!FLAGS_sweep) {
    for (const std::string& p : policies) {
      if (!run({p, *pattern, *ws, static_cast<uint32_t>(*size)})) return 1;
    }
    if (*pattern == Pattern::kPhased) {
      std::vector<int64_t> rc = Reconvergence(all, kReconvergenceWindow);
      for (size_t i = 0; i < rc.size(); ++i) {
        std::printf(
            "phase %zu: adaptive's mean over %lld writes within 10%% of the best static "
            "policy's after %lld writes\n",
            i + 2, static_cast<long long>(kReconvergenceWindow), static_cast<long long>(rc[i]));
      }
    }
  } else {
    if (int rc = RunSweep(policies, run); rc != 0) return rc;
  }
  if (absl::Status st = AppendCsv(FLAGS_csv, all); !st.ok()) {
    std::fprintf(stderr, "writebench: %s\n", st.ToString().c_str());
    return 1;
  }
  if (FLAGS_sweep) {
    return ReportSweep(all);
  }
  return 0;
}

}  // namespace
}  // namespace unloadkv::bench

int main(int argc, char** argv) {
  gflags::SetUsageMessage("offload/unload write benchmark; see docs/benchmarks.md");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  return unloadkv::bench::Main();
}
