// Which path a new primary's replication writes take after a failover (docs/sim-cluster.md,
// "Replication paths after a failover"). MODELED: the whole cluster on the simulated fabric.
//
//   bazel run -c opt //tests/sim:failover_paths -- --policies=adaptive,offload,unload [--durable]
//
// For each policy, a fresh ClusterWorld (3 nodes, 2 shards of 3 replicas): one client loads
// --records values of --value_bytes (a working set whose pages outnumber the modeled MTT
// cache), updates --warm_updates of them at random, then the primary of shard 0 is crashed.
// Once a backup took shard 0 over, the client updates random keys of shard 0 only, and the
// new primary's replication value writes (unloadkv_replication_value_writes_total) are read
// after each PUT: the table gives, per block of --block of the first --after of them, how
// many went each path and the mean PUT latency in virtual time. It also says whether the new
// primary already wrote into the remaining backup's device before the failover (as primary of
// shard 1): then its links share that device's target model (docs/engine.md, "The per-target
// model"); otherwise only the backup's hint (its translation cache is full) helps. With
// --durable the nodes log to simulated disks: the surviving backup keeps its state and the new
// primary catches it up by delta, so no state transfer shares the link with the live writes.
#include <algorithm>
#include <array>
#include <cinttypes>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gflags/gflags.h"
#include "tests/sim/cluster_world.h"
#include "tests/sim/replication_writes.h"
#include "transport/base/logging.h"

DEFINE_string(policies, "adaptive,offload,unload", "path policies of the nodes, one world each");
DEFINE_int32(records, 40000, "values loaded before the failover (1..1000000)");
DEFINE_int32(value_bytes, 1024, "bytes per value (16..65536)");
DEFINE_int32(warm_updates, 20000, "random updates before the failover (0..10000000)");
DEFINE_int32(after, 1000, "replication value writes reported after the failover (1..100000)");
DEFINE_int32(block, 100, "replication writes per table row (1..after)");
DEFINE_int32(clients, 8, "closed-loop clients updating at once (1..64)");
DEFINE_uint64(seed, 1, "the key sequences' seed");
DEFINE_bool(durable, false,
            "nodes log to simulated disks: the surviving backup keeps its state and the new "
            "primary catches it up by delta from its log instead of a state transfer");
DEFINE_string(fsync, "never", "with --durable: the logs' policy");
DEFINE_int32(disk_latency_us, 2,
             "with --durable: virtual time a log round takes (0..100000); the cluster "
             "simulation's 200 adds a millisecond to every PUT, which hides the paths' difference");

