// path_cost: the cost ledger of a request, layer by layer (docs/benchmarks.md, "The cost of a
// request, per layer"): CPU time, heap allocations and mutex acquisitions per request.
//
//   bazel run -c opt //tests/bench:path_cost -- [--value_size=100] [--ops=100000]
//
// Two parts, in one process (a counting allocator replaces operator new, and counting_mutex.cc
// pthread_mutex_lock, counting per thread):
//   * each layer alone, on this thread, nothing below it: the soft RNIC's frame header, the RPC
//     frame, the protobuf messages of a PUT and a GET, the KV store's grant, PUT and GET;
//   * the stack on loopback, with the time, allocations and locks of the client's threads and
//     the server's apart (from /proc/self/task/*/stat and the per-thread counts): an
//     RPC echo over two engines on soft RNICs (the transport and RPC layers, kernel included),
//     then the SDK against an in-process kvserver, GET and PUT at 1 and at --depth in flight,
//     (the PUT rows granted, policy adaptive,inline:0), and PUT with the value inline (policy
//     adaptive,inline:4096).
// The loopback rows' CPU includes the kernel's TCP path (the "sys" columns); "user" is the
// process's own code. One run prints all rows; compare runs of the same build side by side.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "gflags/gflags.h"
#include "proto/kv.pb.h"
#include "server/kv_server.h"
#include "server/kv_store.h"
#include "tests/bench/counting_allocator.h"
#include "transport/base/clock.h"
#include "transport/base/logging.h"
#include "transport/engine/engine.h"
#include "transport/rpc/rpc.h"
#include "transport/rpc/rpc_frame.h"
#include "transport/soft/frame.h"
#include "transport/soft/soft_device.h"

DEFINE_uint32(value_size, 100, "value bytes of the PUTs and GETs (1..65536)");
DEFINE_uint64(ops, 100000, "requests per loopback row (1000..100000000)");
DEFINE_uint64(micro_ops, 1000000, "operations per single-layer row (1000..1000000000)");
DEFINE_uint32(depth, 64, "requests in flight in the pipelined rows (2..1024)");
DEFINE_uint64(keys, 10000, "key space of the SDK rows (preloaded before the GETs)");
DEFINE_string(parts, "layers,transport,sdk",
              "which parts to run: layers (each alone), transport (engine and RPC echoes), sdk");

