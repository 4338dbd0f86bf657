// migration_bench: how fast a live shard moves between nodes through the write engine
// (docs/cluster.md, "Moves and drains"), measured on kvserver processes over the soft transport
// with a real etcd:
//
//  * moves: one shard of --shard_mib of live values moved from node to node, --rounds times
//    (back and forth), while a client runs 50% GET / 50% PUT at --in_flight. Each round first
//    runs rnic_bench's bulk WRITE at the same value size (the transport's limit), so the
//    ratio is measured side by side. Per round: the copy (the destination named joining until
//    it is a backup in the map), its MB/s of live values against rnic_bench's, the clients'
//    throughput during the whole move against the mean of the 2 s before and the 2 s after it
//    (the steady state: the client's own rate drifts between rounds on a shared VM), and the
//    longest stop;
//  * scale-out: a cluster of --cluster_mib (4 shards, 2 replicas) on two nodes, then a third
//    node started and `cluster rebalance` run: the time until it holds its share;
//  * MODELED: tests/sim:migration_paths, the same move on the simulated fabric into a fresh
//    node's arena larger than the modeled translation cache's reach, with each path policy.
//
// The kvservers route the transfer's writes by --server_policy (adaptive; offload and unload
// give the static paths' figures on the soft transport).
//
//   bazel run -c opt //tests/bench:migration_bench -- [--shard_mib=256] [--cluster_mib=1024]
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "gflags/gflags.h"
#include "tests/kv/process_harness.h"
#include "tests/support/etcd_process.h"
#include "tests/support/test_auth.h"
#include "transport/base/logging.h"
#include "transport/cluster/etcd_cluster_map.h"
#include "transport/engine/policy.h"
#include "transport/placement/rebalance.h"
#include "transport/placement/shard_move.h"

DEFINE_uint64(shard_mib, 256, "moves: MiB of live values in the moved shard (1..4096)");
DEFINE_uint64(cluster_mib, 1024, "scale-out: MiB of live values in the cluster (0 skips; ..8192)");
DEFINE_uint32(value_size, 4096, "bytes per value (64..65536)");
DEFINE_int32(rounds, 3, "moves: rounds of (rnic_bench, one move) (1..20)");
DEFINE_int32(in_flight, 16, "the client's requests in flight during the moves (1..256)");
DEFINE_string(transfer_mib_s, "0,50,25",
              "moves: kvserver --transfer_mib_s values, one set of rounds each (0: unpaced)");
DEFINE_string(server_policy, "adaptive",
              "kvserver --policy: the path policy of the transfer's writes (offload, unload, "
              "adaptive, split:F, unload_after:N)");
DEFINE_bool(modeled, true, "also run tests/sim:migration_paths (MODELED, simulated fabric)");

