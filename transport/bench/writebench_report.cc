#include "transport/bench/writebench_report.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "transport/bench/gnuplot.h"
#include "transport/bench/writebench_flags.h"

namespace unloadkv::bench {

std::string HumanBytes(uint64_t b) {
  if (b >= (1ull << 30) && b % (1ull << 30) == 0) return absl::StrCat(b >> 30, "GiB");
  if (b >= (1ull << 20) && b % (1ull << 20) == 0) return absl::StrCat(b >> 20, "MiB");
  if (b >= 1024 && b % 1024 == 0) return absl::StrCat(b >> 10, "KiB");
  return absl::StrCat(b, "B");
}

void PrintRow(const Result& r) {
  std::printf("%-11s %-8s %8s %7s | %8.3f %8.3f %8.3f | %10.0f %7.3f | %5.2f | %7.3f %7.3f\n",
              r.point.policy.c_str(), PatternName(r.point.pattern),
              HumanBytes(r.point.working_set).c_str(), HumanBytes(r.point.write_size).c_str(),
              r.mean_us, r.p50_us, r.p99_us, r.ops_per_s, r.gbps, r.unload_fraction,
              r.path_mean_us[0], r.path_mean_us[1]);
  std::fflush(stdout);
}

void PrintHeader() {
  std::printf("%-11s %-8s %8s %7s | %8s %8s %8s | %10s %7s | %5s | %7s %7s\n", "policy", "pattern",
              "wset", "size", "mean_us", "p50_us", "p99_us", "ops/s", "GB/s", "unld", "off_us",
              "unl_us");
}

absl::Status AppendCsv(const std::string& path, const std::vector<Result>& rows) {
  if (path.empty()) return absl::OkStatus();
  bool fresh = !std::ifstream(path).good();
  std::ofstream out(path, std::ios::app);
  if (!out) return absl::InvalidArgumentError(absl::StrCat("--csv: cannot write ", path));
  if (fresh) {
    out << "fabric,policy,pattern,working_set_bytes,write_size,ops,mean_us,p50_us,p99_us,"
           "throughput_ops,throughput_gbps,unload_fraction\n";
  }
  for (const Result& r : rows) {
    out << absl::StrFormat("%s,%s,%s,%d,%d,%d,%.4f,%.4f,%.4f,%.1f,%.5f,%.4f\n", FLAGS_fabric,
                           r.point.policy, PatternName(r.point.pattern), r.point.working_set,
                           r.point.write_size, r.ops, r.mean_us, r.p50_us, r.p99_us, r.ops_per_s,
                           r.gbps, r.unload_fraction);
  }
  return absl::OkStatus();
}

std::vector<int64_t> Reconvergence(const std::vector<Result>& runs, int64_t window) {
  std::vector<int64_t> out;
  const Result* adaptive = nullptr;
  for (const Result& r : runs) {
    if (r.point.policy == "adaptive") adaptive = &r;
  }
  if (adaptive == nullptr) return out;
  const int64_t total = FLAGS_warmup + FLAGS_ops, phase_len = std::max<int64_t>(1, total / 4);
  for (int p = 1; p < 4; ++p) {
    int64_t begin = p * phase_len - FLAGS_warmup,
            end = std::min<int64_t>(begin + phase_len, FLAGS_ops);
    if (begin < 0 || end - begin < 1000) continue;
    double best = 1e300;
    for (const Result& r : runs) {
      if (r.point.policy == "adaptive") continue;
      double s = 0;
      int64_t mid = begin + (end - begin) / 2;
      for (int64_t i = mid; i < end; ++i) s += r.latencies_us[i];
      best = std::min(best, s / (end - mid));
    }
    int64_t found = -1;
    const int64_t w = window;
    double s = 0;
    for (int64_t i = begin; i < end; ++i) {
      s += adaptive->latencies_us[i];
      if (i - begin >= w) s -= adaptive->latencies_us[i - w];
      if (i - begin + 1 >= w && s / w <= best * 1.1) {
        found = i - begin + 1;
        break;
      }
    }
    out.push_back(found);
  }
  return out;
}

const Result* Find(const std::vector<Result>& all, const std::string& policy, Pattern pattern,
                   uint64_t ws, uint32_t size) {
  for (const Result& r : all) {
    if (r.point.policy == policy && r.point.pattern == pattern && r.point.working_set == ws &&
        r.point.write_size == size) {
      return &r;
    }
  }
  return nullptr;
}

namespace {

// Draws the uniform sweep at `s0`-byte writes (latency and throughput against the working set,
// one line per policy) into --png with gnuplot; false after printing why it could not.
bool WritePlot(const std::vector<Result>& all, uint32_t s0) {
  // One data file per policy, points in working-set order, drawn as lines.
  const char* pols[] = {"offload", "unload", "adaptive"};
  std::string plot[2];
  for (int i = 0; i < 3; ++i) {
    const std::string dat = absl::StrCat(FLAGS_png, ".", pols[i], ".dat");
    std::ofstream out(dat);
    for (const Result& r : all) {
      if (r.point.policy == pols[i] && r.point.pattern == Pattern::kUniform &&
          r.point.write_size == s0) {
        out << r.point.working_set << ' ' << r.mean_us << ' ' << r.ops_per_s / 1e6 << '\n';
      }
    }
    if (!out) {
      std::fprintf(stderr, "writebench: --png: cannot write %s\n", dat.c_str());
      return false;
    }
    for (int panel = 0; panel < 2; ++panel) {
      absl::StrAppend(&plot[panel], i ? ", " : "plot ", "'", dat, "' using 1:", panel + 2,
                      " with linespoints title '", pols[i], "'");
    }
  }
  const std::string script =
      absl::StrCat("set terminal pngcairo size 1600,900 font ',10'\nset output '", FLAGS_png, "'\n",
                   "set logscale x 2\nset key top left\nset grid\n",
                   "set format x '%.0b%B'\nset xlabel 'working set (bytes, binary prefixes)'\n",
                   "set multiplot layout 2,1 title 'writebench ", FLAGS_fabric, " (",
                   Modeled() ? "modeled" : "measured", "), uniform, ", s0, " B writes'\n",
                   "set ylabel 'mean latency (us)'\n", plot[0],
                   "\nset ylabel 'throughput (Mops/s)'\n", plot[1], "\nunset multiplot\n");
  if (absl::Status st = RunGnuplot(FLAGS_png + ".gp", script); !st.ok()) {
    std::fprintf(stderr, "writebench: %s\n", std::string(st.message()).c_str());
    return false;
  }
  std::printf("plot: %s\n", FLAGS_png.c_str());
  return true;
}

}  // namespace

int ReportSweep(const std::vector<Result>& all) {
  const uint32_t s0 = all.front().point.write_size;
  const uint64_t small = 4096, large = uint64_t{4} << 30;
  std::printf("\nTargets (%s):\n", Modeled() ? "modeled" : "measured");
  const Result* o_small = Find(all, "offload", Pattern::kUniform, small, s0);
  const Result* o_large = Find(all, "offload", Pattern::kUniform, large, s0);
  if (o_small && o_large) {
    // The published latency figure is a round trip with nothing else in flight: measure it so.
    int saved_window = FLAGS_window;
    FLAGS_window = 1;
    absl::StatusOr<Result> rtt_small = RunPoint({"offload", Pattern::kUniform, small, s0});
    absl::StatusOr<Result> rtt_large = RunPoint({"offload", Pattern::kUniform, large, s0});
    FLAGS_window = saved_window;
    if (rtt_small.ok() && rtt_large.ok()) {
      std::printf(
          "  calibration, offload %uB writes: round trip (1 in flight) 4GiB/4KiB = %.2fx "
          "(%.3f/%.3f us; want 1.7-2.3)\n",
          s0, rtt_large->mean_us / rtt_small->mean_us, rtt_large->mean_us, rtt_small->mean_us);
    }
    std::printf(
        "  calibration, offload %uB writes: throughput loss 4GiB vs 4KiB with %d in flight"
        " = %.0f%% (want 30-45)\n",
        s0, FLAGS_window, 100 * (1 - o_large->ops_per_s / o_small->ops_per_s));
  }
  double worst = 0;
  std::string worst_at;
  for (const Result& r : all) {
    if (r.point.policy != "adaptive") continue;
    const Result* o =
        Find(all, "offload", r.point.pattern, r.point.working_set, r.point.write_size);
    const Result* u = Find(all, "unload", r.point.pattern, r.point.working_set, r.point.write_size);
    if (!o || !u) continue;
    double best_lat = std::min(o->mean_us, u->mean_us);
    double best_tput = std::max(o->ops_per_s, u->ops_per_s);
    double worse = std::max(r.mean_us / best_lat - 1, 1 - r.ops_per_s / best_tput);
    if (worse > worst) {
      worst = worse;
      worst_at = absl::StrCat(PatternName(r.point.pattern), " ", HumanBytes(r.point.working_set),
                              " ", HumanBytes(r.point.write_size));
    }
  }
  std::printf(
      "  adaptive vs the better static policy, worst point: %.1f%% worse (%s) (want <= 3%%)\n",
      100 * worst, worst_at.c_str());
  const Result* a_large = Find(all, "adaptive", Pattern::kUniform, large, s0);
  if (o_large && a_large) {
    std::printf(
        "  uniform 4GiB: adaptive vs offload: latency %.2fx better, throughput %.2fx "
        "(want >= 1.25x in either)\n",
        o_large->mean_us / a_large->mean_us, a_large->ops_per_s / o_large->ops_per_s);
  }
  const Result* az = Find(all, "adaptive", Pattern::kZipfian, large, s0);
  const Result* oz = Find(all, "offload", Pattern::kZipfian, large, s0);
  const Result* uz = Find(all, "unload", Pattern::kZipfian, large, s0);
  if (az && oz && uz) {
    std::printf(
        "  zipfian 0.99 4GiB: adaptive mean %.3f us vs offload %.3f (%.0f%% better), "
        "unload %.3f (%.0f%% better) (want >= 10%% vs both)\n",
        az->mean_us, oz->mean_us, 100 * (1 - az->mean_us / oz->mean_us), uz->mean_us,
        100 * (1 - az->mean_us / uz->mean_us));
  }
  std::vector<Result> phased;
  for (const Result& r : all) {
    if (r.point.pattern == Pattern::kPhased) phased.push_back(r);
  }
  std::vector<int64_t> rc = Reconvergence(phased, kReconvergenceWindow);
  for (size_t i = 0; i < rc.size(); ++i) {
    std::printf(
        "  phased 4GiB, phase %zu: adaptive's mean over %lld writes within 10%% of the best "
        "static policy's after %lld writes (want <= 200)\n",
        i + 2, static_cast<long long>(kReconvergenceWindow), static_cast<long long>(rc[i]));
  }
  if (!FLAGS_png.empty() && !WritePlot(all, s0)) return 1;
  return 0;
}

}  // namespace unloadkv::bench