namespace unloadkv {
namespace {

using bench::AllocationsOf;
using bench::LocksOf;
using bench::ThisThreadAllocations;
using bench::ThreadIdsNow;
using bench::Without;

double ThreadCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

// Runs `op` `n` times on this thread: CPU ns and allocations per run.
void Single(const char* layer, uint64_t n, const std::function<void()>& op) {
  for (uint64_t i = 0; i < std::min<uint64_t>(n / 10, 10000); ++i) op();  // warm caches
  const uint64_t a0 = ThisThreadAllocations();
  const double t0 = ThreadCpuNs();
  for (uint64_t i = 0; i < n; ++i) op();
  const double ns = (ThreadCpuNs() - t0) / n;
  const double allocs = double(ThisThreadAllocations() - a0) / n;
  std::printf("%-46s %10.1f %10.2f\n", layer, ns, allocs);
  std::fflush(stdout);
}

// Keeps the optimizer from dropping a result.
std::atomic<uint64_t> g_sink{0};

void SingleLayers() {
  std::printf("\n== each layer alone (this thread; CPU ns and heap allocations per operation)\n");
  std::printf("%-46s %10s %10s\n", "layer: operation", "ns/op", "allocs/op");
  const uint64_t n = FLAGS_micro_ops;
  const std::string value(FLAGS_value_size, 'v');
  const std::string key = "user00001234";
  {
    soft::FrameHeader h;
    h.type = soft::FrameType::kWrite;
    h.payload_len = FLAGS_value_size;
    h.psn = 7;
    h.remote_addr = 0x7f0000001000;
    h.rkey = 42;
    h.qp = 3;
    h.src_qp = 4;
    char buf[soft::kMaxFrameHeaderSize];
    Single("soft rnic: WRITE header encode + decode", n, [&] {
      const size_t size = soft::EncodeFrameHeader(h, buf);
      size_t used = 0;
      absl::StatusOr<soft::FrameHeader> d = soft::DecodeFrameHeader(buf, size, 1 << 20, &used);
      g_sink += d.ok() ? d->psn : 0;
    });
  }
  proto::PutRequest put;
  put.set_key(key);
  put.set_grant_id(123456);
  put.set_value_size(FLAGS_value_size);
  put.set_value_path(proto::OFFLOAD);
  const std::string put_bytes = put.SerializeAsString();
  {
    rpc::RpcFrame f;
    f.method = proto::PUT;
    f.request_id = 99;
    f.timeout_us = 5000000;
    f.payload = put_bytes;
    std::string framed;  // as the RPC layer sends: into a buffer it reuses
    Single("rpc: request frame encode + decode", n, [&] {
      rpc::EncodeRpcFrame(f, &framed);
      absl::StatusOr<rpc::RpcFrame> d = rpc::DecodeRpcFrame(framed);
      g_sink += d.ok() ? d->payload.size() : 0;
    });
  }
  Single("protobuf: PutRequest encode + decode", n, [&] {
    proto::PutRequest r;
    r.set_key(key);
    r.set_grant_id(123456);
    r.set_value_size(FLAGS_value_size);
    const std::string b = r.SerializeAsString();
    proto::PutRequest p;
    g_sink += p.ParseFromString(b) ? p.grant_id() : 0;
  });
  Single("protobuf: PutResponse encode + decode", n, [&] {
    proto::PutResponse r;
    r.set_version(77);
    const std::string b = r.SerializeAsString();
    proto::PutResponse p;
    g_sink += p.ParseFromString(b) ? p.version() : 0;
  });
  Single("protobuf: GetRequest encode + decode", n, [&] {
    proto::GetRequest r;
    r.set_key(key);
    const std::string b = r.SerializeAsString();
    proto::GetRequest p;
    g_sink += p.ParseFromString(b) ? p.key().size() : 0;
  });
  Single("protobuf: GetResponse encode + decode", n, [&] {
    proto::GetResponse r;
    r.set_value(value);
    r.set_version(77);
    const std::string b = r.SerializeAsString();
    proto::GetResponse p;
    g_sink += p.ParseFromString(b) ? p.value().size() : 0;
  });
  Single("protobuf: GRANT of 16 slots, both messages", n / 16, [&] {
    proto::GrantRequest q;
    q.set_size(FLAGS_value_size);
    q.set_count(16);
    proto::GrantResponse r;
    for (int i = 0; i < 16; ++i) {
      proto::SlotGrant* g = r.add_grants();
      g->set_grant_id(1000 + i);
      g->set_addr(0x7f0000001000 + 128 * i);
      g->set_rkey(42);
      g->set_capacity(128);
    }
    proto::GrantRequest qp;
    proto::GrantResponse rp;
    g_sink +=
        qp.ParseFromString(q.SerializeAsString()) && rp.ParseFromString(r.SerializeAsString());
  });
  // The store: a grant and a PUT into it (the key's old value freed), and a GET.
  const size_t arena_bytes = size_t{64} << 20;
  std::vector<char> arena(arena_bytes);
  server::KvStore store(arena.data(), arena_bytes);
  std::vector<std::string> keys;
  for (uint64_t i = 0; i < FLAGS_keys; ++i) keys.push_back(absl::StrFormat("user%08d", i));
  uint64_t k = 0;
  Single("kv store: GrantSlots(1) + Put", n / 4, [&] {
    absl::StatusOr<std::vector<server::KvStore::Grant>> g =
        store.GrantSlots(1, FLAGS_value_size, 1);
    if (!g.ok()) std::abort();
    const absl::StatusOr<uint64_t> v =
        store.Put(1, keys[k++ % keys.size()], (*g)[0].id, FLAGS_value_size);
    g_sink += v.ok() ? *v : 0;
  });
  Single("kv store: Get", n / 4, [&] {
    absl::StatusOr<server::KvStore::Value> v = store.Get(keys[k++ % keys.size()]);
    g_sink += v.ok() ? v->bytes.size() : 0;
  });
}

// --- the stack on loopback ---------------------------------------------------------------

// User and system CPU of the threads in `tids` still alive, in microseconds.
struct Cpu {
  double user_us = 0, sys_us = 0;
};
Cpu CpuOf(const std::set<pid_t>& tids) {
  static const double us_per_tick = 1e6 / sysconf(_SC_CLK_TCK);
  Cpu c;
  for (pid_t t : tids) {
    FILE* f = std::fopen(absl::StrCat("/proc/self/task/", t, "/stat").c_str(), "r");
    if (f == nullptr) continue;
    char buf[1024];
    const size_t len = std::fread(buf, 1, sizeof(buf) - 1, f);
    std::fclose(f);
    buf[len] = '\0';
    const char* p = std::strrchr(buf, ')');  // the name may hold spaces
    unsigned long long utime = 0, stime = 0;
    if (p != nullptr && std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
                                    &utime, &stime) == 2) {
      c.user_us += utime * us_per_tick;
      c.sys_us += stime * us_per_tick;
    }
  }
  return c;
}

struct Sides {
  std::set<pid_t> client, server;
};

// Runs `run` (which completes `ops` requests) and prints one row: per request, each side's
// user and system CPU and allocations, and the rate.
void Loopback(const std::string& row, const Sides& sides, uint64_t ops,
              const std::function<bool()>& run) {
  const Cpu c0 = CpuOf(sides.client), s0 = CpuOf(sides.server);
  const uint64_t ca0 = AllocationsOf(sides.client), sa0 = AllocationsOf(sides.server);
  const uint64_t cl0 = LocksOf(sides.client), sl0 = LocksOf(sides.server);
  const absl::Time t0 = absl::Now();
  if (!run()) {
    std::printf("%-30s failed\n", row.c_str());
    return;
  }
  const double secs = absl::ToDoubleSeconds(absl::Now() - t0);
  const Cpu c1 = CpuOf(sides.client), s1 = CpuOf(sides.server);
  const double ca = double(AllocationsOf(sides.client) - ca0) / ops;
  const double sa = double(AllocationsOf(sides.server) - sa0) / ops;
  const double cl = double(LocksOf(sides.client) - cl0) / ops;
  const double sl = double(LocksOf(sides.server) - sl0) / ops;
  std::printf("%-30s %7.2f %7.2f %7.2f %7.2f %7.1f %7.1f %7.1f %7.1f %9.0f\n", row.c_str(),
              (c1.user_us - c0.user_us) / ops, (c1.sys_us - c0.sys_us) / ops,
              (s1.user_us - s0.user_us) / ops, (s1.sys_us - s0.sys_us) / ops, ca, sa, cl, sl,
              ops / secs);
  std::fflush(stdout);
}

void LoopbackHeader(const char* title) {
  std::printf("\n== %s\n", title);
  std::printf("%-30s %15s %15s %15s %15s %9s\n", "", "client us/req", "server us/req", "allocs/req",
              "locks/req", "");
  std::printf("%-30s %7s %7s %7s %7s %7s %7s %7s %7s %9s\n", "row", "user", "sys", "user", "sys",
              "client", "server", "client", "server", "req/s");
}

// Keeps `depth` of `ops` requests in flight: Run calls issue() for each request; each one's
// completion calls Done (from any thread, in any order). Thread-safe.
class Window {
 public:
  void Done(bool ok) {
    std::lock_guard<std::mutex> l(mu_);
    ++completed_;
    failed_ |= !ok;
    cv_.notify_one();
  }
  // False after a failed request.
  bool Run(uint64_t ops, uint32_t depth, const std::function<void()>& issue) {
    {
      std::lock_guard<std::mutex> l(mu_);
      completed_ = 0;
      failed_ = false;
    }
    for (uint64_t issued = 0; issued < ops; ++issued) {
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return issued - completed_ < depth || failed_; });
        if (failed_) return false;
      }
      issue();
    }
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return completed_ == ops || failed_; });
    return !failed_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t completed_ = 0;
  bool failed_ = false;
};

