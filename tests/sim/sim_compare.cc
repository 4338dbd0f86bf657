// sim_compare: YCSB's load phase and workloads A-F on the simulated fabric under the offload,
// unload and adaptive path policies, at a working set that fits the modeled NIC's translation
// cache and at one far beyond its reach; a table, a CSV and PNG plots, all MODELED
// (docs/sim-kv.md).
//
//   bazel run -c opt //tests/sim:sim_compare -- --out_dir=/tmp/sim_compare
//
// Per size and policy, one simulated kvserver (the real server code, client/ycsb/
// sim_binding.h) is loaded (the "load" row) and then runs A, B, C, F, D, E in that order, as
// one long-lived server would; every policy sees the same seeds.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gflags/gflags.h"
#include "tests/sim/sim_binding.h"
#include "transport/base/logging.h"
#include "transport/bench/gnuplot.h"

DEFINE_string(sizes, "small,large",
              "working sets: small (fits the NIC's translation cache), large");
DEFINE_string(workloads, "load,a,b,c,f,d,e", "phases, in order (load first)");
DEFINE_string(policies, "offload,unload,adaptive", "path policies of the clients' value writes");
DEFINE_int64(operations, 400000, "operations per workload (the load phase inserts every record)");
DEFINE_int64(scan_operations, 100000,
             "operations of workload E (95% scans of up to 100 records, the slowest to simulate)");
DEFINE_int64(small_records, 8192, "records of the small working set (1 KiB slot each)");
DEFINE_int64(large_records, 1100000, "records of the large working set (1 KiB slot each)");
DEFINE_int32(threads, 8, "YCSB client threads (simulated clients, one request at a time)");
DEFINE_uint64(seed, 1, "workload seed (the same for every policy)");
DEFINE_bool(bound, true,
            "also run the large working set offloaded on a NIC whose translation misses cost "
            "nothing (policy 'bound'): no split of the writes between the paths can beat it");
DEFINE_bool(memory_protection, true,
            "grants as memory windows on the client's connection (kvserver's default); false: "
            "the arena writable through its rkey, as before docs/security.md's memory protection");
DEFINE_int32(jobs, 2, "series (size x policy) run at once, each in a process of its own");
DEFINE_string(series, "",
              "internal: run the one series SIZE:POLICY (or SIZE:POLICY:LENGTH, short runs) and "
              "print its CSV lines");
DEFINE_string(run_lengths, "",
              "short runs instead of the phases above: run lengths in operations, e.g. "
              "5000,20000,100000,300000. Per record size, policy and length, a fresh server "
              "loaded with --short_records records, and for each of load (its first LENGTH "
              "inserts), A and F LENGTH operations by fresh client connections");
DEFINE_string(
    short_sizes, "1k,100b",
    "record sizes of the short runs: 1k (one 1000-byte field), 100b (one 100-byte field)");
DEFINE_int64(short_records, 300000, "records a short-run server holds");
DEFINE_string(out_dir, "",
              "where to write sim_compare.{txt,csv} and the PNGs (default: "
              "sim_compare/ under the directory bazel run was called from)");