namespace unloadkv {
namespace {

using server::KvServer;
using world::ClusterWorld;
using world::ReplicationWrites;

// What the live nodes' adaptive policies had learned (gauges refreshed every 100 ms): cells
// of their target models by regime, and policy switches.
std::string ModelState(ClusterWorld& w) {
  std::string out;
  for (int i = 0; i < w.nodes(); ++i) {
    KvServer* server = w.server(i);
    if (server == nullptr) continue;
    double cells[2] = {0, 0}, switches = 0;
    for (const prometheus::MetricFamily& f : server->registry()->Collect()) {
      for (const prometheus::ClientMetric& m : f.metric) {
        if (f.name == "unloadkv_policy_switches_total") switches += m.counter.value;
        if (f.name != "unloadkv_engine_target_model_cells") continue;
        for (const prometheus::ClientMetric::Label& l : m.label) {
          if (l.name == "regime") cells[l.value == "unload"] += m.gauge.value;
        }
      }
    }
    absl::StrAppend(&out, out.empty() ? "" : ", ", w.node_name(i), ": ", cells[0], " offload and ",
                    cells[1], " unload cells, ", switches, " switches");
  }
  return out;
}

std::string Key(int i) { return absl::StrFormat("user%08d", i); }

struct Row {
  double offloaded = 0, unloaded = 0;
  double put_us_sum = 0;
  int puts = 0;
};

struct Result {
  std::string old_primary;                // primary of shard 0 before: crashed
  std::set<std::string> writers_before;   // the other primaries before the crash
  std::vector<std::string> after;         // each shard's primary -> backups after
  bool shared_model = false;              // a primary after the crash replicated before it
  double failover_ms = 0;                 // crash to every shard's primary and backup in the map
  double catchup[2] = {0, 0};             // state-transfer writes meanwhile, by path
  std::string model_before, model_after;  // ModelState when measuring began and ended
  std::vector<Row> rows;
};

absl::StatusOr<Result> RunOne(const std::string& policy) {
  ClusterWorld::Options o;
  o.nodes = 3;
  o.shards = 2;
  o.replicas = 3;
  o.policy = policy;
  o.durable = FLAGS_durable;
  o.fsync = FLAGS_fsync;
  o.disk_latency = absl::Microseconds(FLAGS_disk_latency_us);
  // Each shard holds about half the records; the slab arena rounds values up.
  o.arena_bytes =
      std::max<uint64_t>(uint64_t{8} << 20, uint64_t(FLAGS_records) * (FLAGS_value_bytes + 256));
  absl::StatusOr<std::unique_ptr<ClusterWorld>> made = ClusterWorld::Create(o);
  if (!made.ok()) return made.status();
  ClusterWorld& w = **made;
  // Log lines in virtual time (ms since the world began).
  SetLogSink(
      [](void* world, LogLevel level, absl::string_view message) {
        std::fprintf(stderr, "%12.3f ms %c %.*s\n",
                     static_cast<ClusterWorld*>(world)->now_ns() / 1e6, "IWE"[int(level)],
                     static_cast<int>(message.size()), message.data());
      },
      &w);
  Result result;
  absl::Status status;                  // the first failure of any client
  std::array<double, 2> base = {0, 0};  // replication writes counted so far, by path
  double counted = 0;
  // Client 0 loads, then every client updates (warm-up), then client 0 crashes shard 0's
  // primary and waits for the takeover, then every client updates (measured).
  enum Phase { kLoading, kWarming, kFailingOver, kMeasuring, kDone };
  Phase phase = kLoading;  // participants run one at a time (Lockstep): no lock needed
  int warming = FLAGS_clients;
  int victim = -1;
  std::vector<std::array<double, 2>> before;  // every node's counts when measuring began
  const std::string value(FLAGS_value_bytes, 'v');
  auto failed = [&](absl::Status st) {
    if (status.ok()) status = std::move(st);
    phase = kDone;
  };
  // Sends one PUT of a random key; a PUT whose outcome is unknown (the crashed primary's
  // connection was lost, or the takeover outlasted the client's timeout) is sent again, up
  // to 60 times. Returns false after a failure.
  auto put = [&](Client& c, std::mt19937_64& rng) {
    const std::string key = Key(static_cast<int>(rng() % FLAGS_records));
    absl::Status st = c.Put(key, value);
    for (int retry = 0; retry < 60 && absl::IsUnknown(st); ++retry) st = c.Put(key, value);
    if (!st.ok()) failed(st);
    return st.ok();
  };
  auto client = [&](int k) {
    w.Wait([&] { return w.FullyReplicated(); });
    ClientOptions co;
    co.timeout = absl::Seconds(1);
    co.failover_timeout = absl::Seconds(30);
    absl::StatusOr<std::unique_ptr<Client>> c = w.Connect(co);
    if (!c.ok()) return failed(c.status());
    std::mt19937_64 rng(FLAGS_seed * 1000 + k);
    if (k == 0) {
      for (int i = 0; i < FLAGS_records && phase != kDone; ++i) {
        if (absl::Status st = (*c)->Put(Key(i), value); !st.ok()) return failed(st);
        if (i % 10000 == 9999) std::fprintf(stderr, "  %s: loaded %d\n", policy.c_str(), i + 1);
      }
      if (phase == kLoading) phase = kWarming;
    }
    w.Wait([&] { return phase != kLoading; });
    for (int i = k; i < FLAGS_warm_updates && phase == kWarming; i += FLAGS_clients) {
      if (!put(**c, rng)) return;
    }
    --warming;
    if (k == 0) {
      w.Wait([&] { return warming == 0 || phase == kDone; });
      if (phase == kDone) return;
      phase = kFailingOver;
      absl::StatusOr<cluster::ClusterView> view = w.View();
      if (!view.ok()) return failed(view.status());
      result.old_primary = view->ShardById(0)->primary;
      for (uint32_t shard = 0; shard < 2; ++shard) {
        if (view->ShardById(shard)->primary != result.old_primary) {
          result.writers_before.insert(view->ShardById(shard)->primary);
        }
      }
      victim = 0;
      while (w.node_name(victim) != result.old_primary) ++victim;
      for (int i = 0; i < w.nodes(); ++i) before.push_back(ReplicationWrites(w.server(i)));
      const int64_t crashed_at = w.now_ns();
      std::fprintf(stderr, "  %s: crashing %s, primary of shard 0\n", policy.c_str(),
                   result.old_primary.c_str());
      w.Crash(victim);
      // The takeover re-adds the surviving backup by a state transfer of the shard (its
      // catch-up writes are counted apart): wait until every shard has a primary and a backup.
      auto replicated = [&] {
        absl::StatusOr<cluster::ClusterView> v = w.View();
        if (!v.ok()) return false;
        for (uint32_t shard = 0; shard < 2; ++shard) {
          const cluster::ShardInfo* s = v->ShardById(shard);
          if (s->primary.empty() || s->primary == result.old_primary || s->backups.empty() ||
              !s->joining.empty()) {
            return false;
          }
        }
        return true;
      };
      const int64_t give_up = w.now_ns() + absl::ToInt64Nanoseconds(absl::Seconds(120));
      w.Wait([&] { return replicated() || w.now_ns() >= give_up; });
      if (!replicated()) {
        return failed(
            absl::DeadlineExceededError("no primary and backup per shard 120 s after the crash"));
      }
      result.failover_ms = (w.now_ns() - crashed_at) / 1e6;
      result.model_before = ModelState(w);
      for (int i = 0; i < w.nodes(); ++i) {
        if (i == victim) continue;
        const std::array<double, 2> n = ReplicationWrites(w.server(i));
        for (int p = 0; p < 2; ++p) result.catchup[p] += n[p] - before[i][p];
        before[i] = n;
      }
      phase = kMeasuring;
    }
    w.Wait([&] { return phase >= kMeasuring; });
    while (phase == kMeasuring && counted < FLAGS_after) {
      const int64_t start = w.now_ns();
      if (!put(**c, rng)) return;
      std::array<double, 2> now = {0, 0};
      for (int i = 0; i < w.nodes(); ++i) {
        if (i == victim) continue;
        const std::array<double, 2> n = ReplicationWrites(w.server(i));
        for (int p = 0; p < 2; ++p) now[p] += n[p] - before[i][p];
      }
      // Writes past --after (concurrent PUTs overshoot it) join the last row.
      const size_t row =
          static_cast<size_t>(std::min<double>(counted, FLAGS_after - 1) / FLAGS_block);
      if (result.rows.size() <= row) result.rows.resize(row + 1);
      Row& r = result.rows[row];
      r.offloaded += now[0] - base[0];
      r.unloaded += now[1] - base[1];
      r.put_us_sum += (w.now_ns() - start) / 1e3;
      ++r.puts;
      counted += (now[0] - base[0]) + (now[1] - base[1]);
      base = now;
    }
    if (k != 0) return;
    result.model_after = ModelState(w);
    absl::StatusOr<cluster::ClusterView> view = w.View();
    if (!view.ok()) return failed(view.status());
    for (uint32_t shard = 0; shard < 2; ++shard) {
      const cluster::ShardInfo* s = view->ShardById(shard);
      result.after.push_back(
          absl::StrCat("shard ", shard, ": ", s->primary, " -> ", absl::StrJoin(s->backups, ",")));
      result.shared_model |= result.writers_before.count(s->primary) > 0;
    }
  };
  std::vector<std::function<void()>> bodies;
  for (int k = 0; k < FLAGS_clients; ++k) bodies.push_back([&client, k] { client(k); });
  absl::Status run = w.Run(std::move(bodies));
  SetLogSink(nullptr, nullptr);
  if (!run.ok()) return run;
  if (!status.ok()) return status;
  return result;
}

int Main(int argc, char** argv) {
  gflags::SetUsageMessage("replication writes by path after a failover, on the simulated fabric");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  SetMinLogLevel(getenv("FAILOVER_LOG") ? LogLevel::kInfo : LogLevel::kWarning);
  if (FLAGS_records < 1 || FLAGS_records > 1000000 || FLAGS_value_bytes < 16 ||
      FLAGS_value_bytes > 65536 || FLAGS_warm_updates < 0 || FLAGS_warm_updates > 10000000 ||
      FLAGS_after < 1 || FLAGS_after > 100000 || FLAGS_block < 1 || FLAGS_block > FLAGS_after ||
      FLAGS_clients < 1 || FLAGS_clients > 64 || FLAGS_disk_latency_us < 0 ||
      FLAGS_disk_latency_us > 100000) {
    std::fprintf(stderr, "failover_paths: a flag is out of its range (see --help)\n");
    return 2;
  }
  std::vector<std::string> policies = absl::StrSplit(FLAGS_policies, ',', absl::SkipEmpty());
  for (const std::string& p : policies) {
    if (p != "adaptive" && p != "offload" && p != "unload") {
      std::fprintf(stderr, "failover_paths: --policies: unknown policy '%s'\n", p.c_str());
      return 2;
    }
  }
  std::printf(
      "failover_paths: MODELED (simulated fabric, virtual time). 3 nodes, 2 shards x 3 "
      "replicas, %d values of %d B, %d random updates by %d clients, then shard 0's primary "
      "crashes; the first %d replication value writes after the takeover by path (seed %" PRIu64
      ")\n",
      FLAGS_records, FLAGS_value_bytes, FLAGS_warm_updates, FLAGS_clients, FLAGS_after, FLAGS_seed);
  for (const std::string& policy : policies) {
    absl::StatusOr<Result> r = RunOne(policy);
    if (!r.ok()) {
      std::fprintf(stderr, "failover_paths: %s: %s\n", policy.c_str(),
                   r.status().ToString().c_str());
      return 1;
    }
    std::printf(
        "\n%s: %s crashed; %.0f ms (virtual) later %s, after state transfers of %.0f "
        "offloaded and %.0f unloaded writes; %s\n",
        policy.c_str(), r->old_primary.c_str(), r->failover_ms,
        absl::StrJoin(r->after, "; ").c_str(), r->catchup[0], r->catchup[1],
        r->shared_model ? "a new primary replicated before (its links share its target model)"
                        : "no new primary replicated before (fresh models; the backups' hints)");
    if (policy == "adaptive") {
      std::printf("target models after the state transfers: %s\n", r->model_before.c_str());
      std::printf("target models after the table's writes:  %s\n", r->model_after.c_str());
    }
    std::printf("%12s | %8s %8s | %8s | %12s\n", "writes", "offload", "unload", "unld", "put_us");
    double off = 0, unl = 0, us = 0;
    int puts = 0, first = 1;
    for (const Row& row : r->rows) {
      const double n = row.offloaded + row.unloaded;
      std::printf("%5d-%-6d | %8.0f %8.0f | %7.0f%% | %12.2f\n", first,
                  first + static_cast<int>(n) - 1, row.offloaded, row.unloaded,
                  n > 0 ? 100 * row.unloaded / n : 0, row.puts ? row.put_us_sum / row.puts : 0);
      first += static_cast<int>(n);
      off += row.offloaded;
      unl += row.unloaded;
      us += row.put_us_sum;
      puts += row.puts;
    }
    std::printf("%12s | %8.0f %8.0f | %7.0f%% | %12.2f\n", "all", off, unl,
                100 * unl / std::max(1.0, off + unl), us / std::max(1, puts));
  }
  return 0;
}

}  // namespace
}  // namespace unloadkv

int main(int argc, char** argv) { return unloadkv::Main(argc, argv); }
