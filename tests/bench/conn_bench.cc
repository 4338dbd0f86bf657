// conn_bench: what a connection costs a kvserver, from one to thousands of connections.
//
//   bazel run -c opt //tests/bench:conn_bench -- [--connections=1,10,100,1000,5000]
//       [--processes=4] [--seconds=3] [--policies=offload,unload] [--value_size=64]
//
// For each policy and connection count: a fresh kvserver (soft transport, loopback); the
// connections opened from --processes client processes, each holding its share as engine
// connections on one device and one engine (as a proxy or an application server would);
// then the server's resident memory and sockets per connection with every connection idle;
// then every connection active for --seconds (one request in flight each, GETs and PUTs
// alternating, PUT = grant + value write + PUT: the value write takes the policy's path),
// aggregate throughput, p50/p99 latency, and the resident memory per connection again. A point
// whose projected server memory exceeds --max_memory_fraction of MemAvailable is skipped, and
// so is one the server refuses (its connection limit or its file descriptors). Prints one
// table; progress goes to stderr.
#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "gflags/gflags.h"
#include "proto/kv.pb.h"
#include "proto/limits.h"
#include "tests/support/subprocess.h"
#include "transport/backends/open_device.h"
#include "transport/base/clock.h"
#include "transport/base/logging.h"
#include "transport/base/percentile.h"
#include "transport/engine/engine.h"
#include "transport/engine/policy.h"
#include "transport/rpc/bootstrap.h"
#include "transport/rpc/rpc.h"

DEFINE_string(connections, "1,10,100,1000,5000", "connection counts, one point each");
DEFINE_int32(processes, 4, "client processes sharing a point's connections");
DEFINE_double(seconds, 3, "length of each point's active phase");
DEFINE_string(policies, "offload,unload", "path policies of the value writes, a pass each");
DEFINE_uint32(value_size, 64, "value bytes of the PUTs");
DEFINE_double(max_memory_fraction, 0.5,
              "skip a point whose projected server memory exceeds this share of MemAvailable");
// Internal: run as one client process.
DEFINE_string(child_server, "", "internal: the kvserver a client process connects to");
DEFINE_int32(child_connections, 0, "internal: connections of this client process");
DEFINE_string(child_policy, "offload", "internal: path policy of this client process");
DEFINE_string(child_samples, "", "internal: file for this process's latencies (us)");

