// The ycsb command line: parsing, the bindings, a phase and its summary (ycsb_cli.h).
#include "client/ycsb/ycsb_cli.h"

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/ycsb/echo_db.h"
#include "client/ycsb/memcached_db.h"
#include "client/ycsb/redis_db.h"
#include "client/ycsb/unloadkv_db.h"

namespace unloadkv::ycsb {
namespace {

constexpr char kUsage[] =
    "usage: ycsb load|run unloadkv|redis|memcached|echo [-P workloadfile]... [-p key=value]... "
    "[-threads N] [-target OPS] [-s]\n";

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

}  // namespace

int Usage(const std::string& why) {
  std::fprintf(stderr, "ycsb: %s\n%s", why.c_str(), kUsage);
  return 2;
}

uint64_t Errors(const Measurements& m) {
  uint64_t errors = 0;
  for (const auto& [name, s] : m.series()) {
    auto it = s.returns.find("ERROR");
    if (it != s.returns.end()) errors += it->second;
  }
  return errors;
}

int YcsbMain(int argc, char** argv, const SimRunner& sim) {
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
    if (!sim) {
      return Usage(
          "unloadkv.transport=sim runs the server in this process: use the build that "
          "embeds it, bazel run -c opt //tests/sim:ycsb -- ...");
    }
    return sim(CliRun{command, props, *config, o, percentiles});
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

}  // namespace unloadkv::ycsb
