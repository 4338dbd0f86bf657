// kvserver: the unloadkv key-value server.
//   kvserver --listen=127.0.0.1:7070 --transport=soft --metrics=127.0.0.1:9464
//   kvserver --etcd=HOST:PORT --cluster=NAME --node=NAME --listen=HOST:PORT --metrics=HOST:PORT
// Without --etcd: one node serving every key. With it: a node of a replicated cluster
// (docs/cluster.md); --listen must then be an address the other nodes can reach.
// Authentication (docs/security.md): --auth_file=PATH names the users who may connect and
// their roles (client, admin, node); SIGHUP reloads it. Without it the server is in protected
// mode: it listens on loopback addresses only, unless --insecure.
// Exits 0 after SIGTERM or SIGINT (graceful: stops admitting, answers UNAVAILABLE, closes
// connections); non-zero with a message naming the fix when it cannot start.
#include <algorithm>
#include <csignal>
#include <cstdio>

#include "gflags/gflags.h"
#include "server/kv_server.h"
#include "transport/base/logging.h"
#include "transport/base/version.h"

DEFINE_string(listen, "127.0.0.1:7070", "host:port clients connect to (bootstrap exchange)");
DEFINE_string(transport, "soft", "RNIC backend: soft (RDMA semantics over TCP) or verbs");
DEFINE_string(verbs_device, "", "verbs: device name (empty: first device with an active port)");
DEFINE_uint64(arena_bytes, uint64_t{256} << 20, "size of the registered value arena in bytes");
DEFINE_bool(huge_pages, true, "back the arena and staging rings with 2 MiB pages if possible");
DEFINE_string(policy, "adaptive",
              "path policy for writes this server initiates: offload, unload, adaptive, split:F, "
              "unload_after:N");
DEFINE_int32(unload_workers, 1,
             "engine worker threads (RPC handling and unload copies); on soft each serves its "
             "connections on a port of its own");
DEFINE_string(metrics, "127.0.0.1:9464",
              "host:port of the Prometheus /metrics endpoint; "
              "empty disables it");
DEFINE_int32(max_connections, 0,
             "client connections admitted at once (1..65536); 0: as many as the node can hold "
             "at worst (memory and the engine's shared receive queue; printed at start)");
DEFINE_int32(max_half_open, 32,
             "admitted connections whose client has sent no message yet (1..4096); the oldest "
             "is released to make room");
DEFINE_int32(max_pending_hellos, 128,
             "bootstrap connections whose hello line is incomplete (1..4096); the oldest is "
             "closed to make room");
DEFINE_string(data_dir, "",
              "directory of this node's shard logs (absolute; one per node): keys survive a "
              "restart of the node, or of every node of a cluster. Empty: in memory only");
DEFINE_string(fsync, "always",
              "with --data_dir: always (acknowledge after fsync, group-committed), "
              "interval:MS (fsync every MS, at most MS lost on power loss) or never");
DEFINE_uint64(log_compact_mib, 256,
              "with --data_dir: a shard log rewrites its live keys as a new state once it grew "
              "past this many MiB since its last one (0: never)");
DEFINE_string(etcd, "", "cluster mode: etcd endpoints HOST:PORT[,HOST:PORT...]");
DEFINE_string(cluster, "", "cluster mode: the cluster's name (kvclient cluster init created it)");
DEFINE_string(node, "", "cluster mode: this node's name, unique in the cluster");
DEFINE_int32(lease_ttl_s, 3,
             "cluster mode: seconds a node's lease lives without keepalives (1..60); a dead "
             "primary is replaced within about twice this");
DEFINE_uint64(transfer_mib_s, 0,
              "cluster mode: paces the state transfers this node sends as a shard's primary "
              "(a node joining, a move, a rejoin) to this many MiB/s per shard, leaving CPU "
              "and network to the clients (0: as fast as they go; ..1048576)");
DEFINE_int32(placement_interval_s, 10,
             "cluster mode, automatic placement on (kvclient cluster config --auto_rebalance): "
             "seconds between two decisions of the placer when this node holds the role "
             "(1..3600)");
DEFINE_int32(load_interval_s, 5,
             "cluster mode, automatic placement on: seconds between two measurements of the "
             "shards this node is primary of, published for the placer (1..3600)");
