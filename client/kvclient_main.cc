// kvclient: the unloadkv command line.
//   kvclient [--server=HOST:PORT] get KEY
//   kvclient put KEY VALUE
//   kvclient del KEY
//   kvclient scan [START [END]] [--limit=N]   (one "key<TAB>value" line per item, non-printable
//                                               bytes escaped as \\, \t, \n, \xHH)
//   kvclient stats
//   kvclient --etcd=HOST:PORT --cluster=NAME cluster init --shards=N --replicas=R
//                 [--split_keys=K1,K2,...]
//   kvclient --etcd=HOST:PORT --cluster=NAME cluster status [--json]
//   kvclient --etcd=HOST:PORT --cluster=NAME cluster force-empty --shard=N
//                 (gives up the data of a durable shard whose every replica is gone)
//   kvclient --etcd=HOST:PORT --cluster=NAME cluster move --shard=N --to=NODE [--from=NODE]
//                 (moves the primary's role, or --from's, to NODE; docs/cluster.md)
//   kvclient --etcd=HOST:PORT --cluster=NAME cluster drain --node=NODE
//                 (moves every role off NODE, one shard at a time)
//   kvclient --etcd=HOST:PORT --cluster=NAME cluster split --shard=N --at=KEY
//                 (splits shard N in two: a new shard holds the keys from KEY on)
//   kvclient --etcd=HOST:PORT --cluster=NAME cluster merge --shards=N,M
//                 (merges two neighbouring shards into one)
//   kvclient --etcd=HOST:PORT --cluster=NAME cluster rebalance
//                 (one pass of the placement policy: roles and primaries spread over the nodes)
//   Every data command takes --etcd --cluster instead of --server: keys go to their shard's
//   primary, through failovers (docs/cluster.md).
//   kvclient load [--ops=N] [--in_flight=N] [--keys=N] [--value_size=N] [--read_fraction=F]
//                 [--metrics=HOST:PORT]
// Authentication (docs/security.md): --auth_file=PATH (or UNLOADKV_AUTH_FILE) names a file of
// "NAME ROLE SECRET" lines, --user the entry to prove (default: the file's only one); etcd's
// TLS and user with --etcd_ca --etcd_cert --etcd_key --etcd_user --etcd_password_file.
// Exit status: 0 on success, 1 when the operation failed (NOT_FOUND included), 2 on usage
// errors.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/client.h"
#include "client/client_hooks.h"
#include "client/cluster_admin.h"
#include "client/cluster_status.h"
#include "client/transfer_progress.h"
#include "client/value_policy.h"
#include "gflags/gflags.h"
#include "proto/limits.h"
#include "transport/base/logging.h"
#include "transport/base/mutex.h"
#include "transport/base/percentile.h"
#include "transport/base/printable.h"
#include "transport/base/version.h"
#include "transport/cluster/etcd_cluster_map.h"
#include "transport/engine/prometheus_metrics.h"
#include "transport/http/metrics_endpoint.h"
#include "transport/placement/rebalance.h"
#include "transport/placement/shard_merge.h"
#include "transport/placement/shard_move.h"
#include "transport/placement/shard_split.h"

DEFINE_string(server, "127.0.0.1:7070", "kvserver address (its --listen)");
DEFINE_string(transport, "soft", "RNIC backend: soft or verbs (must match the server)");
DEFINE_string(
    policy, "adaptive",
    "path policy for value writes: offload, unload, adaptive, "
    "split:F, unload_after:N; with ,inline:N a PUT of at most N (0..4096) bytes carries its value");
DEFINE_int32(timeout_ms, 5000, "per-request timeout");
DEFINE_uint32(limit, 100, "scan: keys per page (1..1000)");
DEFINE_uint64(ops, 100000, "load: operations to run");
DEFINE_int32(in_flight, 32, "load: requests in flight (1..1024)");
DEFINE_uint64(keys, 10000, "load: key space");
DEFINE_uint32(value_size, 256, "load: value bytes (0..65536)");
DEFINE_double(read_fraction, 0.5, "load: fraction of operations that are GETs");
DEFINE_uint64(seed, 1, "load: random seed");
DEFINE_string(metrics, "", "load: serve Prometheus /metrics on HOST:PORT while running");
DEFINE_string(etcd, "", "etcd endpoints HOST:PORT[,HOST:PORT...] of a cluster (docs/cluster.md)");
DEFINE_string(cluster, "", "cluster name (with --etcd)");
DEFINE_string(shards, "1",
              "cluster init: number of key ranges; cluster merge: the two shards, N,M");
