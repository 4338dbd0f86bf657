// writebench: random-write latency and throughput of the offload/unload engine, per path
// policy, over a working set, on the simulated fabric (modeled numbers) or the soft RNIC
// (measured numbers). See docs/benchmarks.md.
//
//   bazel run -c opt //transport/bench:writebench -- --fabric=sim --working_set=4GiB \
//       --write_size=64 --pattern=uniform --policy=offload,unload,adaptive
//   bazel run -c opt //transport/bench:writebench -- --sweep --csv=/tmp/sweep.csv \
//       --png=/tmp/sweep.png
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <functional>
#include <mutex>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gflags/gflags.h"
#include "transport/backends/open_device.h"
#include "transport/base/logging.h"
#include "transport/bench/workload.h"
#include "transport/engine/engine.h"
#include "transport/sim/fabric.h"

DEFINE_string(fabric, "sim", "sim (virtual time, modeled), soft (TCP, measured) or verbs");
DEFINE_string(policy, "offload,unload,adaptive",
              "one or a comma list of offload, unload, adaptive, split:F (a fixed fraction F "
              "unloaded) and, with --pattern=zipfian, oracle:K (the pages of the K most "
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

struct Point {
  std::string policy;
  Pattern pattern;
  uint64_t working_set;
  uint32_t write_size;
};

struct Result {
  Point point;
  int64_t ops = 0;
  double mean_us = 0, p50_us = 0, p99_us = 0, ops_per_s = 0, gbps = 0, unload_fraction = 0;
  double path_mean_us[2] = {0, 0};   // by engine::Path; 0 when no write took it
  std::vector<double> latencies_us;  // in issue order, measured writes only
  uint64_t mtt_misses = 0;
};

bool Modeled() { return FLAGS_fabric == "sim"; }
int StagingLanes() { return FLAGS_staging_lanes > 0 ? FLAGS_staging_lanes : FLAGS_unload_workers; }

// An upper bound for policies that split by page heat, on zipfian writes: it knows the
// workload (which no engine policy may), offloads the 4 KiB pages holding the K most frequent
// items and unloads the rest. Not thread-safe (one connection).
class OraclePolicy : public engine::PathPolicy {
 public:
  OraclePolicy(uint64_t k, uint64_t working_set, uint32_t write_size, uint64_t base) : base_(base) {
    const uint64_t items = std::max<uint64_t>(1, working_set / write_size);
    for (uint64_t rank = 0; rank < k; ++rank) {
      hot_pages_.insert(ZipfianGenerator::Scramble(rank, items) * write_size >> 12);
    }
  }
  absl::string_view name() const override { return "oracle"; }
  engine::Decision Decide(uint64_t remote_addr, uint32_t, bool unload_possible) override {
    if (!unload_possible || hot_pages_.contains((remote_addr - base_) >> 12)) {
      return {engine::Path::kOffload, 0};
    }
    return {engine::Path::kUnload, 0};
  }

 private:
  uint64_t base_;
  absl::flat_hash_set<uint64_t> hot_pages_;
};

// "oracle:K" -> K (1..1000000); nullopt for other names; an error for a malformed oracle.
absl::StatusOr<std::optional<uint64_t>> ParseOracle(absl::string_view name, Pattern pattern) {
  if (!absl::ConsumePrefix(&name, "oracle:")) return std::optional<uint64_t>();
  uint64_t k = 0;
  if (!absl::SimpleAtoi(name, &k) || k < 1 || k > 1000000) {
    return absl::InvalidArgumentError("oracle:K needs 1 <= K <= 1000000");
  }
  if (pattern != Pattern::kZipfian) {
    return absl::InvalidArgumentError("oracle:K is defined for --pattern=zipfian only");
  }
  return std::optional<uint64_t>(k);
}

absl::StatusOr<std::unique_ptr<engine::PathPolicy>> MakeBenchPolicy(const Point& pt,
                                                                    uint64_t base) {
  absl::StatusOr<std::optional<uint64_t>> oracle = ParseOracle(pt.policy, pt.pattern);
  if (!oracle.ok()) return oracle.status();
  if (oracle->has_value()) {
    return std::unique_ptr<engine::PathPolicy>(
        new OraclePolicy(**oracle, pt.working_set, pt.write_size, base));
  }
  return engine::MakePolicy(pt.policy);
}

int ReportSweep(const std::vector<struct Result>& all);

// The two nodes of a point: on the simulated fabric (created in *fabric), or two soft or verbs
// devices.
absl::Status OpenDevices(std::unique_ptr<sim::Fabric>* fabric, std::unique_ptr<rnic::Device>* a,
                         std::unique_ptr<rnic::Device>* b) {
  if (FLAGS_fabric == "sim") {
    *fabric = std::make_unique<sim::Fabric>();
    *a = (*fabric)->CreateDevice();
    *b = (*fabric)->CreateDevice();
    return absl::OkStatus();
  }
  if (FLAGS_fabric == "soft" || FLAGS_fabric == "verbs") {
    // verbs: both nodes on the first active RNIC (loopback through the NIC); real two-host
    // runs use the KV service. Without a device this fails with the reason and the fix.
    backends::DeviceSpec spec;
    spec.transport = FLAGS_fabric;
    spec.soft_flag = "--fabric=soft";
    auto da = backends::OpenDevice(spec);
    if (!da.ok()) return da.status();
    auto db = backends::OpenDevice(spec);
    if (!db.ok()) return db.status();
    *a = std::move(*da);
    *b = std::move(*db);
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--fabric='", FLAGS_fabric, "': choose sim, soft or verbs"));
}

// Fills `r` from the latencies and paths of a point's writes (the first FLAGS_warmup are not
// counted) and the time the measured ones took.
void Summarize(const Point& pt, const std::vector<double>& lat,
               const std::vector<uint8_t>& unloaded, absl::Duration measured, Result* r) {
  const int64_t total = static_cast<int64_t>(lat.size());
  r->ops = FLAGS_ops;
  r->latencies_us.assign(lat.begin() + FLAGS_warmup, lat.end());
  std::vector<double> sorted = r->latencies_us;
  std::sort(sorted.begin(), sorted.end());
  r->mean_us = std::accumulate(sorted.begin(), sorted.end(), 0.0) / sorted.size();
  r->p50_us = sorted[sorted.size() / 2];
  r->p99_us = sorted[std::min(sorted.size() - 1, sorted.size() * 99 / 100)];
  const double secs = absl::ToDoubleSeconds(measured);
  r->ops_per_s = secs > 0 ? FLAGS_ops / secs : 0;
  r->gbps = r->ops_per_s * pt.write_size / 1e9;
  r->unload_fraction =
      std::accumulate(unloaded.begin() + FLAGS_warmup, unloaded.end(), 0.0) / FLAGS_ops;
  double sum[2] = {0, 0};
  int64_t n[2] = {0, 0};
  for (int64_t i = FLAGS_warmup; i < total; ++i) {
    sum[unloaded[i]] += lat[i];
    ++n[unloaded[i]];
  }
  for (int p = 0; p < 2; ++p) r->path_mean_us[p] = n[p] > 0 ? sum[p] / n[p] : 0;
}

// With --trace, appends one line per measured write: policy, index, path, latency.
absl::Status AppendTrace(const Point& pt, const std::vector<double>& lat,
                         const std::vector<uint8_t>& unloaded) {
  if (FLAGS_trace.empty()) return absl::OkStatus();
  std::ofstream trace(FLAGS_trace, std::ios::app);
  for (int64_t i = FLAGS_warmup; i < static_cast<int64_t>(lat.size()); ++i) {
    trace << pt.policy << ' ' << i - FLAGS_warmup << ' ' << (unloaded[i] ? "unload" : "offload")
          << ' ' << lat[i] << '\n';
  }
  if (!trace) return absl::InvalidArgumentError("--trace: cannot write " + FLAGS_trace);
  return absl::OkStatus();
}

// Runs one point: two nodes, one connection, a closed loop with FLAGS_window writes in flight.
// Longer than our usual 80 lines on purpose: the loop's issue function, its completion
// callback and the two ways of driving it (virtual time, worker threads) share the loop's
// counters and buffers; read whole, the measurement's order of events is visible at once.
absl::StatusOr<Result> RunPoint(const Point& pt) {
  std::unique_ptr<sim::Fabric> fabric;
  std::unique_ptr<rnic::Device> dev_a, dev_b;
  if (absl::Status st = OpenDevices(&fabric, &dev_a, &dev_b); !st.ok()) return st;
  engine::CountingMetrics metrics;
  engine::EngineOptions opts;
  opts.staging_slot_bytes = std::max<uint32_t>(16 << 10, pt.write_size + 64);
  opts.unload_workers = FLAGS_unload_workers;
  opts.staging_lanes = StagingLanes();
  opts.metrics = &metrics;
  opts.modeled_huge_pages = fabric != nullptr;  // the modeled nodes have huge pages
  auto ea = engine::Engine::Create(dev_a.get(), opts);
  auto eb = engine::Engine::Create(dev_b.get(), opts);
  if (!ea.ok()) return ea.status();
  if (!eb.ok()) return eb.status();
  // The target's working set: reserved, touched only where written.
  // At the same address every run (a hint the kernel takes when the range is free): the
  // adaptive policy hashes page addresses into its heat sketch, so with the address varying
  // (ASLR) the same seed gave different modeled results.
  void* const kArenaHint = reinterpret_cast<void*>(uintptr_t{0x500000000000});
  void* arena = mmap(kArenaHint, pt.working_set, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (arena == MAP_FAILED) return absl::ResourceExhaustedError("mmap of the working set failed");
  // Unmapped on every return, after the regions registered on it are gone.
  struct Unmap {
    void* addr;
    size_t length;
    ~Unmap() { munmap(addr, length); }
  } unmap{arena, pt.working_set};
  std::vector<char> src(size_t{pt.write_size} * FLAGS_window, 'w');
  absl::Status status;
  Result r;
  r.point = pt;
  {
    auto dst_mr =
        (*eb)->RegisterMemory(arena, pt.working_set, rnic::kLocalWrite | rnic::kRemoteWrite);
    auto src_mr = (*ea)->RegisterMemory(src.data(), src.size(), rnic::kLocalWrite);
    if (!dst_mr.ok() || !src_mr.ok()) return !dst_mr.ok() ? dst_mr.status() : src_mr.status();
    // Each connection has its own policy; writes go round-robin.
    const int nconn = FLAGS_connections;
    std::vector<std::unique_ptr<engine::Connection>> initiators, targets;
    for (int k = 0; k < nconn; ++k) {
      absl::StatusOr<std::unique_ptr<engine::PathPolicy>> p =
          MakeBenchPolicy(pt, (*dst_mr)->address());
      if (!p.ok()) return p.status();
      auto ca = (*ea)->CreateConnection(std::move(*p));
      auto cb = (*eb)->CreateConnection(std::make_unique<engine::OffloadPolicy>());
      if (!ca.ok() || !cb.ok()) return !ca.ok() ? ca.status() : cb.status();
      if (auto st = (*ca)->Connect((*cb)->local_info()); !st.ok()) return st;
      if (auto st = (*cb)->Connect((*ca)->local_info()); !st.ok()) return st;
      initiators.push_back(std::move(*ca));
      targets.push_back(std::move(*cb));
    }

    const int64_t total = FLAGS_warmup + FLAGS_ops;
    AddressStream addrs(pt.pattern, pt.working_set, pt.write_size, FLAGS_seed,
                        std::max<int64_t>(1, total / 4));
    std::vector<double> lat(total, 0);
    std::vector<uint8_t> unloaded(total, 0);
    std::mutex mu;
    std::condition_variable cv;
    int64_t issued = 0, completed = 0, failed = 0;
    absl::Time measure_start, measure_end;
    const Clock& clock = (*ea)->clock();
    auto issue = [&](int64_t i) {
      uint64_t off = addrs.Next();
      if (i == FLAGS_warmup) measure_start = clock.Now();
      size_t slot = size_t(i % FLAGS_window) * pt.write_size;
      return initiators[i % nconn]->Write((*src_mr)->Sge(slot, pt.write_size),
                                          (*dst_mr)->address() + off, (*dst_mr)->rkey(),
                                          [&, i](const engine::WriteResult& w) {
                                            std::lock_guard<std::mutex> l(mu);
                                            lat[i] = absl::ToDoubleMicroseconds(w.latency);
                                            unloaded[i] = w.path == engine::Path::kUnload;
                                            failed += !w.ok();
                                            if (++completed == total) measure_end = clock.Now();
                                            cv.notify_one();
                                          });
    };
    if (fabric) {
      while (true) {
        {
          std::lock_guard<std::mutex> l(mu);
          if (completed == total || failed > 0) break;
        }
        while (issued < total && issued - completed < FLAGS_window && status.ok()) {
          status = issue(issued++);
        }
        if (!status.ok()) break;
        if ((*ea)->PollOnce() + (*eb)->PollOnce() == 0) {
          if (fabric->idle()) {
            status = absl::InternalError("simulation stalled with writes outstanding");
            break;
          }
          fabric->Run(int64_t{1} << 40);
        }
      }
    } else {
      (*ea)->Start();
      (*eb)->Start();
      std::unique_lock<std::mutex> l(mu);
      while (completed < total && failed == 0 && status.ok()) {
        while (issued < total && issued - completed < FLAGS_window && status.ok()) {
          l.unlock();
          status = issue(issued++);
          l.lock();
        }
        cv.wait_for(l, std::chrono::milliseconds(100));
      }
      l.unlock();
      (*ea)->Stop();
      (*eb)->Stop();
    }
    if (status.ok() && failed > 0) {
      status = absl::InternalError(absl::StrCat(failed, " writes failed"));
    }
    if (status.ok()) {
      const absl::Duration measured = measure_end - measure_start;
      Summarize(pt, lat, unloaded, measured, &r);
      status = AppendTrace(pt, lat, unloaded);
      if (fabric) r.mtt_misses = sim::StatsOf(*dev_b).mtt_misses;
    }
  }
  if (!status.ok()) return status;
  return r;
}

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

// Writes after each phase change until adaptive's 500-write moving mean is within 10% of the
// best static policy's mean over the second half of that phase; -1 if it never gets there.
std::vector<int64_t> Reconvergence(const std::vector<Result>& runs) {
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
    const int64_t w = 500;
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
      "%d connection(s); window %d, %lld writes per point after %lld warm-up writes, seed %llu\n",
      FLAGS_fabric.c_str(),
      Modeled() ? "MODELED (simulated fabric, virtual time)" : "MEASURED (real time)",
      FLAGS_unload_workers, StagingLanes(), FLAGS_connections, FLAGS_window,
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
      std::vector<int64_t> rc = Reconvergence(all);
      for (size_t i = 0; i < rc.size(); ++i) {
        std::printf("phase %zu: adaptive within 10%% of the best static policy after %lld writes\n",
                    i + 2, static_cast<long long>(rc[i]));
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
  std::string script = FLAGS_png + ".gp";
  std::ofstream gp(script);
  gp << "set terminal pngcairo size 1600,900 font ',10'\nset output '" << FLAGS_png << "'\n"
     << "set logscale x 2\nset key top left\nset grid\n"
     << "set format x '%.0b%B'\nset xlabel 'working set (bytes, binary prefixes)'\n"
     << "set multiplot layout 2,1 title 'writebench " << FLAGS_fabric << " ("
     << (Modeled() ? "modeled" : "measured") << "), uniform, " << s0 << " B writes'\n"
     << "set ylabel 'mean latency (us)'\n"
     << plot[0] << "\nset ylabel 'throughput (Mops/s)'\n"
     << plot[1] << "\n";
  gp << "unset multiplot\n";
  gp.close();
  int rc_gp = std::system(absl::StrCat("gnuplot '", script, "'").c_str());
  if (rc_gp != 0) {
    std::fprintf(stderr, "writebench: gnuplot failed (is gnuplot installed?)\n");
    return false;
  }
  std::printf("plot: %s\n", FLAGS_png.c_str());
  return true;
}

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
  std::vector<int64_t> rc = Reconvergence(phased);
  for (size_t i = 0; i < rc.size(); ++i) {
    std::printf(
        "  phased 4GiB, phase %zu: adaptive within 10%% of the best static policy after "
        "%lld writes\n",
        i + 2, static_cast<long long>(rc[i]));
  }
  if (!FLAGS_png.empty() && !WritePlot(all, s0)) return 1;
  return 0;
}

}  // namespace
}  // namespace unloadkv::bench

int main(int argc, char** argv) {
  gflags::SetUsageMessage("offload/unload write benchmark; see docs/benchmarks.md");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  return unloadkv::bench::Main();
}
