// replication_bench: PUT and GET latency of a cluster with 1, 2 and 3 replicas per shard, in
// one run: three clusters (one etcd, six kvserver processes, soft transport, loopback) are up
// at once and measured in alternating rounds, so that the machine's drift hits every
// replication factor alike. Prints p50/p99 at 1 and 16 requests in flight and the ratio of
// each factor's PUT p50 to replication 1's (the target: replication 3 at most 2.0x).
//
//   bazel run -c opt //tests/bench:replication_bench -- [--ops=N] [--rounds=R]
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "gflags/gflags.h"
#include "tests/bench/client_load.h"
#include "tests/kv/process_harness.h"
#include "tests/support/etcd_process.h"
#include "tests/support/test_auth.h"
#include "transport/base/logging.h"
#include "transport/base/percentile.h"
#include "transport/cluster/etcd_cluster_map.h"

DEFINE_uint64(ops, 20000, "operations per (replicas, kind, in-flight) point, over all rounds");
DEFINE_int32(rounds, 4, "alternating rounds");
DEFINE_uint32(value_size, 256, "value bytes");
DEFINE_uint64(keys, 10000, "key space (preloaded)");

namespace unloadkv {
namespace {

struct Samples {
  std::vector<double> us;
  uint64_t errors = 0;
};

int Main() {
  if (FLAGS_rounds < 1 || FLAGS_ops < 100 || FLAGS_keys < 1 || FLAGS_value_size > 65536) {
    std::fprintf(stderr, "replication_bench: --rounds >= 1, --ops >= 100, --keys >= 1\n");
    return 2;
  }
  auto etcd = testing::EtcdProcess::Start();
  if (!etcd.ok()) {
    std::fprintf(stderr, "replication_bench: %s\n", etcd.status().ToString().c_str());
    return 1;
  }
  const std::vector<int> factors = {1, 2, 3};
  // Authenticated, as a cluster runs in production (docs/security.md).
  const std::string auth_file = testing::WriteTestAuthFile(
      {"r1n0", "r2n0", "r2n1", "r3n0", "r3n1", "r3n2"}, "replication_bench_auth");
  std::vector<std::unique_ptr<testing::ServerProcess>> servers;
  std::map<int, std::unique_ptr<Client>> clients;
  for (int r : factors) {
    const std::string name = absl::StrCat("r", r);
    auto map = cluster::EtcdClusterMap::Open((*etcd)->endpoint(), name);
    if (!map.ok() || !(*map)->Create(r, *cluster::InitialShards(1, {})).ok()) {
      std::fprintf(stderr, "replication_bench: cannot create cluster %s\n", name.c_str());
      return 1;
    }
    for (int n = 0; n < r; ++n) {
      servers.push_back(std::make_unique<testing::ServerProcess>(
          std::vector<std::string>{"--etcd=" + (*etcd)->endpoint(), "--cluster=" + name,
                                   absl::StrCat("--node=", name, "n", n), "--arena_bytes=134217728",
                                   "--auth_file=" + auth_file}));
      if (servers.back()->address().empty()) {
        std::fprintf(stderr, "replication_bench: a kvserver did not start\n");
        return 1;
      }
    }
    // Until the shard has all its replicas.
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (true) {
      absl::StatusOr<cluster::ClusterView> v = (*map)->Read();
      if (v.ok() && v->StateOf(v->shard_list[0]) == cluster::ShardState::kServing &&
          v->shard_list[0].joining.empty()) {
        break;
      }
      if (absl::Now() > deadline) {
        std::fprintf(stderr, "replication_bench: cluster %s did not form\n", name.c_str());
        return 1;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    ClientOptions o;
    o.etcd = (*etcd)->endpoint();
    o.cluster = name;
    o.max_in_flight = 16;
    o.auth_file = auth_file;
    o.user = testing::kTestClientUser;
    auto c = Client::Connect(o);
    if (!c.ok()) {
      std::fprintf(stderr, "replication_bench: %s\n", c.status().ToString().c_str());
      return 1;
    }
    std::fprintf(stderr, "replication_bench: replication %d: preloading %llu keys\n", r,
                 static_cast<unsigned long long>(FLAGS_keys));
    for (uint64_t k = 0; k < FLAGS_keys; ++k) {
      if (!(*c)->Put(absl::StrCat("key", k), std::string(FLAGS_value_size, 'v')).ok()) {
        std::fprintf(stderr, "replication_bench: preload failed\n");
        return 1;
      }
    }
    clients[r] = std::move(*c);
  }

  struct Point {
    bool put;
    int in_flight;
  };
  const std::vector<Point> points = {{true, 1}, {false, 1}, {true, 16}, {false, 16}};
  std::map<std::pair<int, int>, Samples> samples;  // (factor, point index)
  const uint64_t per_round = std::max<uint64_t>(50, FLAGS_ops / FLAGS_rounds);
  uint64_t seed = 1;
  for (int round = 1; round <= FLAGS_rounds; ++round) {
    std::fprintf(stderr, "replication_bench: round %d of %d\n", round, FLAGS_rounds);
    for (size_t p = 0; p < points.size(); ++p) {
      for (int r : factors) {
        bench::LoadResult run =
            bench::RunLoad(*clients[r], points[p].put, points[p].in_flight, per_round, FLAGS_keys,
                           std::string(FLAGS_value_size, 'v'), &seed);
        Samples& s = samples[{r, p}];
        s.us.insert(s.us.end(), run.us.begin(), run.us.end());
        s.errors += run.errors;
      }
    }
  }
  std::printf(
      "replication_bench: 1 shard, replication 1/2/3, kvserver processes over the soft "
      "transport on loopback, one etcd (measured)\n");
  std::printf("value %u B, %llu ops per point in %d alternating rounds\n\n", FLAGS_value_size,
              static_cast<unsigned long long>(per_round * FLAGS_rounds), FLAGS_rounds);
  std::printf("%-11s | %-21s | %-21s | %-21s | %-21s\n", "replication", "PUT 1 in flight",
              "GET 1 in flight", "PUT 16 in flight", "GET 16 in flight");
  std::printf("%-11s | %-21s | %-21s | %-21s | %-21s\n", "", "p50 / p99 us", "p50 / p99 us",
              "p50 / p99 us", "p50 / p99 us");
  uint64_t errors = 0;
  std::map<int, double> put_p50;
  for (int r : factors) {
    std::printf("%-11d", r);
    for (size_t p = 0; p < points.size(); ++p) {
      const Samples& s = samples[{r, p}];
      errors += s.errors;
      const double p50 = Percentile(s.us, 0.5), p99 = Percentile(s.us, 0.99);
      if (p == 0) put_p50[r] = p50;
      std::printf(" | %8.1f / %8.1f  ", p50, p99);
    }
    std::printf("\n");
  }
  std::printf("\nPUT p50 at 1 in flight relative to replication 1:");
  for (int r : factors) std::printf("  R=%d %.2fx", r, put_p50[r] / put_p50[1]);
  std::printf("\n");
  if (errors > 0) {
    std::printf("%llu operations failed\n", static_cast<unsigned long long>(errors));
    return 1;
  }
  clients.clear();
  servers.clear();
  return 0;
}

}  // namespace
}  // namespace unloadkv

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  unloadkv::SetMinLogLevel(unloadkv::LogLevel::kError);
  return unloadkv::Main();
}