namespace unloadkv {
namespace {

using cluster::ClusterView;
using cluster::ShardInfo;

int64_t NowNs() { return absl::ToUnixNanos(absl::Now()); }
double Mib(double bytes) { return bytes / (1 << 20); }

std::string Key(uint64_t i) { return absl::StrFormat("key%010d", i); }

// rnic_bench's bulk WRITE throughput at `size` bytes (two processes over loopback), in MB/s.
absl::StatusOr<double> RnicWriteMbps(uint32_t size) {
  testing::Output out = testing::RunBinary(
      "transport/bench/rnic_bench", {absl::StrCat("--sizes=", size), "--latency_iters=200"}, 120);
  // The throughput table: "size | tcp GB/s | write GB/s ops/s x tcp | send ...".
  bool table = false;
  for (absl::string_view line : absl::StrSplit(out.out, '\n')) {
    if (absl::StrContains(line, "write GB/s")) {
      table = true;
      continue;
    }
    if (!table) continue;
    std::vector<absl::string_view> cols = absl::StrSplit(line, '|');
    if (cols.size() < 3) continue;
    std::vector<absl::string_view> f = absl::StrSplit(cols[2], ' ', absl::SkipEmpty());
    double gbps = 0;
    if (!f.empty() && absl::SimpleAtod(f[0], &gbps)) return gbps * 1000;
  }
  return absl::InternalError(
      absl::StrCat("could not read rnic_bench's output:\n", out.out, out.err));
}

// Puts keys [first, first + count) with `value`, up to 64 at a time. False on a failure.
bool Fill(Client& c, uint64_t first, uint64_t count, const std::string& value, const char* what) {
  std::atomic<uint64_t> done{0}, failed{0};
  const absl::Time start = absl::Now();
  absl::Time said = start;
  for (uint64_t i = 0; i < count; ++i) {
    c.Wait([&] { return c.in_flight() < 64; });
    c.PutAsync(Key(first + i), value, [&](absl::StatusOr<uint64_t> r) {
      if (!r.ok()) ++failed;
      ++done;
    });
    if (absl::Now() - said > absl::Seconds(5)) {
      said = absl::Now();
      std::fprintf(stderr, "migration_bench: %s: %llu of %llu values\n", what,
                   static_cast<unsigned long long>(i), static_cast<unsigned long long>(count));
    }
  }
  c.Wait([&] { return done.load() == count; });
  std::fprintf(stderr, "migration_bench: %s: %llu values in %.1f s\n", what,
               static_cast<unsigned long long>(count), absl::ToDoubleSeconds(absl::Now() - start));
  return failed.load() == 0;
}

// A client running 50% GET / 50% PUT over keys [0, keys) at `in_flight`, on a thread of its
// own, recording when each operation completed (failures counted apart).
class Traffic {
 public:
  Traffic(Client* c, uint64_t keys, const std::string& value, int in_flight)
      : thread_([this, c, keys, value, in_flight] {
          std::mt19937_64 rng(7);
          while (!stop_.load()) {
            c->Wait([&] { return c->in_flight() < in_flight; });
            const std::string key = Key(rng() % keys);
            auto record = [this](bool ok) {
              std::lock_guard<std::mutex> l(mu_);
              if (ok) {
                done_ns_.push_back(NowNs());
              } else {
                ++failed_;
              }
            };
            if (rng() % 2 == 0) {
              c->PutAsync(key, value, [record](absl::StatusOr<uint64_t> r) { record(r.ok()); });
            } else {
              c->GetAsync(key, [record](absl::StatusOr<std::string> r) { record(r.ok()); });
            }
          }
          c->Wait([&] { return c->in_flight() == 0; });
        }) {}
  ~Traffic() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  // Operations completed in [from, to) per second, and the longest time in it without one.
  std::pair<double, double> Rate(int64_t from, int64_t to) {
    std::lock_guard<std::mutex> l(mu_);
    uint64_t n = 0;
    int64_t last = from, gap = 0;
    for (int64_t t : done_ns_) {
      if (t < from || t >= to) continue;
      ++n;
      gap = std::max(gap, t - last);
      last = t;
    }
    gap = std::max(gap, to - last);
    return {n / ((to - from) / 1e9), gap / 1e6};
  }
  uint64_t failed() {
    std::lock_guard<std::mutex> l(mu_);
    return failed_;
  }