// An RPC echo of a PUT-sized payload over two engines on soft RNICs (one per side).
void RpcEcho() {
  LoopbackHeader("soft RNIC + engine, then + RPC, on loopback: echoes of a PUT request's bytes");
  const std::set<pid_t> t0 = ThreadIdsNow();
  auto da = soft::SoftDevice::Create({});
  if (!da.ok()) return (void)std::printf("soft device: %s\n", da.status().ToString().c_str());
  auto ea = engine::Engine::Create(da->get(), {});
  if (!ea.ok()) return (void)std::printf("engine: %s\n", ea.status().ToString().c_str());
  auto ca = (*ea)->CreateConnection(std::make_unique<engine::OffloadPolicy>());
  const std::set<pid_t> t1 = ThreadIdsNow();
  auto db = soft::SoftDevice::Create({});
  if (!db.ok()) return (void)std::printf("soft device: %s\n", db.status().ToString().c_str());
  auto eb = engine::Engine::Create(db->get(), {});
  if (!eb.ok()) return (void)std::printf("engine: %s\n", eb.status().ToString().c_str());
  auto cb = (*eb)->CreateConnection(std::make_unique<engine::OffloadPolicy>());
  if (!ca.ok() || !cb.ok() || !(*ca)->Connect((*cb)->local_info()).ok() ||
      !(*cb)->Connect((*ca)->local_info()).ok()) {
    return (void)std::printf("could not connect the engines\n");
  }
  const std::set<pid_t> t2 = ThreadIdsNow();
  // First the engine's messages alone: the server's handler sends each one back.
  engine::Connection* server_conn = cb->get();
  server_conn->SetMessageHandler([server_conn](absl::Span<const char> m) {
    if (!server_conn->Send(m, nullptr).ok()) std::abort();
  });
  Window window;
  (*ca)->SetMessageHandler([&window](absl::Span<const char>) { window.Done(true); });
  rpc::RpcServer server(RealClock::Get());
  server.Register(1, [](absl::string_view req, rpc::Responder r) {
    r.Reply(absl::OkStatus(), std::string(req));
  });
  (*ea)->Start();
  const std::set<pid_t> t3 = ThreadIdsNow();
  (*eb)->Start();
  const std::set<pid_t> t4 = ThreadIdsNow();
  Sides sides;
  sides.client = Without(t1, t0);
  sides.client.insert(static_cast<pid_t>(gettid()));
  for (pid_t t : Without(t3, t2)) sides.client.insert(t);
  sides.server = Without(t2, t1);
  for (pid_t t : Without(t4, t3)) sides.server.insert(t);
  proto::PutRequest put;
  put.set_key("user00001234");
  put.set_grant_id(123456);
  put.set_value_size(FLAGS_value_size);
  const std::string payload = put.SerializeAsString();
  const uint64_t ops = FLAGS_ops;
  const absl::Span<const char> bytes(payload.data(), payload.size());
  for (const uint32_t depth : {1u, FLAGS_depth}) {
    Loopback(absl::StrCat("engine message echo, ", depth), sides, ops, [&] {
      return window.Run(ops, depth, [&] {
        if (!(*ca)->Send(bytes, nullptr).ok()) window.Done(false);
      });
    });
  }
  // Then the RPC layer on top (it takes over both message handlers).
  server.Serve(cb->get(), rpc::Peer{});
  rpc::RpcClient client(ca->get(), RealClock::Get(), /*max_in_flight=*/FLAGS_depth);
  Loopback("rpc echo, 1 in flight", sides, ops, [&] {
    for (uint64_t i = 0; i < ops; ++i) {
      if (!client.CallAndWait(1, payload, absl::Seconds(5)).ok()) return false;
    }
    return true;
  });
  Loopback(absl::StrCat("rpc echo, ", FLAGS_depth, " in flight"), sides, ops, [&] {
    return window.Run(ops, FLAGS_depth, [&] {
      absl::StatusOr<uint64_t> id =
          client.Call(1, payload, absl::Seconds(5),
                      [&window](absl::StatusOr<std::string> r) { window.Done(r.ok()); });
      if (!id.ok()) window.Done(false);
    });
  });
  (*ea)->Stop();
  (*eb)->Stop();
}

