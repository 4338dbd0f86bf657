// kv_bench: PUT and GET latency and throughput of a kvserver over the soft transport on
// loopback, at 1, 8 and 64 requests in flight, next to the raw soft-RNIC SEND round trip of the
// same size measured by rnic_bench in the same run, so the cost of the KV layer is visible.
//   bazel run -c opt //tests/bench:kv_bench -- [--value_size=256] [--ops=20000]
// Three processes: kvserver, rnic_bench (the baseline) and this one. At 1 in flight the baseline
// and the KV points alternate in rounds, so that drift of the machine hits both alike.
//   bazel run -c opt //tests/bench:kv_bench -- --auth_compare
// instead measures what authentication costs (docs/security.md): two kvservers, one with an
// auth file and one without, in alternating rounds of connects, 1-in-flight PUT/GET p50 and
// 64-in-flight throughput; each round's ratio on/off next to the run-to-run spread.
//   bazel run -c opt //tests/bench:kv_bench -- --protection_compare [--policy=unload]
// the same for memory protection (docs/security.md): servers with and without
// --memory_protection, plus GRANT round trips of 1 and 64 slots, where windows are bound.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/client.h"
#include "gflags/gflags.h"
#include "proto/kv.pb.h"
#include "tests/bench/client_load.h"
#include "tests/kv/raw_connection.h"
#include "tests/support/subprocess.h"
#include "transport/base/logging.h"
#include "transport/base/mutex.h"
#include "transport/base/percentile.h"

DEFINE_uint32(value_size, 256, "value bytes (and the SEND size of the baseline)");
DEFINE_uint64(ops, 20000, "operations per (kind, in-flight) point");
DEFINE_uint64(keys, 10000, "key space (preloaded before the GET points)");
DEFINE_string(in_flight, "1,8,64", "requests in flight per point");
DEFINE_string(policy, "adaptive", "path policy of the value writes");
DEFINE_int32(rounds, 5, "1 in flight: rounds of (rnic_bench, PUT, GET), ops/rounds each");
DEFINE_bool(auth_compare, false,
            "measure authentication's cost: servers with and without an auth file, "
            "alternated in --rounds rounds");
DEFINE_bool(protection_compare, false,
            "measure memory protection's cost: servers with and without it, alternated in "
            "--rounds rounds, plus GRANT round trips of 1 and 64 slots");
DEFINE_bool(caller_progress, true,
            "the calling thread drives the connection (ClientOptions::caller_progress)");