DEFINE_bool(fault_signals, false,
            "tests: SIGUSR1 cuts this node off from etcd and the other nodes (not from "
            "clients), SIGUSR2 heals the cut (docs/cluster.md, fault matrix)");
DEFINE_bool(verbose, false, "log client connects and disconnects");
DEFINE_string(auth_file, "",
              "users who may connect: lines 'NAME ROLE SECRET' (role client, admin or node; "
              "mode 600; reloaded on SIGHUP). Cluster mode needs a node line for --node. "
              "Empty: no authentication (protected mode: loopback addresses only)");
DEFINE_bool(insecure, false,
            "serve without --auth_file on a non-loopback address, or run a cluster without "
            "authentication: anyone who reaches the port may read, write and wipe every key");
DEFINE_uint64(max_grant_bytes_per_connection, 0,
              "bytes of arena slots one connection may hold in unused grants, per shard "
              "replica; 0: arena_bytes / 32");
DEFINE_bool(memory_protection, true,
            "clients write only the slots granted to them and not yet used, on both paths (a "
            "memory window per grant; docs/security.md); false only to measure what that "
            "costs: any client may then write any byte of the arena");
DEFINE_int32(max_connections_per_host, 0,
             "client connections from one host address at once; 0: no cap but "
             "--max_connections");
DEFINE_int32(idle_timeout_s, 0,
             "close a client connection that sent no request for this many seconds; 0: never "
             "(node connections are exempt)");
DEFINE_string(etcd_ca, "", "cluster mode: PEM CA that signed etcd's certificate (etcd over https)");
DEFINE_string(etcd_cert, "", "cluster mode: PEM client certificate for etcd (with --etcd_key)");
DEFINE_string(etcd_key, "", "cluster mode: PEM private key of --etcd_cert (mode 600)");
DEFINE_string(etcd_user, "", "cluster mode: etcd user (etcd auth), with --etcd_password_file");
DEFINE_string(etcd_password_file, "",
              "cluster mode: file holding --etcd_user's password (mode 600)");