namespace unloadkv {
namespace {

constexpr absl::Duration kCallTimeout = absl::Seconds(10);

// ---------------------------------------------------------------- client process

// One connection's state for the load: one request in flight, GET and PUT alternating.
struct Conn {
  std::shared_ptr<engine::Connection> conn;
  std::unique_ptr<rpc::RpcClient> rpc;
  std::string key;
  rnic::ScatterGatherEntry value;
  uint64_t issued = 0;
  absl::Time started;
};

struct Load {
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> done{0}, errors{0}, in_flight{0};
  std::mutex mu;
  std::vector<double> us;   // guarded by mu
  std::string first_error;  // guarded by mu
};

void Issue(Conn& c, Load& load);

void Finish(Conn& c, Load& load, const absl::Status& status) {
  if (status.ok()) {
    const double us = absl::ToDoubleMicroseconds(absl::Now() - c.started);
    std::lock_guard<std::mutex> l(load.mu);
    load.us.push_back(us);
    load.done.fetch_add(1);
  } else {
    load.errors.fetch_add(1);
    std::lock_guard<std::mutex> l(load.mu);
    if (load.first_error.empty()) load.first_error = status.ToString();
  }
  // The next request is counted in flight before this one leaves, so in_flight reaches 0 only
  // once every connection stopped (and `load` may then go). A failed request ends its
  // connection's part: a failed connection would fail every request at once, recursively.
  if (status.ok() && !load.stop.load()) Issue(c, load);
  load.in_flight.fetch_sub(1);
}

// PUT: a grant, the value written into the granted slot, the PUT naming the grant.
void Put(Conn& c, Load& load) {
  proto::GrantRequest g;
  g.set_size(FLAGS_value_size);
  g.set_count(1);
  auto st = c.rpc->Call(
      proto::GRANT, g.SerializeAsString(), kCallTimeout,
      [&c, &load](absl::StatusOr<std::string> reply) {
        proto::GrantResponse resp;
        if (!reply.ok()) return Finish(c, load, reply.status());
        if (!resp.ParseFromString(*reply) || resp.grants_size() != 1) {
          return Finish(c, load, absl::InternalError("bad GrantResponse"));
        }
        const proto::SlotGrant grant = resp.grants(0);
        absl::Status w = c.conn->Write(
            c.value, grant.addr(), grant.rkey(), [&c, &load, grant](const engine::WriteResult& r) {
              if (!r.ok()) {
                return Finish(c, load,
                              absl::InternalError(
                                  absl::StrCat("value write: ", rnic::WcStatusName(r.status))));
              }
              proto::PutRequest p;
              p.set_key(c.key);
              p.set_grant_id(grant.grant_id());
              p.set_value_size(FLAGS_value_size);
              auto put = c.rpc->Call(proto::PUT, p.SerializeAsString(), kCallTimeout,
                                     [&c, &load](absl::StatusOr<std::string> reply) {
                                       Finish(c, load, reply.status());
                                     });
              if (!put.ok()) Finish(c, load, put.status());
            });
        if (!w.ok()) Finish(c, load, w);
      });
  if (!st.ok()) Finish(c, load, st.status());
}

void Issue(Conn& c, Load& load) {
  load.in_flight.fetch_add(1);
  c.started = absl::Now();
  if (c.issued++ % 2 == 0) return Put(c, load);
  proto::GetRequest g;
  g.set_key(c.key);
  auto st = c.rpc->Call(
      proto::GET, g.SerializeAsString(), kCallTimeout,
      [&c, &load](absl::StatusOr<std::string> reply) { Finish(c, load, reply.status()); });
  if (!st.ok()) Finish(c, load, st.status());
}

int ChildMain() {
  // The parent's go and exit signals are taken with sigwait: block them before any thread.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGUSR1);
  sigaddset(&signals, SIGUSR2);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  SetMinLogLevel(LogLevel::kWarning);
  const int n = FLAGS_child_connections;
  if (n < 1) {
    std::printf("error --child_connections must be positive\n");
    return 2;
  }
  auto fail = [](const std::string& what) {
    std::printf("error %s\n", what.c_str());
    std::fflush(stdout);
    return 1;
  };
  auto device = backends::OpenDevice({});
  if (!device.ok()) return fail(device.status().ToString());
  engine::EngineOptions eo;
  eo.max_message_bytes = proto::kMaxMessageBytes;
  eo.max_connections_per_worker = static_cast<uint32_t>(n);
  // The server never writes to its clients: their own staging buffers stay minimal (64 B:
  // they receive the server's 24-byte acks). Each connection keeps a write in flight, and
  // each unloaded one holds a unit of this engine's staging pool for its ack
  // (docs/engine.md, "The staging pool"): one shared unit per connection.
  eo.staging_slots = 1;
  eo.min_staging_credits = 1;
  eo.staging_slot_bytes = 64;
  eo.shared_staging_buffers = static_cast<uint32_t>(n);
  eo.huge_pages = false;
  auto engine = engine::Engine::Create(device->get(), eo);
  if (!engine.ok()) return fail(engine.status().ToString());
  std::vector<char> values(size_t(n) * FLAGS_value_size, 'v');
  auto mr = (*engine)->RegisterMemory(values.data(), values.size(), rnic::kLocalWrite);
  if (!mr.ok()) return fail(mr.status().ToString());
  (*engine)->Start();
  std::vector<std::unique_ptr<Conn>> conns;
  for (int i = 0; i < n; ++i) {
    auto policy = engine::MakePolicy(FLAGS_child_policy);
    if (!policy.ok()) return fail(policy.status().ToString());
    auto conn = (*engine)->CreateConnection(std::move(*policy));
    if (!conn.ok()) return fail(conn.status().ToString());
    auto c = std::make_unique<Conn>();
    c->conn = std::move(*conn);
    c->rpc = std::make_unique<rpc::RpcClient>(c->conn.get(), RealClock::Get());
    auto session =
        rpc::Bootstrap(nullptr, FLAGS_child_server, nullptr,
                       engine::EncodeConnectionInfo(c->conn->local_info()), kCallTimeout);
    if (!session.ok()) {
      return fail(absl::StrCat("connection ", i, ": ", session.status().ToString()));
    }
    auto info = engine::DecodeConnectionInfo(session->remote_info);
    if (!info.ok()) return fail(info.status().ToString());
    if (absl::Status st = c->conn->Connect(*info); !st.ok()) return fail(st.ToString());
    c->key = absl::StrCat("conn_bench/", getpid(), "/", i);
    c->value = (*mr)->Sge(size_t(i) * FLAGS_value_size, FLAGS_value_size);
    // A first round trip at once, as the SDK does (the server releases connections that stay
    // silent, beyond its half-open limit): one PUT, which also creates the key the GETs read.
    Load first;
    first.stop = true;  // no follow-up
    Issue(*c, first);
    const absl::Time deadline = absl::Now() + kCallTimeout;
    while (first.in_flight.load() > 0 && absl::Now() < deadline) {
      absl::SleepFor(absl::Microseconds(50));
    }
    if (first.done.load() != 1) {
      std::lock_guard<std::mutex> l(first.mu);
      return fail(absl::StrCat("connection ", i, ": first PUT: ",
                               first.first_error.empty() ? "no answer" : first.first_error));
    }
    conns.push_back(std::move(c));
  }
  std::printf("ready %d\n", n);
  std::fflush(stdout);
  int sig = 0;
  sigwait(&signals, &sig);
  if (sig == SIGUSR1) {
    Load load;
    const absl::Time t0 = absl::Now();
    for (auto& c : conns) Issue(*c, load);
    absl::SleepFor(absl::Seconds(FLAGS_seconds));
    load.stop = true;
    const absl::Duration ran = absl::Now() - t0;
    const absl::Time deadline = absl::Now() + kCallTimeout;
    while (load.in_flight.load() > 0 && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    {
      std::lock_guard<std::mutex> l(load.mu);
      std::ofstream out(FLAGS_child_samples);
      for (double us : load.us) out << us << "\n";
    }
    std::printf("done ops=%llu errors=%llu seconds=%.3f\n",
                static_cast<unsigned long long>(load.done.load()),
                static_cast<unsigned long long>(load.errors.load()), absl::ToDoubleSeconds(ran));
    std::fflush(stdout);
    sigwait(&signals, &sig);
  }
  // The parent measured what it wanted: leave without tearing thousands of connections down.
  _exit(0);
}

// ---------------------------------------------------------------- parent

// The "<key>: <n> kB" line of a /proc file, in bytes, or -1.
int64_t ReadKib(const std::string& path, absl::string_view key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view v = line;
    if (!absl::ConsumePrefix(&v, key) || !absl::ConsumePrefix(&v, ":")) continue;
    std::vector<std::string> parts = absl::StrSplit(v, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    int64_t kib;
    if (!parts.empty() && absl::SimpleAtoi(parts[0], &kib)) return kib * 1024;
  }
  return -1;
}

// Resident memory of `pid` in bytes, or -1.
int64_t Rss(pid_t pid) { return ReadKib(absl::StrCat("/proc/", pid, "/status"), "VmRSS"); }

// Open sockets of `pid`.
int Sockets(pid_t pid) {
  const std::string dir = absl::StrCat("/proc/", pid, "/fd");
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return -1;
  int n = 0;
  char target[64];
  while (dirent* e = readdir(d)) {
    const std::string path = absl::StrCat(dir, "/", e->d_name);
    ssize_t len = readlink(path.c_str(), target, sizeof(target) - 1);
    if (len > 0 && std::strncmp(target, "socket:", 7) == 0) ++n;
  }
  closedir(d);
  return n;
}

int64_t MemAvailable() { return std::max<int64_t>(0, ReadKib("/proc/meminfo", "MemAvailable")); }

struct Row {
  std::string policy;
  int connections = 0;
  std::string note;  // skipped or failed: why
  double idle_kib = 0, active_kib = 0, sockets = 0, ops_per_s = 0, p50 = 0, p99 = 0;
  uint64_t errors = 0;
};

// Starts a kvserver for `n` connections; its address, or "" (the reason in *why).
std::string StartServer(int n, testing::Child* server, std::string* why) {
  *server = testing::Spawn(
      {"server/kvserver", "--listen=127.0.0.1:0", "--metrics=", "--arena_bytes=67108864",
       absl::StrCat("--max_connections=", std::max(n + 8, 16))},
      /*capture_stderr=*/false, /*alarm_seconds=*/3600);
  const std::string line = testing::ReadLine(server->out_fd);
  const std::string tag = "listening on ";
  const size_t at = line.find(tag);
  if (at == std::string::npos) {
    *why = absl::StrCat("kvserver did not start: ", line);
    return "";
  }
  return line.substr(at + tag.size(), line.find(' ', at + tag.size()) - at - tag.size());
}

Row RunPoint(const std::string& policy, int n, const char* self) {
  Row row;
  row.policy = policy;
  row.connections = n;
  testing::Child server;
  const std::string address = StartServer(n, &server, &row.note);
  if (address.empty()) return row;
  const int64_t rss0 = Rss(server.pid);
  if (rss0 < 0) {
    row.note = "cannot read the kvserver's VmRSS";
    kill(server.pid, SIGTERM);
    testing::WaitExit(server.pid);
    return row;
  }
  const int sockets0 = Sockets(server.pid);
  const int procs = std::min(FLAGS_processes, n);
  std::vector<testing::Child> kids;
  std::vector<std::string> sample_files;
  for (int p = 0; p < procs; ++p) {
    const int share = n / procs + (p < n % procs ? 1 : 0);
    sample_files.push_back(absl::StrCat("/tmp/conn_bench.", getpid(), ".", p));
    kids.push_back(testing::Spawn(
        {self, absl::StrCat("--child_server=", address),
         absl::StrCat("--child_connections=", share), absl::StrCat("--child_policy=", policy),
         absl::StrCat("--child_samples=", sample_files.back()),
         absl::StrCat("--value_size=", FLAGS_value_size),
         absl::StrCat("--seconds=", FLAGS_seconds)},
        /*capture_stderr=*/false, /*alarm_seconds=*/1800));
  }
  bool ready = true;
  for (auto& k : kids) {
    const std::string line = testing::ReadLine(k.out_fd);
    if (!absl::StartsWith(line, "ready")) {
      ready = false;
      if (row.note.empty()) row.note = absl::StrCat("a client process: ", line);
    }
  }
  if (ready) {
    row.idle_kib = (Rss(server.pid) - rss0) / 1024.0 / n;
    row.sockets = static_cast<double>(Sockets(server.pid) - sockets0) / n;
    std::fprintf(stderr, "conn_bench: %s, %d connections held; active for %.0f s ...\n",
                 policy.c_str(), n, FLAGS_seconds);
    for (auto& k : kids) kill(k.pid, SIGUSR1);
    double seconds = 0;
    uint64_t ops = 0;
    for (auto& k : kids) {
      const std::string line = testing::ReadLine(k.out_fd);
      unsigned long long o = 0, e = 0;
      double s = 0;
      if (std::sscanf(line.c_str(), "done ops=%llu errors=%llu seconds=%lf", &o, &e, &s) != 3) {
        if (row.note.empty()) row.note = absl::StrCat("a client process: ", line);
        continue;
      }
      ops += o;
      row.errors += e;
      seconds = std::max(seconds, s);
    }
    row.active_kib = (Rss(server.pid) - rss0) / 1024.0 / n;
    row.ops_per_s = seconds > 0 ? ops / seconds : 0;
    std::vector<double> us;
    for (const std::string& f : sample_files) {
      std::ifstream in(f);
      double v;
      while (in >> v) us.push_back(v);
    }
    if (!us.empty()) {
      row.p50 = Percentile(us, 0.5);
      row.p99 = Percentile(us, 0.99);
    }
  }
  for (auto& k : kids) {
    kill(k.pid, ready ? SIGUSR2 : SIGKILL);
    testing::WaitExit(k.pid);
    close(k.out_fd);
  }
  for (const std::string& f : sample_files) unlink(f.c_str());
  kill(server.pid, SIGTERM);
  testing::WaitExit(server.pid);
  close(server.out_fd);
  return row;
}

int Main(const char* self) {
  std::vector<int> counts;
  for (absl::string_view c : absl::StrSplit(FLAGS_connections, ',')) {
    int v;
    if (!absl::SimpleAtoi(c, &v) || v < 1 || v > 65536) {
      std::fprintf(stderr, "conn_bench: --connections entries must be 1..65536\n");
      return 2;
    }
    counts.push_back(v);
  }
  std::vector<std::string> policies = absl::StrSplit(FLAGS_policies, ',');
  for (const std::string& p : policies) {
    if (!engine::MakePolicy(p).ok()) {
      std::fprintf(stderr, "conn_bench: unknown policy '%s'\n", p.c_str());
      return 2;
    }
  }
  if (FLAGS_processes < 1 || FLAGS_processes > 64 || FLAGS_seconds <= 0 || FLAGS_seconds > 600 ||
      FLAGS_value_size < 1 || FLAGS_value_size > 65536 || FLAGS_max_memory_fraction <= 0 ||
      FLAGS_max_memory_fraction > 1) {
    std::fprintf(stderr,
                 "conn_bench: --processes 1..64, --seconds in (0, 600], --value_size 1..65536, "
                 "--max_memory_fraction in (0, 1]\n");
    return 2;
  }
  // Thousands of connections need thousands of descriptors, here and in the children.
  rlimit nofile{};
  getrlimit(RLIMIT_NOFILE, &nofile);
  nofile.rlim_cur = nofile.rlim_max;
  setrlimit(RLIMIT_NOFILE, &nofile);
  std::fprintf(stderr, "conn_bench: open files limit %llu\n",
               static_cast<unsigned long long>(nofile.rlim_cur));

  std::vector<Row> rows;
  for (const std::string& policy : policies) {
    double per_conn = 0;  // server bytes per active connection at the last point
    for (int n : counts) {
      const double projected = per_conn * n;
      if (projected > FLAGS_max_memory_fraction * MemAvailable()) {
        Row skip;
        skip.policy = policy;
        skip.connections = n;
        skip.note = absl::StrCat("skipped: about ", static_cast<int64_t>(projected / (1 << 20)),
                                 " MiB of server memory projected, over ",
                                 FLAGS_max_memory_fraction, " of MemAvailable");
        rows.push_back(skip);
        continue;
      }
      std::fprintf(stderr, "conn_bench: %s, %d connections: connecting ...\n", policy.c_str(), n);
      Row r = RunPoint(policy, n, self);
      if (r.active_kib > 0) per_conn = r.active_kib * 1024;
      rows.push_back(r);
    }
  }
  std::printf(
      "kvserver memory and sockets per connection, soft transport, loopback (measured; %d "
      "client processes, each with one device and engine; %u B values)\n",
      FLAGS_processes, FLAGS_value_size);
  std::printf(
      "policy   conns | idle KiB/conn active KiB/conn sockets/conn |     ops/s  p50 us  p99 us "
      "errors\n");
  for (const Row& r : rows) {
    if (!r.note.empty() && r.ops_per_s == 0) {
      std::printf("%-8s %5d | %s\n", r.policy.c_str(), r.connections, r.note.c_str());
      continue;
    }
    std::printf("%-8s %5d | %13.0f %15.0f %12.2f | %9.0f %7.1f %7.1f %6llu%s%s\n", r.policy.c_str(),
                r.connections, r.idle_kib, r.active_kib, r.sockets, r.ops_per_s, r.p50, r.p99,
                static_cast<unsigned long long>(r.errors), r.note.empty() ? "" : "  ",
                r.note.c_str());
  }
  std::printf(
      "idle/active: the server's resident memory over its own before the clients, divided by "
      "the connections; active: every connection with one request in flight (GET and PUT "
      "alternating) for %.0f s\n",
      FLAGS_seconds);
  return 0;
}

}  // namespace
}  // namespace unloadkv

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  if (!FLAGS_child_server.empty()) return unloadkv::ChildMain();
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len <= 0) {
    std::fprintf(stderr, "conn_bench: cannot find its own binary\n");
    return 1;
  }
  self[len] = '\0';
  unloadkv::testing::EnterRunfiles(argv[0]);
  return unloadkv::Main(self);
}
