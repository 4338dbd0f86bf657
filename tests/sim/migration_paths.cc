// A shard's move into a fresh node's arena, by path policy (docs/cluster.md, "Moves and
// drains"; part of tests/bench:migration_bench). MODELED: the whole cluster on the simulated
// fabric, in virtual time.
//
//   bazel run -c opt //tests/sim:migration_paths -- [--records=60000] [--value_bytes=1024]
//
// For each policy, a fresh ClusterWorld (2 nodes, 1 shard, 1 replica): one client loads
// --records values of --value_bytes in a shuffled key order (so the shard's key order, which
// the state transfer follows, is scattered over the arena), then the operator moves the
// shard's primary role to the other node, which never held a replica: its arena, larger than
// the modeled translation cache's reach, is fresh to its NIC. The table gives the copy's
// virtual time (the move's start until the source's link reports the destination caught up),
// the whole move's (until the destination is the primary), the transfer's value writes by
// path, and each policy's copy time against the better static one.
#include <algorithm>
#include <array>
#include <cinttypes>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "gflags/gflags.h"
#include "tests/sim/cluster_world.h"
#include "tests/sim/replication_writes.h"
#include "transport/base/logging.h"
#include "transport/engine/policy.h"
#include "transport/placement/shard_move.h"

DEFINE_string(policies, "offload,unload,adaptive",
              "path policies of the nodes, one world each: offload, unload, adaptive, split:F "
              "or unload_after:N");
DEFINE_int32(records, 60000, "values in the moved shard (1..1000000)");
DEFINE_int32(value_bytes, 1024, "bytes per value (16..65536)");
DEFINE_uint64(seed, 1, "the load order's seed");