namespace {
std::atomic<bool> g_stop{false};
std::atomic<bool> g_cut{false};
std::atomic<bool> g_reload{false};
void OnSignal(int) { g_stop.store(true); }
void OnReload(int) { g_reload.store(true); }
void OnCut(int) { g_cut.store(true); }
void OnHeal(int) { g_cut.store(false); }

// The server's options from the flags.
unloadkv::server::KvServerOptions OptionsFromFlags() {
  unloadkv::server::KvServerOptions o;
  o.listen = FLAGS_listen;
  o.transport = FLAGS_transport;
  o.verbs_device = FLAGS_verbs_device;
  o.arena_bytes = FLAGS_arena_bytes;
  o.huge_pages = FLAGS_huge_pages;
  o.policy = FLAGS_policy;
  o.data_dir = FLAGS_data_dir;
  o.log_compact_bytes = FLAGS_log_compact_mib << 20;
  o.fsync = FLAGS_fsync;
  o.unload_workers = FLAGS_unload_workers;
  o.metrics_address = FLAGS_metrics;
  o.max_connections = FLAGS_max_connections;
  o.max_half_open = FLAGS_max_half_open;
  o.max_pending_hellos = FLAGS_max_pending_hellos;
  o.etcd = FLAGS_etcd;
  o.cluster = FLAGS_cluster;
  o.node = FLAGS_node;
  o.lease_ttl = absl::Seconds(FLAGS_lease_ttl_s);
  o.placement_interval = absl::Seconds(FLAGS_placement_interval_s);
  o.load_interval = absl::Seconds(FLAGS_load_interval_s);
  // Capped before the shift (no wrap-around): Start refuses anything above 1048576 MiB/s.
  o.transfer_bytes_per_second = std::min<uint64_t>(FLAGS_transfer_mib_s, uint64_t{1} << 30) << 20;
  o.auth_file = FLAGS_auth_file;
  o.insecure = FLAGS_insecure;
  o.max_grant_bytes_per_connection = FLAGS_max_grant_bytes_per_connection;
  o.memory_protection = FLAGS_memory_protection;
  o.max_connections_per_host = FLAGS_max_connections_per_host;
  o.idle_timeout = absl::Seconds(FLAGS_idle_timeout_s);  // negative: refused by Start
  o.etcd_security.ca_file = FLAGS_etcd_ca;
  o.etcd_security.cert_file = FLAGS_etcd_cert;
  o.etcd_security.key_file = FLAGS_etcd_key;
  o.etcd_security.user = FLAGS_etcd_user;
  o.etcd_security.password_file = FLAGS_etcd_password_file;
  if (FLAGS_fault_signals) o.network_cut = &g_cut;
  return o;
}

void Install(int sig, void (*handler)(int)) {
  struct sigaction sa {};
  sa.sa_handler = handler;
  sigaction(sig, &sa, nullptr);
}

// Once serving: SIGTERM and SIGINT stop, SIGHUP reloads the auth file; SIGPIPE is ignored (a
// peer gone is an error of the call, not the process's end).
void InstallSignalHandlers() {
  Install(SIGTERM, OnSignal);
  Install(SIGINT, OnSignal);
  Install(SIGHUP, OnReload);
  std::signal(SIGPIPE, SIG_IGN);
}

void PrintStartup(const unloadkv::server::KvServer& s) {
  std::printf(
      "kvserver: listening on %s (transport %s)\n"
      "kvserver: arena %llu MiB on %s; staging rings on %s\n"
      "kvserver: metrics at %s\n"
      "kvserver: max_connections %s\n"
      "kvserver: authentication: %s\n"
      "kvserver: durability: %s\n"
      "kvserver: memory protection: %s\n",
      s.address().c_str(), s.transport().c_str(),
      static_cast<unsigned long long>(FLAGS_arena_bytes >> 20), s.arena_memory().c_str(),
      s.staging_memory().c_str(), s.metrics_url().empty() ? "(off)" : s.metrics_url().c_str(),
      s.connection_budget().c_str(), s.auth_summary().c_str(), s.durability().c_str(),
      FLAGS_memory_protection ? "on (each grant a memory window; unloads checked against grants)"
                              : "OFF (--memory_protection=false): any client may write any "
                                "byte of the arena");
  if (s.clustered()) {
    std::printf("kvserver: node %s of cluster %s (etcd at %s)\n", FLAGS_node.c_str(),
                FLAGS_cluster.c_str(), FLAGS_etcd.c_str());
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage("unloadkv key-value server");
  gflags::SetVersionString(unloadkv::kVersion);
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  if (argc > 1) {
    std::fprintf(stderr, "kvserver: unexpected argument '%s' (flags are --name=value)\n", argv[1]);
    return 2;
  }
  unloadkv::SetMinLogLevel(FLAGS_verbose ? unloadkv::LogLevel::kInfo
                                         : unloadkv::LogLevel::kWarning);
  // A file-size limit (ulimit -f, systemd's LimitFSIZE) reached by a shard log is a full disk
  // for that log (EFBIG: RESOURCE_EXHAUSTED, writes refused until it is lifted), not the
  // process's end, which SIGXFSZ's default action would be.
  std::signal(SIGXFSZ, SIG_IGN);
  if (FLAGS_fault_signals) {  // --fault_signals: SIGUSR1 cuts, SIGUSR2 heals, from the start
    Install(SIGUSR1, OnCut);
    Install(SIGUSR2, OnHeal);
  }
  if (FLAGS_log_compact_mib > (uint64_t{1} << 20)) {
    std::fprintf(stderr,
                 "kvserver: cannot start: INVALID_ARGUMENT: --log_compact_mib=%llu: at most "
                 "1048576 (1 TiB), or 0 (never)\n",
                 static_cast<unsigned long long>(FLAGS_log_compact_mib));
    return 1;
  }
  auto server = unloadkv::server::KvServer::Start(OptionsFromFlags());
  if (!server.ok()) {
    std::fprintf(stderr, "kvserver: cannot start: %s\n", server.status().ToString().c_str());
    return 1;
  }
  InstallSignalHandlers();
  unloadkv::server::KvServer& s = **server;
  PrintStartup(s);
  s.Run(g_stop, &g_reload);
  std::printf("kvserver: shut down cleanly (%llu keys held at exit)\n",
              static_cast<unsigned long long>(s.stats().keys));
  return 0;
}