// Pipelined as pipeline_bench drives it: issue in a batch while below the depth, then wait.
bool Pipelined(Client& client, bool put, const std::vector<std::string>& keys,
               const std::string& value, uint64_t ops) {
  uint64_t issued = 0, completed = 0;
  bool failed = false;
  while (completed < ops && !failed) {
    {
      Client::Batch batch = client.BeginBatch();
      while (issued < ops && issued - completed < FLAGS_depth) {
        const std::string& k = keys[issued++ % keys.size()];
        if (put) {
          client.PutAsync(k, value, [&](absl::StatusOr<uint64_t> v) {
            ++completed;
            failed |= !v.ok();
          });
        } else {
          client.GetAsync(k, [&](absl::StatusOr<std::string> v) {
            ++completed;
            failed |= !v.ok();
          });
        }
      }
    }
    const uint64_t before = completed;
    client.Wait([&] { return completed > before || failed; });
  }
  return !failed;
}

// The SDK (caller_progress, as YCSB and pipeline_bench run it) against an in-process kvserver:
// PUT and GET at 1 and at --depth in flight, and PUT again from a second client whose policy
// sends the value inline (adaptive,inline:4096: no grant, no value write).
void Sdk() {
  LoopbackHeader(
      absl::StrCat("SDK + kvserver on loopback: ", FLAGS_value_size, " B values").c_str());
  const std::set<pid_t> t0 = ThreadIdsNow();
  server::KvServerOptions so;
  so.listen = "127.0.0.1:0";
  so.metrics_address = "";
  so.arena_bytes = uint64_t{256} << 20;
  absl::StatusOr<std::unique_ptr<server::KvServer>> s = server::KvServer::Start(so);
  if (!s.ok()) return (void)std::printf("kvserver: %s\n", s.status().ToString().c_str());
  std::atomic<bool> stop{false};
  std::thread loop([&] { (*s)->Run(stop); });
  const std::set<pid_t> t1 = ThreadIdsNow();
  ClientOptions co;
  co.server = (*s)->address();
  co.caller_progress = true;
  co.max_in_flight = static_cast<int>(FLAGS_depth);
  co.policy = "adaptive,inline:0";  // granted PUTs (adaptive inlines on soft otherwise)
  absl::StatusOr<std::unique_ptr<Client>> c = Client::Connect(co);
  co.policy = "adaptive,inline:4096";
  absl::StatusOr<std::unique_ptr<Client>> ci =
      c.ok() ? Client::Connect(co) : absl::StatusOr<std::unique_ptr<Client>>(c.status());
  if (!c.ok() || !ci.ok()) {
    stop = true;
    loop.join();
    return (void)std::printf("client: %s\n", (c.ok() ? ci : c).status().ToString().c_str());
  }
  Sides sides;
  sides.server = Without(t1, t0);
  sides.client = Without(ThreadIdsNow(), t1);
  sides.client.insert(static_cast<pid_t>(gettid()));
  const std::string value(FLAGS_value_size, 'v');
  std::vector<std::string> keys;
  for (uint64_t i = 0; i < FLAGS_keys; ++i) keys.push_back(absl::StrFormat("user%08d", i));
  for (const std::string& k : keys) {
    if (!(*c)->Put(k, value).ok()) break;
  }
  const uint64_t ops = FLAGS_ops;
  const bool inline_fits = FLAGS_value_size <= 4096;
  for (Client* client : {c->get(), inline_fits ? ci->get() : nullptr}) {
    if (client == nullptr) continue;
    Loopback(client == c->get() ? "PUT, 1 in flight" : "PUT inline, 1 in flight", sides, ops, [&] {
      for (uint64_t i = 0; i < ops; ++i) {
        if (!client->Put(keys[i % keys.size()], value).ok()) return false;
      }
      return true;
    });
  }
  Loopback("GET, 1 in flight", sides, ops, [&] {
    for (uint64_t i = 0; i < ops; ++i) {
      if (!(*c)->Get(keys[i % keys.size()]).ok()) return false;
    }
    return true;
  });
  Loopback(absl::StrCat("PUT, ", FLAGS_depth, " in flight"), sides, ops,
           [&] { return Pipelined(**c, true, keys, value, ops); });
  if (inline_fits) {
    Loopback(absl::StrCat("PUT inline, ", FLAGS_depth, " in flight"), sides, ops,
             [&] { return Pipelined(**ci, true, keys, value, ops); });
  }
  Loopback(absl::StrCat("GET, ", FLAGS_depth, " in flight"), sides, ops,
           [&] { return Pipelined(**c, false, keys, value, ops); });
  c->reset();
  ci->reset();
  stop = true;
  loop.join();
}