 private:
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<int64_t> done_ns_;
  uint64_t failed_ = 0;
  std::thread thread_;  // last: it uses the members above
};

// Sums a metric's samples (every label set) on a node.
double Metric(const testing::ServerProcess& s, const std::string& name,
              const std::string& has = "") {
  double sum = 0;
  for (absl::string_view line : absl::StrSplit(testing::Scrape(s.metrics_address()), '\n')) {
    if (!absl::StartsWith(line, name) ||
        (line.size() > name.size() && line[name.size()] != '{' && line[name.size()] != ' ')) {
      continue;
    }
    if (!has.empty() && !absl::StrContains(line, has)) continue;
    double v = 0;
    if (absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &v)) sum += v;
  }
  return sum;
}

class Bench {
 public:
  absl::Status Start() {
    absl::StatusOr<std::unique_ptr<testing::EtcdProcess>> etcd = testing::EtcdProcess::Start();
    if (!etcd.ok()) return etcd.status();
    etcd_ = *std::move(etcd);
    auth_file_ = testing::WriteTestAuthFile({"a1", "a2", "b1", "b2", "b3"}, "migration_bench_auth");
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<cluster::EtcdClusterMap>> Create(const std::string& cluster,
                                                                  int shards, int replicas,
                                                                  uint64_t keys) {
    auto map = cluster::EtcdClusterMap::Open(etcd_->endpoint(), cluster);
    if (!map.ok()) return map.status();
    std::vector<std::string> splits;
    for (int i = 1; i < shards; ++i) splits.push_back(Key(keys * i / shards));
    absl::StatusOr<std::vector<ShardInfo>> initial = cluster::InitialShards(shards, splits);
    if (!initial.ok()) return initial.status();
    if (auto created = (*map)->Create(replicas, *initial); !created.ok()) return created.status();
    return map;
  }

  absl::Status StartNode(const std::string& cluster, const std::string& name, uint64_t arena,
                         uint64_t transfer_mib_s = 0) {
    nodes_[name] = std::make_unique<testing::ServerProcess>(std::vector<std::string>{
        "--etcd=" + etcd_->endpoint(), "--cluster=" + cluster, "--node=" + name,
        absl::StrCat("--arena_bytes=", arena), "--auth_file=" + auth_file_, "--metrics=127.0.0.1:0",
        absl::StrCat("--transfer_mib_s=", transfer_mib_s), "--policy=" + FLAGS_server_policy});
    if (nodes_[name]->address().empty()) return absl::InternalError(name + " did not start");
    return absl::OkStatus();
  }

  // Until every shard has a live primary, `backups` backups each, nobody joining.
  absl::Status WaitServing(cluster::ClusterMap* map, size_t backups) {
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (absl::Now() < deadline) {
      absl::StatusOr<ClusterView> v = map->Read();
      bool ok = v.ok() && !v->shard_list.empty();
      for (size_t i = 0; ok && i < v->shard_list.size(); ++i) {
        const ShardInfo& s = v->shard_list[i];
        ok = v->IsLive(s.primary) && s.backups.size() == backups && s.joining.empty();
      }
      if (ok) return absl::OkStatus();
      absl::SleepFor(absl::Milliseconds(20));
    }
    return absl::DeadlineExceededError("the cluster did not form within 60 s");
  }

  absl::StatusOr<std::unique_ptr<Client>> Connect(const std::string& cluster) {
    ClientOptions o;
    o.etcd = etcd_->endpoint();
    o.cluster = cluster;
    o.max_in_flight = 64;
    o.failover_timeout = absl::Seconds(30);
    o.auth_file = auth_file_;
    o.user = testing::kTestClientUser;
    return Client::Connect(o);
  }

  testing::ServerProcess& node(const std::string& name) { return *nodes_.at(name); }
  void StopNodes() { nodes_.clear(); }
  const std::string& etcd() const { return etcd_->endpoint(); }

 private:
  std::unique_ptr<testing::EtcdProcess> etcd_;
  std::string auth_file_;
  std::map<std::string, std::unique_ptr<testing::ServerProcess>> nodes_;
};

struct MoveRow {
  double live_mib = 0, copy_s = 0, move_s = 0, mbps = 0, rnic_mbps = 0;
  double before = 0, after = 0, during = 0, stop_ms = 0, unloaded = 0;
  double steady() const { return (before + after) / 2; }
};

// Moves shard 0's primary role to `to`, timing the copy (from the move's start until the map
// names `to` a backup) and the whole move, with the traffic's rate before, during and after it.
absl::StatusOr<MoveRow> MoveOnce(Bench& b, const std::string& cluster, cluster::ClusterMap* map,
                                 Traffic* traffic, const std::string& from, const std::string& to) {
  MoveRow row;
  const double sent_before = Metric(b.node(from), "unloadkv_catchup_bytes_total");
  const double writes_before[2] = {
      Metric(b.node(from), "unloadkv_replication_value_writes_total", "path=\"offload\""),
      Metric(b.node(from), "unloadkv_replication_value_writes_total", "path=\"unload\"")};
  if (traffic != nullptr) absl::SleepFor(absl::Seconds(2));  // the steady state compared with
  const int64_t start = NowNs();
  if (traffic != nullptr) row.before = traffic->Rate(start - 2'000'000'000, start).first;
  // When the map names `to` a backup: read on each change of the map (a watch), not polled,
  // so that the measurement costs the CPUs the client and the transfer share next to nothing
  // (a 2 ms poll kept etcd at 40% of a CPU during the copy).
  std::atomic<int64_t> backup_ns{0};
  auto watch_map = cluster::EtcdClusterMap::Open(b.etcd(), cluster);
  if (!watch_map.ok()) return watch_map.status();
  cluster::ClusterMap* reader = watch_map->get();
  auto watch = (*watch_map)->Watch([&backup_ns, reader, to](int64_t) {
    if (backup_ns.load() != 0) return;
    absl::StatusOr<ClusterView> v = reader->Read();
    if (!v.ok()) return;
    const ShardInfo& s = v->shard_list[0];
    if (s.primary == to || std::count(s.backups.begin(), s.backups.end(), to) > 0) {
      backup_ns = NowNs();
    }
  });
  if (!watch.ok()) return watch.status();
  MoveRequest req;
  req.shard = 0;
  req.to = to;
  // Stepped every 50 ms (kvclient: 200 ms), for the same reason.
  absl::Status moved = RunMove(
      map, req, absl::Seconds(300), absl::Milliseconds(50),
      [](const std::string& s) { std::fprintf(stderr, "migration_bench:   %s\n", s.c_str()); });
  const int64_t end = NowNs();
  watch->reset();
  if (!moved.ok()) return moved;
  // A watch may coalesce changes; the move's end bounds the copy when none was seen.
  row.copy_s = ((backup_ns.load() != 0 ? backup_ns.load() : end) - start) / 1e9;
  row.move_s = (end - start) / 1e9;
  if (traffic != nullptr) {
    std::tie(row.during, row.stop_ms) = traffic->Rate(start, end);
    absl::SleepFor(absl::Seconds(2));
    row.after = traffic->Rate(end, end + 2'000'000'000).first;
  }
  const double sent = Metric(b.node(from), "unloadkv_catchup_bytes_total") - sent_before;
  row.live_mib = Mib(sent);
  row.mbps = sent / 1e6 / row.copy_s;
  const double off =
      Metric(b.node(from), "unloadkv_replication_value_writes_total", "path=\"offload\"") -
      writes_before[0];
  const double unl =
      Metric(b.node(from), "unloadkv_replication_value_writes_total", "path=\"unload\"") -
      writes_before[1];
  row.unloaded = off + unl > 0 ? unl / (off + unl) : 0;
  return row;
}

int Moves(Bench& b, uint64_t rate) {
  const uint64_t keys = (FLAGS_shard_mib << 20) / FLAGS_value_size;
  const uint64_t arena = (FLAGS_shard_mib << 20) * 3 / 2 + (64 << 20);
  const std::string cluster = absl::StrCat("move-", rate);
  auto map = b.Create(cluster, 1, 1, keys);
  if (!map.ok()) {
    std::fprintf(stderr, "migration_bench: %s\n", map.status().ToString().c_str());
    return 1;
  }
  for (const char* n : {"a1", "a2"}) {
    if (absl::Status st = b.StartNode(cluster, n, arena, rate); !st.ok()) {
      std::fprintf(stderr, "migration_bench: %s\n", st.ToString().c_str());
      return 1;
    }
    if (std::string(n) == "a1" && !b.WaitServing(map->get(), 0).ok()) return 1;
  }
  auto loader = b.Connect(cluster);
  auto client = b.Connect(cluster);
  if (!loader.ok() || !client.ok()) {
    std::fprintf(stderr, "migration_bench: cannot connect\n");
    return 1;
  }
  const std::string value(FLAGS_value_size, 'v');
  // The arena's slots hold dead values too: a quarter of the keys are written twice.
  if (!Fill(**loader, 0, keys, value, "loading the shard") ||
      !Fill(**loader, 0, keys / 4, value, "overwriting a quarter")) {
    return 1;
  }
  std::vector<MoveRow> rows;
  std::string from = "a1", to = "a2";
  // Round 0 without the client (the transfer alone against rnic_bench), then under load.
  auto round = [&](int n, Traffic* traffic) {
    absl::StatusOr<double> rnic = RnicWriteMbps(FLAGS_value_size);
    if (!rnic.ok()) {
      std::fprintf(stderr, "migration_bench: %s\n", rnic.status().ToString().c_str());
      return false;
    }
    std::fprintf(stderr, "migration_bench: round %d: rnic_bench WRITE %.0f MB/s; moving %s -> %s\n",
                 n, *rnic, from.c_str(), to.c_str());
    absl::StatusOr<MoveRow> row = MoveOnce(b, cluster, map->get(), traffic, from, to);
    if (!row.ok()) {
      std::fprintf(stderr, "migration_bench: %s\n", row.status().ToString().c_str());
      return false;
    }
    row->rnic_mbps = *rnic;
    rows.push_back(*row);
    std::swap(from, to);
    return true;
  };
  if (!round(0, nullptr)) return 1;
  {
    Traffic traffic(client->get(), keys, value, FLAGS_in_flight);
    for (int n = 1; n <= FLAGS_rounds; ++n) {
      if (!round(n, &traffic)) return 1;
    }
    traffic.Stop();
    if (traffic.failed() > 0) {
      std::printf("(%llu of the client's operations failed during the moves)\n",
                  static_cast<unsigned long long>(traffic.failed()));
    }
  }
  std::printf(
      "moves, kvserver --transfer_mib_s=%llu%s: one shard of %llu MiB of live values (%llu x "
      "%u B; a quarter written twice), 1 replica, its primary role moved back and forth between "
      "two kvservers; a client at %d in flight (50%% GET, 50%% PUT) throughout (measured)\n",
      static_cast<unsigned long long>(rate), rate == 0 ? " (unpaced)" : "",
      static_cast<unsigned long long>(FLAGS_shard_mib), static_cast<unsigned long long>(keys),
      FLAGS_value_size, FLAGS_in_flight);
  std::printf("%5s | %8s | %7s %7s | %8s %10s %6s | %9s %9s %9s %6s | %8s | %7s\n", "round",
              "sent MiB", "copy s", "move s", "copy MB/s", "rnic MB/s", "x rnic", "before/s",
              "during/s", "after/s", "x", "stop ms", "unload");
  for (size_t i = 0; i < rows.size(); ++i) {
    const MoveRow& r = rows[i];
    std::printf("%5zu | %8.1f | %7.2f %7.2f | %8.0f %10.0f %5.2fx | ", i, r.live_mib, r.copy_s,
                r.move_s, r.mbps, r.rnic_mbps, r.mbps / r.rnic_mbps);
    if (i == 0) {
      std::printf("%9s %9s %9s %6s | %8s | %6.0f%%\n", "no client", "-", "-", "-", "-",
                  100 * r.unloaded);
    } else {
      std::printf("%9.0f %9.0f %9.0f %5.2fx | %8.0f | %6.0f%%\n", r.before, r.during, r.after,
                  r.during / r.steady(), r.stop_ms, 100 * r.unloaded);
    }
  }
  std::printf(
      "copy: from the move's start until the map names the destination a backup (it holds every "
      "live value and the writes made meanwhile); rnic MB/s: rnic_bench's WRITE of %u B at 32 "
      "in flight, run just before; during/s: the client's completed operations per second over "
      "the whole move (copy and hand-over); x: during against the mean of the 2 s before "
      "(before/s) "
      "and the 2 s after (after/s); stop: the longest time "
      "without a completed operation during it; unload: the transfer's value writes unloaded\n\n",
      FLAGS_value_size);
  b.StopNodes();
  return 0;
}

int ScaleOut(Bench& b) {
  const uint64_t keys = (FLAGS_cluster_mib << 20) / FLAGS_value_size;
  const uint64_t arena = (FLAGS_cluster_mib << 20) / 4 * 3 / 2 + (64 << 20);
  auto map = b.Create("grow", 4, 2, keys);
  if (!map.ok()) return 1;
  for (const char* n : {"b1", "b2"}) {
    if (!b.StartNode("grow", n, arena).ok()) return 1;
  }
  if (!b.WaitServing(map->get(), 1).ok()) return 1;
  auto loader = b.Connect("grow");
  if (!loader.ok() ||
      !Fill(**loader, 0, keys, std::string(FLAGS_value_size, 'v'), "loading the cluster")) {
    return 1;
  }
  if (!b.StartNode("grow", "b3", arena).ok()) return 1;
  const absl::Time registered = absl::Now() + absl::Seconds(20);
  while (absl::Now() < registered) {
    absl::StatusOr<ClusterView> v = (*map)->Read();
    if (v.ok() && v->IsLive("b3")) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  int moves = 0;
  const absl::Time start = absl::Now();
  absl::Status st = RunRebalance(map->get(), absl::Seconds(600), absl::Milliseconds(10),
                                 [&](const std::string& s) {
                                   if (absl::StartsWith(s, "move ")) ++moves;
                                   std::fprintf(stderr, "migration_bench:   %s\n", s.c_str());
                                 });
  const double took = absl::ToDoubleSeconds(absl::Now() - start);
  if (!st.ok()) {
    std::fprintf(stderr, "migration_bench: rebalance: %s\n", st.ToString().c_str());
    return 1;
  }
  double sent = 0;
  for (const char* n : {"b1", "b2", "b3"})
    sent += Metric(b.node(n), "unloadkv_catchup_bytes_total");
  absl::StatusOr<ClusterView> v = (*map)->Read();
  int roles = 0, primaries = 0;
  for (const ShardInfo& s : v.ok() ? v->shard_list : std::vector<ShardInfo>{}) {
    roles += s.HasReplica("b3");
    primaries += s.primary == "b3";
  }
  std::printf(
      "scale-out: %llu MiB of live values in 4 shards x 2 replicas on two kvservers; a third "
      "started and `cluster rebalance` run (measured, no client load)\n",
      static_cast<unsigned long long>(FLAGS_cluster_mib));
  std::printf(
      "  %d moves in %.2f s; the new node holds %d of the 8 roles (%d primary); %.0f MiB sent "
      "by state transfer (%.0f MB/s over the rebalance)\n\n",
      moves, took, roles, primaries, Mib(sent), sent / 1e6 / took);
  b.StopNodes();
  return 0;
}

int Main() {
  if (FLAGS_shard_mib < 1 || FLAGS_shard_mib > 4096 || FLAGS_cluster_mib > 8192 ||
      FLAGS_value_size < 64 || FLAGS_value_size > 65536 || FLAGS_rounds < 1 || FLAGS_rounds > 20 ||
      FLAGS_in_flight < 1 || FLAGS_in_flight > 256) {
    std::fprintf(stderr, "migration_bench: a flag is out of its range (see --help)\n");
    return 2;
  }
  if (absl::Status st = engine::MakePolicy(FLAGS_server_policy).status(); !st.ok()) {
    std::fprintf(stderr, "migration_bench: --server_policy: %s\n",
                 std::string(st.message()).c_str());
    return 2;
  }
  Bench b;
  if (absl::Status st = b.Start(); !st.ok()) {
    std::fprintf(stderr, "migration_bench: %s\n", st.ToString().c_str());
    return 1;
  }
  std::printf(
      "migration_bench: kvserver processes over the soft transport on loopback, one etcd\n\n");
  for (absl::string_view r : absl::StrSplit(FLAGS_transfer_mib_s, ',', absl::SkipEmpty())) {
    uint64_t rate = 0;
    if (!absl::SimpleAtoi(r, &rate) || rate > 1048576) {
      std::fprintf(stderr, "migration_bench: --transfer_mib_s: '%s' is not 0..1048576\n",
                   std::string(r).c_str());
      return 2;
    }
    if (int rc = Moves(b, rate); rc != 0) return rc;
  }
  if (FLAGS_cluster_mib > 0) {
    if (int rc = ScaleOut(b); rc != 0) return rc;
  }
  std::fflush(stdout);
  if (FLAGS_modeled) {
    testing::Output sim = testing::RunBinary("tests/sim/migration_paths", {}, 1800);
    std::printf("%s", sim.out.c_str());
    if (sim.exit_code != 0) {
      std::fprintf(stderr, "migration_bench: migration_paths: %s\n", sim.err.c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace unloadkv

int main(int argc, char** argv) {
  gflags::SetUsageMessage("live shard moves: speed, client throughput meanwhile, scale-out");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  unloadkv::SetMinLogLevel(unloadkv::LogLevel::kError);
  return unloadkv::Main();
}