namespace unloadkv {
namespace {

using server::KvServer;
using world::ClusterWorld;
using world::ReplicationWrites;

constexpr int64_t kMs = 1'000'000;

struct Result {
  double copy_ms = 0, move_ms = 0;
  double writes[2] = {0, 0};  // the transfer's value writes, by path
  uint64_t arena_bytes = 0;
};

absl::StatusOr<Result> RunOne(const std::string& policy) {
  ClusterWorld::Options o;
  o.nodes = 2;
  o.shards = 1;
  o.replicas = 1;
  o.policy = policy;
  o.arena_bytes =
      std::max<uint64_t>(uint64_t{8} << 20, uint64_t(FLAGS_records) * (FLAGS_value_bytes + 256));
  absl::StatusOr<std::unique_ptr<ClusterWorld>> made = ClusterWorld::Create(o);
  if (!made.ok()) return made.status();
  ClusterWorld& w = **made;
  Result result;
  result.arena_bytes = o.arena_bytes;
  absl::Status status;
  auto body = [&] {
    w.Wait([&] { return w.FullyReplicated(); });
    ClientOptions co;
    co.timeout = absl::Seconds(1);
    co.failover_timeout = absl::Seconds(30);
    absl::StatusOr<std::unique_ptr<Client>> c = w.Connect(co);
    if (!c.ok()) {
      status = c.status();
      return;
    }
    std::vector<int> order(FLAGS_records);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937_64(FLAGS_seed));
    const std::string value(FLAGS_value_bytes, 'v');
    for (int i : order) {
      if (absl::Status st = (*c)->Put(absl::StrFormat("user%08d", i), value); !st.ok()) {
        status = st;
        return;
      }
    }
    absl::StatusOr<cluster::ClusterView> view = w.View();
    if (!view.ok()) {
      status = view.status();
      return;
    }
    const std::string from = view->ShardById(0)->primary;
    const int source = w.node_name(0) == from ? 0 : 1;
    MoveRequest req;
    req.shard = 0;
    req.to = w.node_name(1 - source);
    std::unique_ptr<cluster::MemoryClusterMap> admin = w.AdminMap();
    const std::array<double, 2> before = ReplicationWrites(w.server(source));
    const int64_t start = w.now_ns();
    const int64_t give_up = start + 120'000 * kMs;
    absl::StatusOr<MoveStep> step = StepMove(admin.get(), &req);
    if (!step.ok()) {
      status = step.status();
      return;
    }
    auto caught_up = [&] {
      KvServer* s = w.server(source);
      if (s == nullptr) return false;
      std::shared_ptr<server::ShardReplica> r = s->shards().Get(0);
      return r != nullptr && r->CaughtUp(req.to);
    };
    w.Wait([&] { return caught_up() || w.now_ns() >= give_up; });
    if (!caught_up()) {
      status = absl::DeadlineExceededError("the destination did not catch up in 120 s");
      return;
    }
    result.copy_ms = (w.now_ns() - start) / 1e6;
    const std::array<double, 2> after = ReplicationWrites(w.server(source));
    for (int p = 0; p < 2; ++p) result.writes[p] = after[p] - before[p];
    while (true) {
      step = StepMove(admin.get(), &req);
      if (step.ok() && step->state == MoveStep::State::kDone) break;
      if (!step.ok() && step.status().code() != absl::StatusCode::kUnavailable) {
        status = step.status();
        return;
      }
      if (w.now_ns() >= give_up) {
        status = absl::DeadlineExceededError("the move did not end in 120 s");
        return;
      }
      w.SleepUntil(w.now_ns() + kMs);
    }
    result.move_ms = (w.now_ns() - start) / 1e6;
  };
  absl::Status run = w.Run({body});
  if (!run.ok()) return run;
  if (!status.ok()) return status;
  return result;
}

int Main(int argc, char** argv) {
  gflags::SetUsageMessage("a shard's move into a fresh node, by path policy (simulated fabric)");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  SetMinLogLevel(LogLevel::kError);
  if (FLAGS_records < 1 || FLAGS_records > 1000000 || FLAGS_value_bytes < 16 ||
      FLAGS_value_bytes > 65536) {
    std::fprintf(stderr, "migration_paths: a flag is out of its range (see --help)\n");
    return 2;
  }
  std::vector<std::string> policies = absl::StrSplit(FLAGS_policies, ',', absl::SkipEmpty());
  std::map<std::string, Result> results;
  for (const std::string& p : policies) {
    if (absl::StatusOr<std::unique_ptr<engine::PathPolicy>> valid = engine::MakePolicy(p);
        !valid.ok()) {
      std::fprintf(stderr, "migration_paths: --policies: %s\n", valid.status().ToString().c_str());
      return 2;
    }
  }
  for (const std::string& p : policies) {
    std::fprintf(stderr, "migration_paths: %s ...\n", p.c_str());
    absl::StatusOr<Result> r = RunOne(p);
    if (!r.ok()) {
      std::fprintf(stderr, "migration_paths: %s: %s\n", p.c_str(), r.status().ToString().c_str());
      return 1;
    }
    results[p] = *r;
  }
  double best_static = 0;
  for (const char* p : {"offload", "unload"}) {
    auto it = results.find(p);
    if (it != results.end() && (best_static == 0 || it->second.copy_ms < best_static)) {
      best_static = it->second.copy_ms;
    }
  }
  const uint64_t arena = results.begin()->second.arena_bytes;
  std::printf(
      "migration_paths: MODELED (simulated fabric, virtual time). One shard of %d values of %d B "
      "(loaded in a shuffled key order), its primary role moved to a node that never held it: "
      "a fresh %.0f MiB arena against the modeled MTT cache's 16 MiB reach (seed %" PRIu64 ")\n",
      FLAGS_records, FLAGS_value_bytes, arena / 1048576.0, FLAGS_seed);
  std::printf("%-9s | %9s %9s | %9s %9s %7s | %s\n", "policy", "copy ms", "move ms", "offload",
              "unload", "unld", "copy x best static");
  for (const std::string& p : policies) {
    const Result& r = results[p];
    const double n = r.writes[0] + r.writes[1];
    std::printf("%-9s | %9.2f %9.2f | %9.0f %9.0f %6.0f%% | %.3fx\n", p.c_str(), r.copy_ms,
                r.move_ms, r.writes[0], r.writes[1], n > 0 ? 100 * r.writes[1] / n : 0,
                best_static > 0 ? r.copy_ms / best_static : 0);
  }
  std::printf(
      "copy: the move's start until the source's link reports the destination caught up (every "
      "live value and snapshot record acknowledged); move: until the map names it the primary "
      "(the operator's steps every 1 ms); x best static: copy time over the faster of offload "
      "and unload\n");
  return 0;
}

}  // namespace
}  // namespace unloadkv

int main(int argc, char** argv) { return unloadkv::Main(argc, argv); }