int Main(int argc, char** argv) {
  gflags::SetUsageMessage("CPU time and allocations per request, layer by layer");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  if (FLAGS_value_size < 1 || FLAGS_value_size > 65536 || FLAGS_ops < 1000 ||
      FLAGS_ops > 100000000 || FLAGS_micro_ops < 1000 || FLAGS_micro_ops > 1000000000 ||
      FLAGS_depth < 2 || FLAGS_depth > 1024 || FLAGS_keys < 1 || FLAGS_keys > 10000000) {
    std::fprintf(stderr, "path_cost: a flag is out of range (see --help)\n");
    return 2;
  }
  SetMinLogLevel(LogLevel::kError);
  std::printf("path_cost: %u B values, %" PRIu64 " requests per loopback row, %u in flight\n",
              FLAGS_value_size, FLAGS_ops, FLAGS_depth);
  const std::set<std::string> parts = absl::StrSplit(FLAGS_parts, ',');
  for (const std::string& p : parts) {
    if (p != "layers" && p != "transport" && p != "sdk") {
      std::fprintf(stderr, "path_cost: unknown part '%s' in --parts\n", p.c_str());
      return 2;
    }
  }
  if (parts.count("layers") > 0) SingleLayers();
  if (parts.count("transport") > 0) RpcEcho();
  if (parts.count("sdk") > 0) Sdk();
  return 0;
}

}  // namespace
}  // namespace unloadkv

int main(int argc, char** argv) { return unloadkv::Main(argc, argv); }