namespace unloadkv {
namespace {

struct Rtt {
  double p50 = 0, p99 = 0;
};

// Runs rnic_bench for one size and reads the SEND round trip off its latency table.
absl::StatusOr<Rtt> SendBaseline(uint32_t size) {
  testing::Child child = testing::Spawn(
      {"transport/bench/rnic_bench", absl::StrCat("--sizes=", size), "--latency_iters=3000",
       "--bandwidth_bytes=1048576", "--bandwidth_max_ops=1000"},
      /*capture_stderr=*/false);
  std::string out = testing::ReadAll(child.out_fd);
  close(child.out_fd);
  testing::WaitExit(child.pid);
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    std::vector<std::string> cols = absl::StrSplit(line, '|');
    if (cols.size() != 4 || absl::StripAsciiWhitespace(cols[0]) == "size") continue;
    // "    34.5 / 96.5     1.28x"
    std::vector<std::string> parts =
        absl::StrSplit(cols[3], absl::ByAnyChar(" /"), absl::SkipEmpty());
    Rtt r;
    if (parts.size() >= 2 && absl::SimpleAtod(parts[0], &r.p50) &&
        absl::SimpleAtod(parts[1], &r.p99)) {
      return r;
    }
  }
  return absl::InternalError(absl::StrCat("could not read rnic_bench's output:\n", out));
}

struct Point {
  double p50 = 0, p99 = 0, ops_per_s = 0;
  uint64_t errors = 0;
};

// Runs `ops` PUTs or GETs with `in_flight` outstanding.
Point RunPoint(Client& c, bool put, int in_flight, uint64_t ops, uint64_t seed) {
  bench::LoadResult r =
      bench::RunLoad(c, put, in_flight, ops, FLAGS_keys, std::string(FLAGS_value_size, 'v'), &seed);
  Point p;
  p.ops_per_s = ops / r.seconds;
  p.p50 = Percentile(r.us, 0.5);
  p.p99 = Percentile(r.us, 0.99);
  p.errors = r.errors;
  return p;
}

// A kvserver child process and its address.
struct Server {
  pid_t pid = -1;
  std::string address;
};

absl::StatusOr<Server> StartServer(const std::vector<std::string>& extra) {
  std::vector<std::string> args{"server/kvserver", "--listen=127.0.0.1:0",
                                "--metrics=", "--arena_bytes=268435456"};
  args.insert(args.end(), extra.begin(), extra.end());
  testing::Child child = testing::Spawn(args, /*capture_stderr=*/false);
  const std::string line = testing::ReadLine(child.out_fd);
  const std::string tag = "listening on ";
  const size_t at = line.find(tag);
  if (at == std::string::npos) {
    if (child.pid > 0) kill(child.pid, SIGTERM);
    return absl::UnavailableError(absl::StrCat("kvserver did not start: ", line));
  }
  return Server{child.pid,
                line.substr(at + tag.size(), line.find(' ', at + tag.size()) - at - tag.size())};
}

// Writes a one-user auth file (mode 600) for the comparison; returns its path.
std::string WriteBenchAuthFile() {
  const char* dir = std::getenv("TMPDIR");
  const std::string path = absl::StrCat(dir != nullptr ? dir : "/tmp", "/kv_bench_auth.", getpid());
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  const std::string line = "bench client kv-bench-secret-0123456789abcdef\n";
  if (fd < 0 || write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    std::fprintf(stderr, "kv_bench: cannot write %s\n", path.c_str());
    std::exit(1);
  }
  close(fd);
  return path;
}

// GRANT round trips of `count` slots each on a fresh protocol-level connection to `server`
// (reconnecting every 16 calls: at most 1024 grants are outstanding per connection; the first
// 4 calls after a reconnect are not counted); p50 in us.
absl::StatusOr<double> GrantP50(const std::string& server, uint32_t count, int calls) {
  std::vector<double> us;
  proto::GrantRequest req;
  req.set_size(FLAGS_value_size);
  req.set_count(count);
  std::unique_ptr<testing::RawConnection> conn;
  for (int i = 0; i < calls; ++i) {
    if (i % 16 == 0) {
      conn.reset();
      auto c = testing::RawConnection::Open(server);
      if (!c.ok()) return c.status();
      conn = std::move(*c);
    }
    const absl::Time t0 = absl::Now();
    absl::StatusOr<std::string> reply = conn->Call(proto::GRANT, req);
    // The first calls on a fresh connection overlap the server's teardown of the last one.
    if (i % 16 >= 4) us.push_back(absl::ToDoubleMicroseconds(absl::Now() - t0));
    proto::GrantResponse g;
    if (!reply.ok()) return reply.status();
    if (!g.ParseFromString(*reply) || g.grants_size() != static_cast<int>(count)) {
      return absl::InternalError("a GRANT answered fewer slots than asked");
    }
  }
  return Percentile(us, 0.5);
}

// Two configurations of one server, compared side by side.
struct Variant {
  std::vector<std::string> server_args;
  bool auth = false;  // the client proves the bench user of the auth file
};
struct Comparison {
  const char* flag;   // the kv_bench flag, for the title
  const char* title;  // what differs
  const char* label;  // the column naming the variant
  const char* note;   // printed under the ratios
  Variant off, on;
  bool grants = false;  // also GRANT round trips of 1 and 64 slots (what binds cost)
};

// Configurations off and on, alternated in rounds: connect time (median of 20 connects), PUT
// and GET p50 at 1 in flight, PUT ops/s at 64 in flight, and optionally GRANT p50 of 1 and 64
// slots.
int Compare(const Comparison& cmp) {
  const std::string auth_file = WriteBenchAuthFile();
  auto args = [&](const Variant& v) {
    std::vector<std::string> a = v.server_args;
    if (v.auth) a.push_back("--auth_file=" + auth_file);
    return a;
  };
  absl::StatusOr<Server> servers[2] = {StartServer(args(cmp.off)), StartServer(args(cmp.on))};
  auto stop = [&] {
    for (const absl::StatusOr<Server>& s : servers) {
      if (s.ok()) {
        kill(s->pid, SIGTERM);
        testing::WaitExit(s->pid);
      }
    }
    unlink(auth_file.c_str());
  };
  for (const absl::StatusOr<Server>& s : servers) {
    if (!s.ok()) {
      std::fprintf(stderr, "kv_bench: %s\n", s.status().ToString().c_str());
      stop();
      return 1;
    }
  }
  auto options = [&](int a) {
    ClientOptions o;
    o.server = servers[a]->address;
    o.policy = FLAGS_policy;
    o.caller_progress = FLAGS_caller_progress;
    o.max_in_flight = 64;
    if ((a == 1 ? cmp.on : cmp.off).auth) o.auth_file = auth_file;
    return o;
  };
  std::unique_ptr<Client> clients[2];
  for (int a = 0; a < 2; ++a) {
    auto c = Client::Connect(options(a));
    if (!c.ok()) {
      std::fprintf(stderr, "kv_bench: %s\n", c.status().ToString().c_str());
      stop();
      return 1;
    }
    clients[a] = std::move(*c);
    std::fprintf(stderr, "kv_bench: preloading %llu keys (%s %s) ...\n",
                 static_cast<unsigned long long>(FLAGS_keys), cmp.label, a == 1 ? "on" : "off");
    for (uint64_t k = 0; k < FLAGS_keys; ++k) {
      if (!clients[a]->Put(absl::StrCat("key", k), std::string(FLAGS_value_size, 'v')).ok()) {
        std::fprintf(stderr, "kv_bench: preload failed\n");
        stop();
        return 1;
      }
    }
  }
  std::printf("kv_bench %s: two kvservers over the soft transport, loopback, %s (measured)\n",
              cmp.flag, cmp.title);
  std::printf("value %u B, %llu ops per 1-in-flight point, policy %s, %d rounds (off then on)\n\n",
              FLAGS_value_size, static_cast<unsigned long long>(FLAGS_ops / FLAGS_rounds),
              FLAGS_policy.c_str(), FLAGS_rounds);
  constexpr int kMetrics = 6;
  const char* names[kMetrics] = {"connect ms p50", "PUT p50 us",    "GET p50 us",
                                 "PUT64 ops/s",    "GRANT1 p50 us", "GRANT64 p50 us"};
  const int metrics = cmp.grants ? kMetrics : 4;
  std::printf("%-5s %-4s", "round", cmp.label);
  for (int k = 0; k < metrics; ++k) std::printf(" | %14s", names[k]);
  std::printf("\n");
  const uint64_t round_ops = std::max<uint64_t>(100, FLAGS_ops / FLAGS_rounds);
  // [metric][variant] per round.
  std::vector<double> m[kMetrics][2];
  uint64_t errors = 0;
  for (int r = 1; r <= FLAGS_rounds; ++r) {
    std::fprintf(stderr, "  round %d of %d ...\n", r, FLAGS_rounds);
    for (int a = 0; a < 2; ++a) {
      std::vector<double> connect_ms;
      for (int i = 0; i < 20; ++i) {
        const absl::Time t0 = absl::Now();
        auto c = Client::Connect(options(a));
        if (!c.ok()) {
          ++errors;
          continue;
        }
        connect_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
      }
      Point put = RunPoint(*clients[a], true, 1, round_ops, 10 + r);
      Point get = RunPoint(*clients[a], false, 1, round_ops, 20 + r);
      Point put64 = RunPoint(*clients[a], true, 64, 4 * round_ops, 30 + r);
      errors += put.errors + get.errors + put64.errors;
      double values[kMetrics] = {
          Percentile(connect_ms, 0.5), put.p50, get.p50, put64.ops_per_s, 0, 0};
      if (cmp.grants) {
        for (int g = 0; g < 2; ++g) {
          absl::StatusOr<double> p50 = GrantP50(servers[a]->address, g == 0 ? 1 : 64, 64);
          if (!p50.ok()) {
            std::fprintf(stderr, "kv_bench: GRANT: %s\n", p50.status().ToString().c_str());
            ++errors;
          }
          values[4 + g] = p50.ok() ? *p50 : 0;
        }
      }
      std::printf("%-5d %-4s", r, a ? "on" : "off");
      for (int k = 0; k < metrics; ++k) {
        m[k][a].push_back(values[k]);
        std::printf(" | %14.*f", k == 3 ? 0 : k == 0 ? 2 : 1, values[k]);
      }
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  std::printf("\n%-14s | %-9s | %-30s\n", "", "on/off", "off's own spread (max/min of rounds)");
  for (int k = 0; k < metrics; ++k) {
    std::vector<double> ratio;
    for (size_t i = 0; i < m[k][0].size(); ++i) {
      if (m[k][0][i] > 0) ratio.push_back(m[k][1][i] / m[k][0][i]);
    }
    const auto [lo, hi] = std::minmax_element(m[k][0].begin(), m[k][0].end());
    std::printf("%-14s | %8.3fx | %.3fx\n", names[k], Percentile(ratio, 0.5),
                *lo > 0 ? *hi / *lo : 0);
  }
  if (cmp.grants) {
    std::printf(
        "binding, per grant: %.2f us in a GRANT of 1, %.2f us in a GRANT of 64 "
        "(median on-off difference of GRANT p50, divided by the slots)\n",
        Percentile(m[4][1], 0.5) - Percentile(m[4][0], 0.5),
        (Percentile(m[5][1], 0.5) - Percentile(m[5][0], 0.5)) / 64);
  }
  std::printf("(on/off: median over rounds of the per-round ratio; %s)\nfailed operations: %llu\n",
              cmp.note, static_cast<unsigned long long>(errors));
  for (auto& c : clients) c.reset();
  stop();
  return errors == 0 ? 0 : 1;
}

int Main() {
  if (FLAGS_auth_compare) {
    return Compare({"--auth_compare", "one with an auth file", "auth",
                    "authentication is once per connection, so only connect should move beyond "
                    "the spread",
                    Variant{}, Variant{{}, true}});
  }
  if (FLAGS_protection_compare) {
    return Compare({"--protection_compare", "one with --memory_protection=false", "prot",
                    "protection binds a window per grant and ends it at the PUT: GRANT and PUT "
                    "carry its cost",
                    Variant{{"--memory_protection=false"}}, Variant{}, /*grants=*/true});
  }
  std::vector<int> depths;
  for (absl::string_view d : absl::StrSplit(FLAGS_in_flight, ',')) {
    int v;
    if (!absl::SimpleAtoi(d, &v) || v < 1 || v > 1024) {
      std::fprintf(stderr, "kv_bench: --in_flight entries must be 1..1024\n");
      return 2;
    }
    depths.push_back(v);
  }
  if (FLAGS_value_size > 65536 || FLAGS_ops < 100 || FLAGS_keys < 1 || FLAGS_rounds < 1 ||
      FLAGS_rounds > 100) {
    std::fprintf(stderr,
                 "kv_bench: --value_size <= 65536, --ops >= 100, --keys >= 1, --rounds 1..100\n");
    return 2;
  }
  testing::Child server_child = testing::Spawn(
      {"server/kvserver", "--listen=127.0.0.1:0", "--metrics=", "--arena_bytes=268435456"},
      /*capture_stderr=*/false);
  const pid_t server = server_child.pid;
  std::string line = testing::ReadLine(server_child.out_fd);
  const std::string tag = "listening on ";
  size_t at = line.find(tag);
  if (at == std::string::npos) {
    std::fprintf(stderr, "kv_bench: kvserver did not start: %s\n", line.c_str());
    return 1;
  }
  ClientOptions o;
  o.server = line.substr(at + tag.size(), line.find(' ', at + tag.size()) - at - tag.size());
  o.policy = FLAGS_policy;
  o.caller_progress = FLAGS_caller_progress;
  o.max_in_flight = *std::max_element(depths.begin(), depths.end());
  auto client = Client::Connect(o);
  if (!client.ok()) {
    std::fprintf(stderr, "kv_bench: %s\n", client.status().ToString().c_str());
    kill(server, SIGTERM);
    return 1;
  }
  std::fprintf(stderr, "kv_bench: preloading %llu keys ...\n",
               static_cast<unsigned long long>(FLAGS_keys));
  for (uint64_t k = 0; k < FLAGS_keys; ++k) {
    if (!(*client)->Put(absl::StrCat("key", k), std::string(FLAGS_value_size, 'v')).ok()) {
      std::fprintf(stderr, "kv_bench: preload failed\n");
      kill(server, SIGTERM);
      return 1;
    }
  }
  std::printf(
      "kv_bench: kvserver over the soft transport, loopback, separate processes "
      "(measured)\n");
  std::printf("value %u B, %llu ops per point, policy %s\n\n", FLAGS_value_size,
              static_cast<unsigned long long>(FLAGS_ops), FLAGS_policy.c_str());

  // 1 in flight: the raw SEND round trip (rnic_bench) and the KV points in alternating rounds.
  const uint64_t round_ops = std::max<uint64_t>(100, FLAGS_ops / FLAGS_rounds);
  std::printf(
      "1 in flight, %d rounds of (rnic_bench SEND round trip of %u B, %llu PUTs, %llu GETs):\n",
      FLAGS_rounds, FLAGS_value_size, static_cast<unsigned long long>(round_ops),
      static_cast<unsigned long long>(round_ops));
  std::printf("%-5s | %-12s | %-12s %-7s | %-12s %-7s\n", "round", "raw p50 us", "PUT p50 us",
              "x raw", "GET p50 us", "x raw");
  std::vector<double> raws, put_x, get_x;
  uint64_t errors = 0;
  for (int r = 1; r <= FLAGS_rounds; ++r) {
    std::fprintf(stderr, "  round %d of %d ...\n", r, FLAGS_rounds);
    absl::StatusOr<Rtt> raw = SendBaseline(FLAGS_value_size);
    if (!raw.ok()) {
      std::fprintf(stderr, "kv_bench: %s\n", raw.status().ToString().c_str());
      kill(server, SIGTERM);
      return 1;
    }
    Point put = RunPoint(**client, true, 1, round_ops, 10 + r);
    Point get = RunPoint(**client, false, 1, round_ops, 20 + r);
    errors += put.errors + get.errors;
    raws.push_back(raw->p50);
    put_x.push_back(put.p50 / raw->p50);
    get_x.push_back(get.p50 / raw->p50);
    std::printf("%-5d | %12.1f | %12.1f %6.2fx | %12.1f %6.2fx\n", r, raw->p50, put.p50,
                put_x.back(), get.p50, get_x.back());
    std::fflush(stdout);
  }
  const double raw_p50 = Percentile(raws, 0.5);
  std::printf("median | %11.1f | %12s %6.2fx | %12s %6.2fx\n\n", raw_p50, "",
              Percentile(put_x, 0.5), "", Percentile(get_x, 0.5));

  std::printf("%-9s | %-18s %-10s %-7s | %-18s %-10s %-7s\n", "in flight", "PUT p50/p99 us",
              "PUT ops/s", "p50/raw", "GET p50/p99 us", "GET ops/s", "p50/raw");
  for (int d : depths) {
    std::fprintf(stderr, "  measuring %d in flight ...\n", d);
    Point put = RunPoint(**client, true, d, FLAGS_ops, 1);
    Point get = RunPoint(**client, false, d, FLAGS_ops, 2);
    errors += put.errors + get.errors;
    std::printf("%-9d | %7.1f / %-8.1f %10.0f %6.2fx | %7.1f / %-8.1f %10.0f %6.2fx\n", d, put.p50,
                put.p99, put.ops_per_s, put.p50 / raw_p50, get.p50, get.p99, get.ops_per_s,
                get.p50 / raw_p50);
    std::fflush(stdout);
  }
  std::printf("(p50/raw in this table: against the median raw p50 of the rounds above)\n");
  WriteStats w = (*client)->write_stats();
  std::printf("\nvalue writes: %llu offload, %llu unload; failed operations: %llu\n",
              static_cast<unsigned long long>(w.offload), static_cast<unsigned long long>(w.unload),
              static_cast<unsigned long long>(errors));
  std::printf(
      "1 in flight: synchronous Put/Get, timed as the caller sees them (waking the caller "
      "included); more in flight: PutAsync/GetAsync, issue to callback\n");
  std::printf(
      "target: at 1 in flight the KV layer adds at most 30%% to the raw round trip "
      "(median of the rounds' p50/raw <= 1.30)\n");
  client->reset();
  kill(server, SIGTERM);
  testing::WaitExit(server);
  return errors == 0 ? 0 : 1;
}

}  // namespace
}  // namespace unloadkv

int main(int argc, char** argv) {
  gflags::SetUsageMessage("KV latency and throughput next to the raw soft-RNIC round trip");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  unloadkv::SetMinLogLevel(unloadkv::LogLevel::kError);
  unloadkv::testing::EnterRunfiles(argv[0]);
  return unloadkv::Main();
}