DEFINE_int32(replicas, 1, "cluster init: replicas per shard (primary + backups)");
DEFINE_string(split_keys, "",
              "cluster init: comma-separated shard boundaries (shards - 1 keys, increasing); "
              "default splits the first key byte evenly");
DEFINE_bool(json, false, "cluster status: print one JSON object");
DEFINE_bool(auto_rebalance, false,
            "cluster init, config: automatic placement (docs/cluster.md): the nodes split "
            "shards above --max_shard_bytes, spread roles and take new nodes into use");
DEFINE_uint64(max_shard_bytes, 0,
              "cluster init, config: with --auto_rebalance, split a shard whose live values "
              "exceed this many bytes at its median key (0: no split by size; else >= 65536)");
DEFINE_int32(shard, -1, "cluster force-empty, move: the shard");
DEFINE_string(to, "", "cluster move: the node that takes the role");
DEFINE_string(from, "", "cluster move: the replica whose role moves (default: the primary)");
DEFINE_string(at, "", "cluster split: the first key of the new shard (inside --shard's range)");
DEFINE_string(node, "", "cluster drain: the node whose every role moves elsewhere");
DEFINE_int32(
    move_timeout_s, 600,
    "cluster move, drain, split, merge, rebalance: seconds each move (or split, merge) may "
    "take (1..86400)");
DEFINE_string(auth_file, "",
              "file of 'NAME ROLE SECRET' lines (kvserver's --auth_file format, mode 600); "
              "empty: $UNLOADKV_AUTH_FILE, else no authentication");
DEFINE_string(user, "", "the auth file's user to prove (empty: its only user)");
DEFINE_string(etcd_ca, "", "PEM CA that signed etcd's certificate (etcd over https)");
DEFINE_string(etcd_cert, "", "PEM client certificate for etcd (with --etcd_key)");
DEFINE_string(etcd_key, "", "PEM private key of --etcd_cert (mode 600)");
DEFINE_string(etcd_user, "", "etcd user (etcd auth), with --etcd_password_file");
DEFINE_string(etcd_password_file, "", "file holding --etcd_user's password (mode 600)");
DEFINE_bool(caller_progress, true,
            "the calling thread drives the connection instead of an engine thread");

namespace unloadkv {
namespace {

int Usage(const std::string& why) {
  std::fprintf(stderr, "kvclient: %s\n%s", why.c_str(), gflags::ProgramUsage());
  return 2;
}

int Fail(const absl::Status& st) {
  std::fprintf(stderr, "kvclient: %s\n", st.ToString().c_str());
  return 1;
}

// --auth_file, or $UNLOADKV_AUTH_FILE when the flag is not given.
std::string AuthFile() {
  if (!FLAGS_auth_file.empty()) return FLAGS_auth_file;
  const char* env = std::getenv("UNLOADKV_AUTH_FILE");
  return env != nullptr ? env : "";
}

cluster::EtcdSecurity EtcdSecurityFlags() {
  cluster::EtcdSecurity s;
  s.ca_file = FLAGS_etcd_ca;
  s.cert_file = FLAGS_etcd_cert;
  s.key_file = FLAGS_etcd_key;
  s.user = FLAGS_etcd_user;
  s.password_file = FLAGS_etcd_password_file;
  return s;
}

// Checks the load flags; an empty string when they are usable.
std::string LoadFlagsError() {
  if (FLAGS_in_flight < 1 || FLAGS_in_flight > 1024) return "--in_flight must be 1..1024";
  if (FLAGS_keys < 1) return "--keys must be at least 1";
  if (FLAGS_value_size > proto::kMaxValueBytes) return "--value_size is at most 65536";
  if (!(FLAGS_read_fraction >= 0 && FLAGS_read_fraction <= 1)) {  // NaN fails both
    return "--read_fraction must be a number in [0, 1]";
  }
  if (FLAGS_ops < 1) return "--ops must be at least 1";
  return "";
}

// What a load run measured, filled in from the operations' callbacks. Thread-safe.
struct LoadTally {
  Mutex mu;
  std::vector<double> put_us, get_us;  // latencies of successful operations; guarded by mu
  std::string first_error;             // guarded by mu
  std::atomic<uint64_t> done{0}, errors{0}, not_found{0}, unknown{0};