namespace unloadkv::ycsb {
namespace {

// The record shape: one 1000-byte field, so a record is one value in one 1 KiB arena slot and
// the large working set (1.1 GiB of slots) is 70x the reach of the modeled MTT (4096 entries
// x 4 KiB = 16 MiB) with a million keys (YCSB's 10 x 100 B would need ten million).
constexpr int kFieldCount = 1;
constexpr int kFieldLength = 1000;

// One phase of one series, as measured (and as written to and read from the CSV).
struct Row {
  std::string size, policy, workload;
  int64_t records = 0;
  uint64_t operations = 0;
  double virtual_s = 0, ops_per_s = 0;
  double read_p50 = 0, read_p99 = 0, write_p50 = 0, write_p99 = 0;  // microseconds
  uint64_t offloaded = 0, unloaded = 0;
  double core_utilization = 0;
  uint64_t misses = 0;
  double real_s = 0;
  double unloaded_share() const {
    return offloaded + unloaded == 0 ? 0 : static_cast<double>(unloaded) / (offloaded + unloaded);
  }
};

constexpr char kCsvHeader[] =
    "modeled,size,records,policy,phase,operations,virtual_s,ops_per_s,read_p50_us,read_p99_us,"
    "write_p50_us,write_p99_us,value_writes_offloaded,value_writes_unloaded,unloaded_share,"
    "server_core_utilization,server_translation_misses,real_s";

std::string CsvLine(const Row& r) {
  return absl::StrFormat("yes,%s,%d,%s,%s,%d,%.9f,%.1f,%.3f,%.3f,%.3f,%.3f,%d,%d,%.4f,%.4f,%d,%.1f",
                         r.size, r.records, r.policy, r.workload, r.operations, r.virtual_s,
                         r.ops_per_s, r.read_p50, r.read_p99, r.write_p50, r.write_p99, r.offloaded,
                         r.unloaded, r.unloaded_share(), r.core_utilization, r.misses, r.real_s);
}

absl::StatusOr<Row> ParseCsvLine(absl::string_view line) {
  std::vector<std::string> f = absl::StrSplit(line, ',');
  Row r;
  double share;
  if (f.size() != 18 || f[0] != "yes" || !absl::SimpleAtoi(f[2], &r.records) ||
      !absl::SimpleAtoi(f[5], &r.operations) || !absl::SimpleAtod(f[6], &r.virtual_s) ||
      !absl::SimpleAtod(f[7], &r.ops_per_s) || !absl::SimpleAtod(f[8], &r.read_p50) ||
      !absl::SimpleAtod(f[9], &r.read_p99) || !absl::SimpleAtod(f[10], &r.write_p50) ||
      !absl::SimpleAtod(f[11], &r.write_p99) || !absl::SimpleAtoi(f[12], &r.offloaded) ||
      !absl::SimpleAtoi(f[13], &r.unloaded) || !absl::SimpleAtod(f[14], &share) ||
      !absl::SimpleAtod(f[15], &r.core_utilization) || !absl::SimpleAtoi(f[16], &r.misses) ||
      !absl::SimpleAtod(f[17], &r.real_s)) {
    return absl::InternalError(absl::StrCat("bad series line: ", line));
  }
  r.size = f[1];
  r.policy = f[3];
  r.workload = f[4];
  return r;
}

// p50 and p99 of the first series present of `names`, in microseconds (recorded in ns).
std::pair<double, double> Percentiles(const Measurements& m,
                                      std::initializer_list<const char*> names) {
  for (const char* n : names) {
    auto it = m.series().find(n);
    if (it == m.series().end() || it->second.histogram->count() == 0) continue;
    return {it->second.histogram->Percentile(50) / 1000.0,
            it->second.histogram->Percentile(99) / 1000.0};
  }
  return {0, 0};
}

absl::StatusOr<Properties> WorkloadProperties(const std::string& workload, int64_t records,
                                              int field_length = kFieldLength) {
  Properties props;
  const std::string file =
      absl::StrCat("client/ycsb/workloads/workload", workload == "load" ? "a" : workload);
  if (absl::Status st = props.LoadFile(file); !st.ok()) return st;
  props.Set("recordcount", absl::StrCat(records), "sim_compare");
  props.Set("operationcount",
            absl::StrCat(workload == "e" ? FLAGS_scan_operations : FLAGS_operations),
            "sim_compare");
  props.Set("fieldcount", absl::StrCat(kFieldCount), "sim_compare");
  props.Set("fieldlength", absl::StrCat(field_length), "sim_compare");
  return props;
}

// Sets what every phase of a series shares: the policy (the bound: offloaded, misses free),
// the seed and memory protection.
void SetSeriesProperties(const std::string& policy, Properties* p) {
  // The bound: every write offloaded, translation misses free (miss_pcie_reads=0). Unloading a
  // write can at best save its miss: its staged copy lands through a cached ring translation,
  // then costs the target's CPU, and the PUT behind it waits for that copy.
  p->Set("unloadkv.policy", policy == "bound" ? "offload" : policy, "sim_compare");
  if (policy == "bound") p->Set("sim.miss_pcie_reads", "0", "sim_compare");
  p->Set("sim.seed", absl::StrCat(FLAGS_seed), "sim_compare");
  p->Set("sim.memory_protection", FLAGS_memory_protection ? "true" : "false", "sim_compare");
}

// Runs one phase of `workload_props` on `sim` by fresh client connections and measures it.
absl::StatusOr<Row> RunOnePhase(SimYcsb& sim, const Properties& workload_props, bool load,
                                const std::string& size, const std::string& policy,
                                const std::string& name, int64_t records) {
  absl::StatusOr<WorkloadConfig> config = ReadWorkloadConfig(workload_props);
  if (!config.ok()) return config.status();
  Workload workload(*config);
  RunOptions o;
  o.load = load;
  o.threads = FLAGS_threads;
  o.status = nullptr;
  o.latency_unit = absl::Nanoseconds(1);
  const absl::Time start = absl::Now();
  absl::StatusOr<SimPhase> phase = sim.Run(workload, o);
  if (!phase.ok()) return phase.status();
  for (const auto& [series_name, series] : phase->run.measurements.series()) {
    if (series.returns.count("ERROR") > 0) {
      return absl::InternalError(absl::StrCat(size, " ", policy, " ", name, ": ",
                                              series.returns.at("ERROR"), " ", series_name,
                                              " errors"));
    }
  }
  Row r;
  r.size = size;
  r.policy = policy;
  r.workload = name;
  r.records = records;
  r.operations = phase->run.operations;
  r.virtual_s = absl::ToDoubleSeconds(phase->run.runtime);
  r.ops_per_s = r.virtual_s > 0 ? r.operations / r.virtual_s : 0;
  std::tie(r.read_p50, r.read_p99) = Percentiles(phase->run.measurements, {"READ", "SCAN"});
  std::tie(r.write_p50, r.write_p99) = Percentiles(phase->run.measurements, {"UPDATE", "INSERT"});
  r.offloaded = phase->offloaded;
  r.unloaded = phase->unloaded;
  r.core_utilization = phase->server_core_utilization;
  r.misses = phase->mtt_misses;
  r.real_s = absl::ToDoubleSeconds(absl::Now() - start);
  std::fprintf(
      stderr, "[%s %s] %-4s %7llu ops %8.3f Mops/s modeled, %5.1f%% unloaded (%.0f s real)\n",
      size.c_str(), policy.c_str(), name.c_str(), static_cast<unsigned long long>(r.operations),
      r.ops_per_s / 1e6, 100 * r.unloaded_share(), r.real_s);
  return r;
}

absl::Status CheckReads(const SimYcsb& sim, const std::string& what) {
  const ValueLog::Counts c = sim.log().counts();
  if (c.bad_reads > 0 || c.bad_scanned_values > 0) {
    return absl::InternalError(
        absl::StrCat(what, ": ", c.bad_reads, " bad reads: ", c.first_problem));
  }
  return absl::OkStatus();
}

// Runs every phase of one size under one policy on one simulated server.
absl::Status RunSeries(const std::string& size, int64_t records, const std::string& policy,
                       const std::vector<std::string>& workloads, std::vector<Row>* rows) {
  absl::StatusOr<Properties> base = WorkloadProperties("a", records);
  if (!base.ok()) return base.status();
  SetSeriesProperties(policy, &*base);
  absl::StatusOr<WorkloadConfig> base_config = ReadWorkloadConfig(*base);
  if (!base_config.ok()) return base_config.status();
  // The arena is sized for the records and every insert D and E may add.
  WorkloadConfig sizing = *base_config;
  sizing.insert = 0.1;
  absl::StatusOr<SimOptions> so = ReadSimOptions(*base, sizing);
  if (!so.ok()) return so.status();
  absl::StatusOr<std::unique_ptr<SimYcsb>> sim = SimYcsb::Create(*so, kFieldCount);
  if (!sim.ok()) return sim.status();
  for (const std::string& w : workloads) {
    absl::StatusOr<Properties> props = WorkloadProperties(w, records);
    if (!props.ok()) return props.status();
    absl::StatusOr<Row> r = RunOnePhase(**sim, *props, w == "load", size, policy, w, records);
    if (!r.ok()) return r.status();
    rows->push_back(std::move(*r));
  }
  return CheckReads(**sim, absl::StrCat(size, " ", policy));
}

// One short-run series: a fresh server of --short_records records of `size` ("1k" or "100b"),
// then, each by fresh client connections (a new connection's policy knows nothing): the first
// `length` inserts of the load (measured, row "load"), the rest of the load (not measured), A
// and F `length` operations each.
absl::Status RunShortSeries(const std::string& size, const std::string& policy, int64_t length,
                            std::vector<Row>* rows) {
  const int field_length = size == "1k" ? 1000 : 100;
  const int64_t records = FLAGS_short_records;
  const int64_t first = std::min(length, records);
  struct Phase {
    const char* name;
    const char* file;
    int64_t insert_start, insert_count;
  } phases[] = {{"load", "load", 0, first},
                {"fill", "load", first, records - first},
                {"a", "a", 0, 0},
                {"f", "f", 0, 0}};
  std::unique_ptr<SimYcsb> sim;
  for (const Phase& ph : phases) {
    const bool load = std::string(ph.file) == "load";
    if (load && ph.insert_count == 0) continue;
    absl::StatusOr<Properties> props = WorkloadProperties(ph.file, records, field_length);
    if (!props.ok()) return props.status();
    SetSeriesProperties(policy, &*props);
    props->Set("operationcount", absl::StrCat(length), "sim_compare");
    if (load) {
      props->Set("insertstart", absl::StrCat(ph.insert_start), "sim_compare");
      props->Set("insertcount", absl::StrCat(ph.insert_count), "sim_compare");
    }
    if (sim == nullptr) {
      absl::StatusOr<WorkloadConfig> config = ReadWorkloadConfig(*props);
      if (!config.ok()) return config.status();
      absl::StatusOr<SimOptions> so = ReadSimOptions(*props, *config);
      if (!so.ok()) return so.status();
      absl::StatusOr<std::unique_ptr<SimYcsb>> made = SimYcsb::Create(*so, kFieldCount);
      if (!made.ok()) return made.status();
      sim = std::move(*made);
    }
    absl::StatusOr<Row> r = RunOnePhase(*sim, *props, load, size, policy, ph.name, records);
    if (!r.ok()) return r.status();
    if (std::string(ph.name) != "fill") rows->push_back(std::move(*r));
  }
  return CheckReads(*sim, absl::StrCat(size, " ", policy, " ", length));
}

// The row of `size`, `policy` and `workload` (with `operations` operations, when nonzero: the
// short runs have one row per run length).
const Row* Find(const std::vector<Row>& rows, const std::string& size, const std::string& policy,
                const std::string& workload, int64_t operations = 0) {
  for (const Row& r : rows) {
    if (r.size == size && r.policy == policy && r.workload == workload &&
        (operations == 0 || static_cast<int64_t>(r.operations) == operations)) {
      return &r;
    }
  }
  return nullptr;
}

// Throughput of policy `a` over policy `b` for one size and phase; -1 when either did not run.
double Ratio(const std::vector<Row>& rows, const std::string& size, const std::string& a,
             const std::string& b, const std::string& workload) {
  const Row* x = Find(rows, size, a, workload);
  const Row* y = Find(rows, size, b, workload);
  if (x == nullptr || y == nullptr || y->ops_per_s == 0) return -1;
  return x->ops_per_s / y->ops_per_s;
}

std::string Table(const std::vector<Row>& rows, const std::vector<std::string>& sizes,
                  const std::vector<std::string>& workloads,
                  const std::vector<std::string>& policies) {
  std::string out = absl::StrCat(
      "MODELED: YCSB on the simulated fabric, virtual time (docs/sim-kv.md); ", FLAGS_threads,
      " client threads, 1 x ", kFieldLength, " B field per record, ", FLAGS_operations,
      " operations per workload (E: ", FLAGS_scan_operations, "), seed ", FLAGS_seed,
      ", memory protection ", FLAGS_memory_protection ? "on" : "off", "\n");
  for (const std::string& size : sizes) {
    const Row* any = nullptr;
    for (const Row& r : rows) {
      if (r.size == size) any = &r;
    }
    if (any == nullptr) continue;
    absl::StrAppend(&out, "\n", size, " working set: ", any->records, " records (",
                    any->records * 1024 >> 20, " MiB of 1 KiB slots)\n");
    absl::StrAppend(&out, absl::StrFormat("%-5s %-9s %10s %7s | %8s %8s | %8s %8s | %8s %6s\n",
                                          "phase", "policy", "ops/s", "x offl", "read p50",
                                          "p99 us", "write p50", "p99 us", "unloaded", "cores"));
    std::vector<std::string> shown = policies;
    shown.push_back("bound");  // rows only where it ran (--bound, large)
    for (const std::string& w : workloads) {
      for (const std::string& p : shown) {
        const Row* r = Find(rows, size, p, w);
        if (r == nullptr) continue;
        const double rp50 = r->read_p50, rp99 = r->read_p99;
        const double wp50 = r->write_p50, wp99 = r->write_p99;
        const double x = std::max(0.0, Ratio(rows, size, p, "offload", w));
        absl::StrAppend(
            &out, absl::StrFormat("%-5s %-9s %10.0f %7.3f | %8.2f %8.2f | %8.2f %8.2f | %7.1f%% "
                                  "%5.1f%%\n",
                                  w, p, r->ops_per_s, x, rp50, rp99, wp50, wp99,
                                  100 * r->unloaded_share(), 100 * r->core_utilization));
      }
    }
  }
  return out;
}

// The targets of docs/sim-kv.md, each with its measured figure.
std::string Targets(const std::vector<Row>& rows, const std::vector<std::string>& workloads) {
  std::string out = "\nTargets (MODELED):\n";
  auto ratio = [&](const std::string& size, const std::string& a, const std::string& b,
                   const std::string& w) { return Ratio(rows, size, a, b, w); };
  auto line = [&](const std::string& what, double v, double need) {
    if (v < 0) return;
    absl::StrAppend(&out, absl::StrFormat("  %-52s %6.3f (target >= %.2f) %s\n", what, v, need,
                                          v >= need ? "met" : "MISSED"));
  };
  const struct {
    const char* phase;
    const char* name;
    double need;
  } speedups[] = {{"load", "load", 1.25}, {"a", "A", 1.10}, {"f", "F", 1.05}};
  for (const auto& t : speedups) {
    line(absl::StrCat("large, ", t.name, ": adaptive / offload"),
         ratio("large", "adaptive", "offload", t.phase), t.need);
    const double bound = ratio("large", "bound", "offload", t.phase);
    if (bound >= 0) {
      absl::StrAppend(
          &out,
          absl::StrFormat(
              "  %-52s %6.3f (%s)\n", "  bound: every miss free, all offloaded / offload", bound,
              bound < t.need ? "the target is beyond any split" : "reachable in principle"));
    }
  }
  for (const std::string& size : {"small", "large"}) {
    for (const std::string& w : workloads) {
      const double o = ratio(size, "adaptive", "offload", w);
      const double u = ratio(size, "adaptive", "unload", w);
      if (o < 0 || u < 0) continue;
      line(absl::StrCat(size, ", ", w, ": adaptive / better static"), std::min(o, u), 0.97);
    }
  }
  for (const std::string& w : workloads) {
    line(absl::StrCat("small, ", w, ": adaptive / offload"),
         ratio("small", "adaptive", "offload", w), 0.97);
  }
  return out;
}

std::string Csv(const std::vector<Row>& rows) {
  std::string out = absl::StrCat(kCsvHeader, "\n");
  for (const Row& r : rows) absl::StrAppend(&out, CsvLine(r), "\n");
  return out;
}

// Two PNGs through gnuplot: throughput relative to offload-only, and the unloaded share, per
// phase, one panel per size, one bar per policy. False (after saying why) without gnuplot.
bool Plot(const std::string& dir, const std::vector<Row>& rows,
          const std::vector<std::string>& sizes, const std::vector<std::string>& workloads,
          const std::vector<std::string>& policies) {
  const std::string data = dir + "/sim_compare.dat";
  {
    std::ofstream d(data);
    for (const std::string& size : sizes) {
      d << "# " << size << "\n# phase";
      for (const std::string& p : policies) d << ' ' << p << ' ' << p << "_unloaded";
      d << '\n';
      for (const std::string& w : workloads) {
        d << w;
        for (const std::string& p : policies) {
          const Row* r = Find(rows, size, p, w);
          d << ' ' << std::max(0.0, Ratio(rows, size, p, "offload", w)) << ' '
            << (r != nullptr ? 100 * r->unloaded_share() : 0);
        }
        d << '\n';
      }
      d << "\n\n";
    }
  }
  std::string script =
      "set terminal pngcairo size 1100,700\nset style data histogram\n"
      "set style histogram clustered gap 1\nset style fill solid 0.8 border -1\n"
      "set key top left\nset grid ytics\n";
  for (int plot = 0; plot < 2; ++plot) {
    absl::StrAppend(&script, "set output '", dir,
                    plot == 0 ? "/sim_compare_throughput.png'\n" : "/sim_compare_unloaded.png'\n");
    absl::StrAppend(&script, "set multiplot layout ", sizes.size(),
                    ",1 title 'MODELED: YCSB on the simulated fabric, ",
                    plot == 0 ? "throughput / offload-only" : "value writes unloaded (%)", "'\n");
    for (size_t s = 0; s < sizes.size(); ++s) {
      absl::StrAppend(&script, "set title '", sizes[s], " working set'\n",
                      plot == 0 ? "set yrange [0:*]\nset ylabel 'x offload-only'\n"
                                : "set yrange [0:105]\nset ylabel '% unloaded'\n",
                      "plot ");
      for (size_t p = 0; p < policies.size(); ++p) {
        absl::StrAppend(&script, p ? ", " : "", "'", data, "' index ", s, " using ",
                        2 + 2 * p + plot, ":xtic(1) title '", policies[p], "'");
      }
      absl::StrAppend(&script, "\n");
    }
    absl::StrAppend(&script, "unset multiplot\n");
  }
  if (absl::Status st = bench::RunGnuplot(dir + "/sim_compare.gp", script); !st.ok()) {
    std::fprintf(stderr, "sim_compare: %s; no PNGs\n", std::string(st.message()).c_str());
    return false;
  }
  return true;
}

// The short-run table: per record size, phase and run length, each policy's throughput over
// offload-only's, the unloaded shares, and adaptive over the better static policy; then the
// targets (at 20,000 operations, adaptive within 3% of the better static policy).
std::string ShortTable(const std::vector<Row>& rows, const std::vector<std::string>& sizes,
                       const std::vector<int64_t>& lengths) {
  std::string out = absl::StrCat(
      "MODELED: short YCSB runs on the simulated fabric, virtual time (docs/sim-kv.md); ",
      FLAGS_threads,
      " client threads, fresh client connections per run, a fresh server per "
      "series of ",
      FLAGS_short_records, " records, seed ", FLAGS_seed, "\n");
  std::string targets = "\nTargets (MODELED):\n";
  for (const std::string& size : sizes) {
    absl::StrAppend(
        &out, "\n", size == "1k" ? "one 1000 B field" : "one 100 B field", " per record\n",
        absl::StrFormat("%-5s %7s | %10s | %7s %7s | %8s %8s | %8s\n", "phase", "ops", "offl ops/s",
                        "unl x", "adapt x", "unl shr", "adapt shr", "a/better"));
    for (const char* w : {"load", "a", "f"}) {
      for (int64_t len : lengths) {
        const Row* o = Find(rows, size, "offload", w, len);
        const Row* u = Find(rows, size, "unload", w, len);
        const Row* a = Find(rows, size, "adaptive", w, len);
        if (o == nullptr || u == nullptr || a == nullptr || o->ops_per_s == 0) continue;
        const double ux = u->ops_per_s / o->ops_per_s, ax = a->ops_per_s / o->ops_per_s;
        const double vs_better = ax / std::max(1.0, ux);
        absl::StrAppend(&out,
                        absl::StrFormat("%-5s %7d | %10.0f | %7.3f %7.3f | %7.1f%% %7.1f%% | "
                                        "%8.3f\n",
                                        w, len, o->ops_per_s, ux, ax, 100 * u->unloaded_share(),
                                        100 * a->unloaded_share(), vs_better));
        if (len == 20000) {
          absl::StrAppend(&targets,
                          absl::StrFormat("  %-52s %6.3f (target >= 0.97) %s\n",
                                          absl::StrCat(size, ", ", w,
                                                       " at 20000: adaptive / "
                                                       "better static"),
                                          vs_better, vs_better >= 0.97 ? "met" : "MISSED"));
        }
      }
    }
  }
  return out + targets;
}

// Runs every (size, policy) series in a child process (this binary with --series), --jobs at
// a time: one simulated world per process, so each keeps its fixed arena address. Returns the
// rows in size, policy, phase order.
absl::StatusOr<std::vector<Row>> RunAllSeries(const std::string& dir,
                                              const std::vector<std::string>& series) {
  struct Child {
    std::string series, out;
    pid_t pid = -1;
  };
  std::vector<Child> children;
  for (const std::string& s : series) {
    children.push_back(
        {s, absl::StrCat(dir, "/series_", absl::StrReplaceAll(s, {{":", "_"}}), ".csv")});
  }
  const std::vector<std::string> args = {
      "--workloads=" + FLAGS_workloads,
      absl::StrCat("--operations=", FLAGS_operations),
      absl::StrCat("--scan_operations=", FLAGS_scan_operations),
      absl::StrCat("--small_records=", FLAGS_small_records),
      absl::StrCat("--large_records=", FLAGS_large_records),
      absl::StrCat("--threads=", FLAGS_threads),
      absl::StrCat("--seed=", FLAGS_seed),
      absl::StrCat("--memory_protection=", FLAGS_memory_protection ? "true" : "false"),
      absl::StrCat("--short_records=", FLAGS_short_records)};
  size_t next = 0, running = 0, failed = 0;
  while (next < children.size() || running > 0) {
    if (next < children.size() && running < static_cast<size_t>(FLAGS_jobs)) {
      Child& c = children[next++];
      std::vector<std::string> argv = {"/proc/self/exe", "--series=" + c.series};
      argv.insert(argv.end(), args.begin(), args.end());
      c.pid = fork();
      if (c.pid == 0) {
        FILE* out = std::freopen(c.out.c_str(), "w", stdout);
        if (out == nullptr) _exit(127);
        std::vector<char*> cargv;
        for (std::string& a : argv) cargv.push_back(a.data());
        cargv.push_back(nullptr);
        execv(cargv[0], cargv.data());
        _exit(127);
      }
      if (c.pid < 0) return absl::InternalError("fork failed");
      ++running;
      continue;
    }
    int status = 0;
    const pid_t pid = wait(&status);
    if (pid < 0) return absl::InternalError("wait failed");
    --running;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  if (failed > 0) return absl::InternalError(absl::StrCat(failed, " series failed (see above)"));
  std::vector<Row> rows;
  for (const Child& c : children) {
    std::ifstream in(c.out);
    std::string line;
    while (std::getline(in, line)) {
      absl::StatusOr<Row> r = ParseCsvLine(line);
      if (!r.ok()) return r.status();
      rows.push_back(*r);
    }
    std::remove(c.out.c_str());
  }
  return rows;
}

// --run_lengths: every (record size, policy, length) series, then the short-run table.
int ShortMain(const std::string& dir, const std::vector<std::string>& sizes,
              const std::vector<int64_t>& lengths) {
  std::vector<std::string> series;
  for (const std::string& size : sizes) {
    for (const char* p : {"offload", "unload", "adaptive"}) {
      for (int64_t len : lengths) series.push_back(absl::StrCat(size, ":", p, ":", len));
    }
  }
  absl::StatusOr<std::vector<Row>> ran = RunAllSeries(dir, series);
  if (!ran.ok()) {
    std::fprintf(stderr, "sim_compare: %s\n", ran.status().ToString().c_str());
    return 1;
  }
  const std::string table = ShortTable(*ran, sizes, lengths);
  std::fputs(table.c_str(), stdout);
  std::ofstream(dir + "/sim_short_runs.txt") << table;
  std::ofstream(dir + "/sim_short_runs.csv") << Csv(*ran);
  std::fprintf(stderr, "sim_compare: wrote %s/sim_short_runs.{txt,csv}\n", dir.c_str());
  return 0;
}

int Main() {
  std::vector<int64_t> lengths;
  for (absl::string_view s : absl::StrSplit(FLAGS_run_lengths, ',', absl::SkipEmpty())) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(s, &n) || n < 1 || n > 100000000) {
      std::fprintf(stderr, "sim_compare: --run_lengths: '%s' is not an operation count\n",
                   std::string(s).c_str());
      return 2;
    }
    lengths.push_back(n);
  }
  const std::vector<std::string> short_sizes =
      absl::StrSplit(FLAGS_short_sizes, ',', absl::SkipEmpty());
  for (const std::string& s : short_sizes) {
    if (s != "1k" && s != "100b") {
      std::fprintf(stderr, "sim_compare: --short_sizes: '%s' is not 1k or 100b\n", s.c_str());
      return 2;
    }
  }
  if (FLAGS_short_records < 1) {
    std::fprintf(stderr, "sim_compare: --short_records must be positive\n");
    return 2;
  }
  const std::vector<std::string> sizes = absl::StrSplit(FLAGS_sizes, ',', absl::SkipEmpty());
  const std::vector<std::string> workloads =
      absl::StrSplit(FLAGS_workloads, ',', absl::SkipEmpty());
  const std::vector<std::string> policies = absl::StrSplit(FLAGS_policies, ',', absl::SkipEmpty());
  for (const std::string& s : sizes) {
    if (s != "small" && s != "large") {
      std::fprintf(stderr, "sim_compare: --sizes: '%s' is not small or large\n", s.c_str());
      return 2;
    }
  }
  for (size_t i = 0; i < workloads.size(); ++i) {
    const std::string& w = workloads[i];
    if (w == "load" ? i != 0 : (w.size() != 1 || w[0] < 'a' || w[0] > 'f')) {
      std::fprintf(stderr, "sim_compare: --workloads: '%s' is not load (first) or a..f\n",
                   w.c_str());
      return 2;
    }
  }
  if (workloads.empty() || workloads[0] != "load") {
    std::fprintf(stderr,
                 "sim_compare: --workloads must start with load (the server starts "
                 "empty)\n");
    return 2;
  }
  for (const std::string& p : policies) {
    if (!engine::MakePolicy(p).ok()) {
      std::fprintf(stderr, "sim_compare: --policies: unknown policy '%s'\n", p.c_str());
      return 2;
    }
  }
  if (FLAGS_operations < 1 || FLAGS_scan_operations < 1 || FLAGS_threads < 1 ||
      FLAGS_threads > 1024 || FLAGS_jobs < 1 || FLAGS_small_records < 1 ||
      FLAGS_large_records < 1) {
    std::fprintf(stderr,
                 "sim_compare: --operations, --threads (1..1024), --jobs and the record counts "
                 "must be positive\n");
    return 2;
  }
  std::string dir = FLAGS_out_dir;
  if (dir.empty()) {
    const char* cwd = std::getenv("BUILD_WORKING_DIRECTORY");
    dir = absl::StrCat(cwd != nullptr ? cwd : ".", "/sim_compare");
  }
  if (std::system(absl::StrCat("mkdir -p '", dir, "'").c_str()) != 0) {
    std::fprintf(stderr, "sim_compare: cannot create %s\n", dir.c_str());
    return 1;
  }
  if (!FLAGS_series.empty()) {  // a child: one series, its rows on stdout
    const std::vector<std::string> sp = absl::StrSplit(FLAGS_series, ':');
    std::vector<Row> rows;
    int64_t length = 0;
    absl::Status st =
        sp.size() == 2
            ? RunSeries(sp[0], sp[0] == "small" ? FLAGS_small_records : FLAGS_large_records, sp[1],
                        workloads, &rows)
        : sp.size() == 3 && absl::SimpleAtoi(sp[2], &length) && length > 0
            ? RunShortSeries(sp[0], sp[1], length, &rows)
            : absl::InvalidArgumentError("--series=SIZE:POLICY or SIZE:POLICY:LENGTH");
    if (!st.ok()) {
      std::fprintf(stderr, "sim_compare: %s\n", st.ToString().c_str());
      return 1;
    }
    for (const Row& r : rows) std::printf("%s\n", CsvLine(r).c_str());
    return 0;
  }
  if (!lengths.empty()) return ShortMain(dir, short_sizes, lengths);
  std::vector<std::string> series;
  for (const std::string& size : sizes) {
    std::vector<std::string> shown = policies;
    if (FLAGS_bound && size == "large") shown.push_back("bound");
    for (const std::string& p : shown) series.push_back(absl::StrCat(size, ":", p));
  }
  absl::StatusOr<std::vector<Row>> ran = RunAllSeries(dir, series);
  if (!ran.ok()) {
    std::fprintf(stderr, "sim_compare: %s\n", ran.status().ToString().c_str());
    return 1;
  }
  const std::vector<Row>& rows = *ran;
  const std::string table = Table(rows, sizes, workloads, policies) + Targets(rows, workloads);
  std::fputs(table.c_str(), stdout);
  std::ofstream(dir + "/sim_compare.txt") << table;
  std::ofstream(dir + "/sim_compare.csv") << Csv(rows);
  const bool plotted = Plot(dir, rows, sizes, workloads, policies);
  std::fprintf(stderr, "sim_compare: wrote %s/sim_compare.{txt,csv}%s\n", dir.c_str(),
               plotted ? " and sim_compare_{throughput,unloaded}.png" : "");
  return 0;
}

}  // namespace
}  // namespace unloadkv::ycsb

int main(int argc, char** argv) {
  gflags::SetUsageMessage("YCSB on the simulated fabric: offload vs unload vs adaptive");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  unloadkv::SetMinLogLevel(unloadkv::LogLevel::kError);
  return unloadkv::ycsb::Main();
}
