// ycsb: YCSB's core workloads against unloadkv, Redis, memcached, or the loopback limit (echo:
// echo_db.h), with YCSB's command line and output.
//   ycsb load unloadkv -P client/ycsb/workloads/workloada -p recordcount=100000 -threads 8 -s
//   ycsb run  redis    -P client/ycsb/workloads/workloada -p redis.port=6379 -target 5000
// Binding properties: unloadkv.server (127.0.0.1:7070), unloadkv.transport (soft, verbs, or
// sim: the kvserver and the clients in this process on the simulated fabric, figures modeled;
// `run` then loads recordcount records first, unmeasured; sim.* in client/ycsb/sim_binding.h),
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
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/ycsb/echo_db.h"
#include "client/ycsb/memcached_db.h"
#include "client/ycsb/redis_db.h"
#include "client/ycsb/runner.h"
#include "client/ycsb/sim_binding.h"
#include "client/ycsb/unloadkv_db.h"
#include "transport/base/logging.h"

namespace unloadkv::ycsb {
namespace {

constexpr char kUsage[] =
    "usage: ycsb load|run unloadkv|redis|memcached|echo [-P workloadfile]... [-p key=value]... "
    "[-threads N] [-target OPS] [-s]\n";

int Usage(const std::string& why) {
  std::fprintf(stderr, "ycsb: %s\n%s", why.c_str(), kUsage);
  return 2;
}

// Reads the arguments after the command and binding into `props` (-P, -p, -threads, -target)
// and `status` (-s); an error message, or "".
std::string ParseArgs(int argc, char** argv, Properties* props, bool* status) {
  for (int i = 3; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    if (a == "-P") {
      const char* f = next();
      if (!f) return "-P needs a file";
      if (absl::Status st = props->LoadFile(f); !st.ok()) return std::string(st.message());
    } else if (a == "-p") {
      const char* kv = next();
      if (!kv) return "-p needs key=value";
      if (absl::Status st = props->SetFromArg(kv); !st.ok()) return std::string(st.message());
    } else if (a == "-threads" || a == "-target") {
      const char* v = next();
      if (!v) return a + " needs a value";
      props->Set(a == "-threads" ? "threadcount" : "target", v, a);
    } else if (a == "-s") {
      *status = true;
    } else {
      return absl::StrCat("unknown argument '", a, "'");
    }
  }
  return "";
}

// How each client thread connects, for `binding` configured by `props`.
absl::StatusOr<DbFactory> MakeDbFactory(const std::string& binding, const Properties& props) {
  if (binding == "unloadkv") {
    ClientOptions co;
    co.server = props.GetString("unloadkv.server", "127.0.0.1:7070");
    co.transport = props.GetString("unloadkv.transport", "soft");
    co.policy = props.GetString("unloadkv.policy", "adaptive");
    auto caller = props.GetBool("unloadkv.caller_progress", true);
    if (!caller.ok()) return caller.status();
    co.caller_progress = *caller;
    co.etcd = props.GetString("unloadkv.etcd", "");
    co.cluster = props.GetString("unloadkv.cluster", "");
    co.auth_file = props.GetString("unloadkv.auth_file", "");
    co.user = props.GetString("unloadkv.user", "");
    if (co.etcd.empty() != co.cluster.empty()) {
      return absl::InvalidArgumentError("a cluster needs both unloadkv.etcd and unloadkv.cluster");
    }
    absl::StatusOr<UnloadkvDb::Layout> layout =
        UnloadkvDb::ParseLayout(props.GetString("unloadkv.layout", "record"));
    if (!layout.ok()) return layout.status();
    return DbFactory([co, layout = *layout] { return UnloadkvDb::Connect(co, layout); });
  }
  auto address = [&](const std::string& binding, const char* port) {
    return absl::StrCat(props.GetString(binding + ".host", "127.0.0.1"), ":",
                        props.GetString(binding + ".port", port));
  };
  if (binding == "memcached") {
    const std::string addr = address("memcached", "11211");
    return DbFactory([addr] { return MemcachedDb::Connect(addr); });
  }
  if (binding == "echo") {
    absl::StatusOr<WorkloadConfig> config = ReadWorkloadConfig(props);
    if (!config.ok()) return config.status();
    // What a read of a whole record returns: every field's name and value.
    const uint32_t record_bytes =
        static_cast<uint32_t>(config->field_count * (config->field_name_prefix.size() + 1 +
                                                     static_cast<size_t>(config->field_length)));
    const std::string addr = address("echo", "7000");
    return DbFactory([addr, record_bytes] { return EchoDb::Connect(addr, record_bytes); });
  }
  const std::string addr = address("redis", "6379");
  return DbFactory([addr] { return RedisDb::Connect(addr); });
}

uint64_t Errors(const Measurements& m) {
  uint64_t errors = 0;
  for (const auto& [name, s] : m.series()) {
    auto it = s.returns.find("ERROR");
    if (it != s.returns.end()) errors += it->second;
  }
  return errors;
}

// `ycsb load|run unloadkv -p unloadkv.transport=sim`: the server and clients in this process
// on the simulated fabric (client/ycsb/sim_binding.h).
int RunOnSim(const std::string& command, const Properties& props, const WorkloadConfig& config,
             RunOptions o, const std::vector<double>& percentiles) {
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

int Main(int argc, char** argv) {
  if (argc < 3) return Usage("missing command or binding");
  const std::string command = argv[1], binding = argv[2];
  if (command != "load" && command != "run") return Usage("command must be load or run");
  if (binding != "unloadkv" && binding != "redis" && binding != "memcached" && binding != "echo") {
    return Usage("binding must be unloadkv, redis, memcached or echo");
  }
  Properties props;
  bool status = false;
  if (std::string why = ParseArgs(argc, argv, &props, &status); !why.empty()) return Usage(why);
  absl::StatusOr<WorkloadConfig> config = ReadWorkloadConfig(props);
  if (!config.ok()) return Usage(std::string(config.status().message()));
  RunOptions o;
  o.load = command == "load";
  auto threads = props.GetInt("threadcount", 1, 1, 1024);
  auto target = props.GetDouble("target", 0, 0, 1e9);
  auto interval = props.GetDouble("status.interval", 10, 0.1, 3600);
  if (!threads.ok()) return Usage(std::string(threads.status().message()));
  if (!target.ok()) return Usage(std::string(target.status().message()));
  if (!interval.ok()) return Usage(std::string(interval.status().message()));
  o.threads = static_cast<int>(*threads);
  o.target_ops = *target;
  o.status_interval_s = *interval;
  o.status = status ? stderr : nullptr;
  std::vector<double> percentiles;
  for (absl::string_view p : absl::StrSplit(props.GetString("hdrhistogram.percentiles", "95,99"),
                                            ',', absl::SkipEmpty())) {
    double v;
    if (!absl::SimpleAtod(p, &v) || v <= 0 || v > 100) {
      return Usage("hdrhistogram.percentiles: numbers in (0, 100], comma-separated");
    }
    percentiles.push_back(v);
  }

  if (binding == "unloadkv" && props.GetString("unloadkv.transport", "soft") == "sim") {
    return RunOnSim(command, props, *config, o, percentiles);
  }
  absl::StatusOr<DbFactory> connect = MakeDbFactory(binding, props);
  if (!connect.ok()) return Usage(std::string(connect.status().message()));
  Workload workload(*config);
  std::fprintf(stderr, "ycsb: %s %s: %lld %s, %d threads%s\n", command.c_str(), binding.c_str(),
               static_cast<long long>(o.load ? config->insert_count : config->operation_count),
               o.load ? "records" : "operations", o.threads,
               o.target_ops > 0 ? absl::StrCat(", target ", o.target_ops, " ops/s").c_str() : "");
  absl::StatusOr<RunResult> r = RunPhase(workload, o, *connect);
  if (!r.ok()) {
    std::fprintf(stderr, "ycsb: %s\n", r.status().ToString().c_str());
    return 1;
  }
  std::fputs(FormatSummary(r->runtime, r->operations, r->measurements, percentiles).c_str(),
             stdout);
  return Errors(r->measurements) == 0 ? 0 : 1;
}

}  // namespace
}  // namespace unloadkv::ycsb

int main(int argc, char** argv) {
  unloadkv::SetMinLogLevel(unloadkv::LogLevel::kError);
  return unloadkv::ycsb::Main(argc, argv);
}