  void Finish(bool read, absl::Duration took, const absl::Status& st) {
    if (st.code() == absl::StatusCode::kNotFound) {
      ++not_found;
    } else if (st.code() == absl::StatusCode::kUnknown) {
      // A write sent to a primary that failed before answering (cluster): it may or may not
      // have applied. Counted apart from failures.
      ++unknown;
      ++done;
      return;
    } else if (!st.ok()) {
      if (errors++ == 0) {
        MutexLock l(&mu);
        first_error = st.ToString();
      }
      ++done;
      return;  // a failed operation has no latency worth reporting
    }
    {
      MutexLock l(&mu);
      (read ? get_us : put_us).push_back(absl::ToDoubleMicroseconds(took));
    }
    ++done;  // last: the load loop may end as soon as it sees this
  }
};

// Prints the summary of a load run of `issued` operations that took `secs`; the exit status.
int ReportLoad(LoadTally& t, uint64_t issued, double secs, const WriteStats& w) {
  MutexLock l(&t.mu);
  const uint64_t failed = t.errors.load();
  const uint64_t unknown = t.unknown.load();
  const uint64_t ok = issued - failed - unknown;
  const uint64_t not_issued = FLAGS_ops - issued;
  std::printf(
      "kvclient: done: %llu ok, %llu failed, %llu not issued in %.2f s = %.0f ok ops/s "
      "(measured, transport %s)\n",
      static_cast<unsigned long long>(ok), static_cast<unsigned long long>(failed),
      static_cast<unsigned long long>(not_issued), secs, ok / secs, FLAGS_transport.c_str());
  if (unknown > 0) {
    std::printf("  %llu writes of unknown outcome (their primary failed before answering)\n",
                static_cast<unsigned long long>(unknown));
  }
  std::printf("  PUT %6zu ops  p50 %8.1f us  p99 %8.1f us\n", t.put_us.size(),
              Percentile(t.put_us, 0.5), Percentile(t.put_us, 0.99));
  std::printf("  GET %6zu ops  p50 %8.1f us  p99 %8.1f us  (%llu not found)\n", t.get_us.size(),
              Percentile(t.get_us, 0.5), Percentile(t.get_us, 0.99),
              static_cast<unsigned long long>(t.not_found.load()));
  const uint64_t writes = w.offload + w.unload;
  std::printf("  value writes: %llu offload, %llu unload (%.1f%% unloaded, policy %s)\n",
              static_cast<unsigned long long>(w.offload), static_cast<unsigned long long>(w.unload),
              writes ? 100.0 * w.unload / writes : 0.0, FLAGS_policy.c_str());
  absl::StatusOr<client_internal::ValuePolicy> policy =
      client_internal::ParseValuePolicy(FLAGS_policy);
  const uint32_t inline_bytes =
      policy.ok() ? client_internal::InlineBytesOn(*policy, FLAGS_transport) : 0;
  if (inline_bytes > 0 && FLAGS_value_size <= inline_bytes) {
    std::printf(
        "  values of at most %u bytes go inline in the PUT, not through the engine "
        "(policy %s on %s; ,inline:0 sends them through it)\n",
        inline_bytes, FLAGS_policy.c_str(), FLAGS_transport.c_str());
  }
  std::fflush(stdout);
  if (failed > 0 || not_issued > 0) {
    std::fprintf(stderr, "kvclient: %llu failed, %llu not issued (first error: %s)\n",
                 static_cast<unsigned long long>(failed),
                 static_cast<unsigned long long>(not_issued),
                 t.first_error.empty() ? "connection lost" : t.first_error.c_str());
    return 1;
  }
  return 0;
}

int Load(Client& c, http::MetricsEndpoint* endpoint) {
  if (endpoint != nullptr) std::printf("kvclient: metrics at %s\n", endpoint->url().c_str());
  std::printf("kvclient: load: %llu ops, %d in flight, %llu keys, %u-byte values, %.0f%% GETs\n",
              static_cast<unsigned long long>(FLAGS_ops), FLAGS_in_flight,
              static_cast<unsigned long long>(FLAGS_keys), FLAGS_value_size,
              FLAGS_read_fraction * 100);
  std::fflush(stdout);
  const std::string value(FLAGS_value_size, 'v');
  std::mt19937_64 rng(FLAGS_seed);
  LoadTally tally;
  uint64_t issued = 0;
  const absl::Time start = absl::Now();
  absl::Time next_report = start + absl::Seconds(1);
  for (uint64_t i = 0; i < FLAGS_ops; ++i) {
    c.Wait([&] { return i - tally.done.load() < static_cast<uint64_t>(FLAGS_in_flight); });
    if (!c.connected()) break;  // the rest would fail at once: stop issuing
    if (absl::Now() >= next_report) {
      next_report += absl::Seconds(1);
      const uint64_t done = tally.done.load();
      std::printf("kvclient: %llu/%llu ops (%.0f%%), %.0f ops/s\n",
                  static_cast<unsigned long long>(done), static_cast<unsigned long long>(FLAGS_ops),
                  100.0 * done / FLAGS_ops, done / absl::ToDoubleSeconds(absl::Now() - start));
      std::fflush(stdout);
    }
    const std::string key = absl::StrCat("key", rng() % FLAGS_keys);
    const bool read = std::uniform_real_distribution<double>(0, 1)(rng) < FLAGS_read_fraction;
    const absl::Time t0 = absl::Now();
    auto finish = [&tally, t0, read](const absl::Status& st) {
      tally.Finish(read, absl::Now() - t0, st);
    };
    ++issued;
    if (read) {
      c.GetAsync(key, [finish](absl::StatusOr<std::string> r) { finish(r.status()); });
    } else {
      c.PutAsync(key, value, [finish](absl::StatusOr<uint64_t> r) { finish(r.status()); });
    }
  }
  c.Wait([&] { return tally.done.load() == issued; });
  return ReportLoad(tally, issued, absl::ToDoubleSeconds(absl::Now() - start), c.write_stats());
}

// kvclient cluster move|drain|rebalance: runs it, its progress on stdout.
int RunRoleCommand(cluster::ClusterMap* map, const std::string& what) {
  auto say = [](const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  };
  const absl::Duration timeout = absl::Seconds(FLAGS_move_timeout_s);
  const absl::Duration poll = absl::Milliseconds(200);
  // How far a transfer got, from its primary's /metrics (nothing when it has none).
  auto progress = [map](uint32_t shard, const std::string& to) -> std::string {
    absl::StatusOr<cluster::ClusterView> view = map->Read();
    if (!view.ok()) return "";
    for (const TransferProgress& t : CollectTransfers(*view, absl::Seconds(1), nullptr)) {
      if (t.shard == shard && t.to == to) return absl::StrCat(t.Done(), ", ETA ", t.Eta());
    }
    return "";
  };
  absl::Status st;
  if (what == "rebalance") {
    st = RunRebalance(map, timeout, poll, say, progress);
  } else if (what == "merge") {
    MergeRequest req;
    std::vector<std::string> ids = absl::StrSplit(FLAGS_shards, ',');
    if (ids.size() != 2 || !absl::SimpleAtoi(ids[0], &req.a) || !absl::SimpleAtoi(ids[1], &req.b)) {
      return Usage(absl::StrCat("cluster merge needs --shards=N,M (two shard ids); got \"",
                                FLAGS_shards, "\""));
    }
    st = RunMerge(map, req, timeout, poll, say);
  } else if (what == "split") {
    SplitRequest req;
    req.shard = static_cast<uint32_t>(FLAGS_shard);
    req.at = FLAGS_at;
    st = RunSplit(map, req, timeout, poll, say);
  } else if (what == "move") {
    MoveRequest req;
    req.shard = static_cast<uint32_t>(FLAGS_shard);
    req.to = FLAGS_to;
    req.from = FLAGS_from;
    st = RunMove(map, req, timeout, poll, say, progress);
  } else {
    st = RunDrain(map, FLAGS_node, timeout, poll, say, progress);
  }
  return st.ok() ? 0 : Fail(st);
}

// Whether `flag` was given on the command line.
bool FlagGiven(const char* flag) {
  gflags::CommandLineFlagInfo info;
  return gflags::GetCommandLineFlagInfo(flag, &info) && !info.is_default;
}

// kvclient cluster config: the placement policy's flags given replace the stored ones.
int ClusterConfig(cluster::ClusterMap* map) {
  std::optional<bool> on;
  std::optional<uint64_t> max_bytes;
  if (FlagGiven("auto_rebalance")) on = FLAGS_auto_rebalance;
  if (FlagGiven("max_shard_bytes")) max_bytes = FLAGS_max_shard_bytes;
  if (!on && !max_bytes) {
    absl::StatusOr<cluster::ClusterView> view = map->Read();
    if (!view.ok()) return Fail(view.status());
    std::printf("cluster %s: %s\n", FLAGS_cluster.c_str(), DescribePolicy(view->policy).c_str());
    return 0;
  }
  absl::StatusOr<std::string> said = SetPlacementPolicy(map, on, max_bytes);
  if (said.status().code() == absl::StatusCode::kInvalidArgument) {
    return Usage(std::string(said.status().message()));
  }
  if (!said.ok()) return Fail(said.status());
  std::printf("cluster %s: %s\n", FLAGS_cluster.c_str(), said->c_str());
  return 0;
}

// kvclient cluster init: the map, then the placement policy when its flags are given.
int ClusterInit(cluster::ClusterMap* map) {
  if (FLAGS_replicas < 1 || FLAGS_replicas > cluster::kMaxReplicas) {
    return Usage(absl::StrCat("--replicas must be 1..", cluster::kMaxReplicas));
  }
  if (FLAGS_max_shard_bytes != 0 && FLAGS_max_shard_bytes < kMinMaxShardBytes) {
    return Usage(absl::StrCat("--max_shard_bytes must be 0 (no split by size) or at least ",
                              kMinMaxShardBytes));
  }
  std::vector<std::string> splits;
  if (!FLAGS_split_keys.empty()) splits = absl::StrSplit(FLAGS_split_keys, ',');
  int count = 0;
  if (!absl::SimpleAtoi(FLAGS_shards, &count)) {
    return Usage(absl::StrCat("--shards must be a number; got \"", FLAGS_shards, "\""));
  }
  absl::StatusOr<std::vector<cluster::ShardInfo>> shards = cluster::InitialShards(count, splits);
  if (!shards.ok()) return Usage(std::string(shards.status().message()));
  absl::StatusOr<int64_t> rev = map->Create(FLAGS_replicas, *shards);
  if (!rev.ok()) return Fail(rev.status());
  std::printf(
      "cluster %s created: %d shards, %d replicas each (revision %lld); kvservers "
      "started with --etcd=%s --cluster=%s join it\n",
      FLAGS_cluster.c_str(), count, FLAGS_replicas, (long long)*rev, FLAGS_etcd.c_str(),
      FLAGS_cluster.c_str());
  if (!FLAGS_auto_rebalance && FLAGS_max_shard_bytes == 0) return 0;
  return ClusterConfig(map);
}

// kvclient cluster init|config|status|force-empty|move|drain|split|merge|rebalance.
int Cluster(const std::vector<std::string>& args) {
  static const char* const kCommands[] = {"init",  "config", "status", "force-empty", "move",
                                          "drain", "split",  "merge",  "rebalance"};
  if (args.size() != 1 ||
      std::find(std::begin(kCommands), std::end(kCommands), args[0]) == std::end(kCommands)) {
    return Usage(
        "usage: cluster init --shards=N --replicas=R [--auto_rebalance] [--max_shard_bytes=B] | "
        "cluster config [--auto_rebalance=true|false] [--max_shard_bytes=B] | cluster status "
        "[--json] | cluster force-empty --shard=N | cluster move --shard=N --to=NODE [--from=NODE] "
        "| cluster drain "
        "--node=NODE | cluster split --shard=N --at=KEY | cluster merge --shards=N,M | cluster "
        "rebalance");
  }
  const bool role_command = args[0] == "move" || args[0] == "drain" || args[0] == "rebalance" ||
                            args[0] == "split" || args[0] == "merge";
  if ((args[0] == "force-empty" || args[0] == "move" || args[0] == "split") && FLAGS_shard < 0) {
    return Usage(
        absl::StrCat("cluster ", args[0], " needs --shard=N (see kvclient cluster status)"));
  }
  if (args[0] == "move" && FLAGS_to.empty()) return Usage("cluster move needs --to=NODE");
  if (args[0] == "drain" && FLAGS_node.empty()) return Usage("cluster drain needs --node=NODE");
  if (args[0] == "split" && FLAGS_at.empty()) {
    return Usage("cluster split needs --at=KEY (the first key of the new shard)");
  }
  if (role_command && (FLAGS_move_timeout_s < 1 || FLAGS_move_timeout_s > 86400)) {
    return Usage("--move_timeout_s must be in 1..86400");
  }
  if (FLAGS_etcd.empty() || FLAGS_cluster.empty()) {
    return Usage("cluster commands need --etcd=HOST:PORT and --cluster=NAME");
  }
  absl::StatusOr<std::unique_ptr<cluster::EtcdClusterMap>> map =
      cluster::EtcdClusterMap::Open(FLAGS_etcd, FLAGS_cluster, EtcdSecurityFlags());
  if (!map.ok()) return Usage(std::string(map.status().message()));
  if (args[0] == "init") return ClusterInit(map->get());
  if (args[0] == "config") return ClusterConfig(map->get());
  if (role_command) return RunRoleCommand(map->get(), args[0]);
  if (args[0] == "force-empty") {
    absl::StatusOr<std::string> done = ForceEmpty(map->get(), static_cast<uint32_t>(FLAGS_shard));
    if (!done.ok()) return Fail(done.status());
    std::fwrite(done->data(), 1, done->size(), stdout);
    return 0;
  }
  absl::StatusOr<cluster::ClusterView> view = (*map)->Read();
  if (!view.ok()) return Fail(view.status());
  // How far the transfers to joining nodes got, from their primaries' /metrics.
  std::vector<std::string> unreachable;
  const std::vector<TransferProgress> transfers =
      CollectTransfers(*view, absl::Seconds(2), &unreachable);
  for (const std::string& n : unreachable) {
    std::fprintf(stderr, "kvclient: %s's /metrics did not answer: its transfers are not shown\n",
                 n.c_str());
  }
  const std::string text = FLAGS_json ? ClusterStatusJson(*view, transfers) + "\n"
                                      : ClusterStatusTable(*view, transfers);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

// Checks a data command's arguments and the flags it reads; the usage error, or "".
std::string CommandError(const std::string& cmd, const std::vector<std::string>& args) {
  auto want = [&](size_t lo, size_t hi) { return args.size() >= lo && args.size() <= hi; };
  if (cmd == "get" && !want(1, 1)) return "usage: get KEY";
  if (cmd == "put" && !want(2, 2)) return "usage: put KEY VALUE";
  if (cmd == "del" && !want(1, 1)) return "usage: del KEY";
  if (cmd == "scan" && !want(0, 2)) return "usage: scan [START [END]]";
  if ((cmd == "stats" || cmd == "load") && !want(0, 0)) {
    return absl::StrCat(cmd, " takes no arguments");
  }
  if (cmd != "get" && cmd != "put" && cmd != "del" && cmd != "scan" && cmd != "stats" &&
      cmd != "load") {
    return absl::StrCat("unknown command '", cmd, "'");
  }
  if (FLAGS_timeout_ms < 1) return "--timeout_ms must be positive";
  if (cmd == "load") {
    if (std::string why = LoadFlagsError(); !why.empty()) return why;
  }
  if (cmd == "scan" && (FLAGS_limit < 1 || FLAGS_limit > proto::kMaxScanLimit)) {
    return "--limit must be in 1..1000";
  }
  if (FLAGS_etcd.empty() != FLAGS_cluster.empty()) {
    return "a cluster needs both --etcd=HOST:PORT and --cluster=NAME";
  }
  return "";
}

// The SDK's options from the flags, for data command `cmd`.
ClientOptions OptionsFromFlags(const std::string& cmd) {
  ClientOptions o;
  o.server = FLAGS_server;
  o.etcd = FLAGS_etcd;
  o.cluster = FLAGS_cluster;
  o.auth_file = AuthFile();
  o.user = FLAGS_user;
  const cluster::EtcdSecurity etcd = EtcdSecurityFlags();
  o.etcd_ca = etcd.ca_file;
  o.etcd_cert = etcd.cert_file;
  o.etcd_key = etcd.key_file;
  o.etcd_user = etcd.user;
  o.etcd_password_file = etcd.password_file;
  o.transport = FLAGS_transport;
  o.policy = FLAGS_policy;
  o.timeout = absl::Milliseconds(FLAGS_timeout_ms);
  o.caller_progress = FLAGS_caller_progress;
  o.max_in_flight = cmd == "load" ? FLAGS_in_flight : 8;
  return o;
}

// One of get, put, del, scan, stats on `c`; the exit status.
int RunCommand(Client& c, const std::string& cmd, const std::vector<std::string>& args) {
  if (cmd == "get") {
    absl::StatusOr<std::string> v = c.Get(args[0]);
    if (!v.ok()) return Fail(v.status());
    std::fwrite(v->data(), 1, v->size(), stdout);
    std::printf("\n");
  } else if (cmd == "put") {
    if (absl::Status st = c.Put(args[0], args[1]); !st.ok()) return Fail(st);
    std::printf("OK\n");
  } else if (cmd == "del") {
    if (absl::Status st = c.Delete(args[0]); !st.ok()) return Fail(st);
    std::printf("OK\n");
  } else if (cmd == "scan") {
    absl::StatusOr<ScanPage> p =
        c.Scan(args.empty() ? "" : args[0], args.size() < 2 ? "" : args[1], FLAGS_limit);
    if (!p.ok()) return Fail(p.status());
    for (const auto& [k, v] : p->items) {
      std::printf("%s\t%s\n", Printable(k).c_str(), Printable(v).c_str());
    }
    if (p->more) std::printf("(more)\n");
  } else {  // stats
    absl::StatusOr<ServerStats> s = c.Stats();
    if (!s.ok()) return Fail(s.status());
    std::printf(
        "keys %llu\narena_bytes %llu\narena_used_bytes %llu\nconnections %llu\n"
        "offload_writes %llu\nunload_writes %llu\ntransport %s\nstaging_memory %s\n",
        (unsigned long long)s->keys, (unsigned long long)s->arena_bytes,
        (unsigned long long)s->arena_used_bytes, (unsigned long long)s->connections,
        (unsigned long long)s->offload_writes, (unsigned long long)s->unload_writes,
        s->transport.c_str(), s->staging_memory.c_str());
    if (s->fsync.empty()) {
      std::printf("fsync none (in memory only)\n");
    } else {
      std::printf("fsync %s\nlog_records %llu\nlog_syncs %llu\nlog_failure %s\n", s->fsync.c_str(),
                  (unsigned long long)s->log_records, (unsigned long long)s->log_syncs,
                  s->log_failure.empty() ? "none" : s->log_failure.c_str());
    }
  }
  return 0;
}

int Main(int argc, char** argv) {
  if (argc < 2) return Usage("no command");
  const std::string cmd = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  if (cmd == "cluster") return Cluster(args);
  if (std::string why = CommandError(cmd, args); !why.empty()) return Usage(why);
  ClientOptions o = OptionsFromFlags(cmd);
  // `load --metrics`: the client side's engine series, served while it runs.
  std::shared_ptr<prometheus::Registry> registry;
  std::unique_ptr<engine::PrometheusEngineMetrics> metrics;
  std::unique_ptr<http::MetricsEndpoint> endpoint;
  ClientHooks hooks;
  if (cmd == "load" && !FLAGS_metrics.empty()) {
    registry = std::make_shared<prometheus::Registry>();
    metrics = std::make_unique<engine::PrometheusEngineMetrics>(registry);
    auto e = http::MetricsEndpoint::Start(FLAGS_metrics, registry);
    if (!e.ok()) return Fail(e.status());
    endpoint = std::move(*e);
    hooks.metrics = metrics.get();
  }
  auto client = ConnectWithHooks(o, hooks);
  if (!client.ok()) return Fail(client.status());
  return cmd == "load" ? Load(**client, endpoint.get()) : RunCommand(**client, cmd, args);
}

}  // namespace
}  // namespace unloadkv

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "kvclient [flags] get KEY | put KEY VALUE | del KEY | scan [START [END]] | stats | load | "
      "cluster init | cluster status | cluster force-empty --shard=N | cluster move --shard=N "
      "--to=NODE [--from=NODE] | cluster drain --node=NODE | cluster split --shard=N --at=KEY | "
      "cluster merge --shards=N,M | cluster rebalance");
  gflags::SetVersionString(unloadkv::kVersion);
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  unloadkv::SetMinLogLevel(unloadkv::LogLevel::kError);
  return unloadkv::Main(argc, argv);
}
