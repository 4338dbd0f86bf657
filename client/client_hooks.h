// What a program inside this repository may hand the SDK besides ClientOptions: a simulated
// world to run in, a cluster map instead of etcd, an extra metrics sink. Not installed: these
// are transport types, and the installed API (client.h) carries none (docs/sdk.md).
#ifndef UNLOADKV_CLIENT_CLIENT_HOOKS_H_
#define UNLOADKV_CLIENT_CLIENT_HOOKS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/client.h"

namespace unloadkv {

class Clock;  // transport/base/clock.h

namespace engine {
class EngineMetrics;    // transport/engine/metrics.h
class InvariantChecks;  // transport/engine/invariant_checks.h
}  // namespace engine

namespace rnic {
class Device;  // transport/rnic/device.h
}  // namespace rnic

namespace cluster {
class ClusterMap;  // transport/cluster/cluster_map.h
}  // namespace cluster

namespace rpc {
struct Credentials;  // transport/rpc/auth_file.h
}  // namespace rpc

// A client embedded in a world someone else drives (tests/sim: the simulated fabric, one
// thread, virtual time). It then runs on `device` and `clock`, reaches the server through
// `bootstrap` instead of TCP and starts no thread: it hands the world a poller instead, and
// its synchronous calls (and Wait) let the world run until their answer is in.
struct ClientEmbedding {
  rnic::Device* device = nullptr;  // not owned; outlives the client
  const Clock* clock = nullptr;    // not owned; the device's clock
  // The bootstrap exchange with the server at `server` (the options' `server`, or a node's
  // address from the cluster map): hands it the hello line `hello` makes of the server's
  // challenge and returns the server's answer line (an embedded server's KvServer::Admit;
  // rpc::BootstrapDialer's contract).
  std::function<absl::StatusOr<std::string>(
      const std::string& server,
      const std::function<absl::StatusOr<std::string>(absl::string_view challenge)>& hello,
      absl::Duration timeout)>
      bootstrap;
  // What the client proves instead of ClientOptions::auth_file (a simulation's users; not
  // owned, outlives the client; nullable: none).
  const rpc::Credentials* credentials = nullptr;
  // Runs the world until `done()` holds. Never called from a callback.
  std::function<void(const std::function<bool()>& done)> wait;
  // Cluster mode only: runs `body` as a thread of the world (lockstep: it may block in
  // `wait`); the router's background work runs there.
  std::function<void(std::function<void()> body)> spawn;
  // Optional: the engine's invariant checks (engine::EngineOptions::checks); must outlive
  // the client.
  engine::InvariantChecks* checks = nullptr;
  // The world calls `poll` whenever it moved (it processes completions and expired deadlines
  // and returns the work done; never blocks) from add_poller's return until remove_poller.
  std::function<uint64_t(std::function<int()> poll)> add_poller;
  std::function<void(uint64_t poller)> remove_poller;
};

// Everything optional; whatever is set is not owned and must outlive the Client.
struct ClientHooks {
  // With it ClientOptions' `transport`, `soft_host`, `verbs_device` and `caller_progress` are
  // unused, and `server` only names the server to `bootstrap`.
  const ClientEmbedding* embedding = nullptr;
  // A cluster's map instead of etcd (ClientOptions' `etcd` is then unused).
  cluster::ClusterMap* cluster_map = nullptr;
  // An extra sink for the engine's metrics (e.g. Prometheus).
  engine::EngineMetrics* metrics = nullptr;
};

// Client::Connect with hooks: a cluster client when `options.etcd` or `hooks.cluster_map` is
// set, else a connection to `options.server`.
// Visible to this repository's other libraries (tests link client/ as a shared object in
// fastbuild); libunloadkv.so.1's version script keeps it local.
UNLOADKV_EXPORT absl::StatusOr<std::unique_ptr<Client>> ConnectWithHooks(
    const ClientOptions& options, const ClientHooks& hooks);

}  // namespace unloadkv

#endif  // UNLOADKV_CLIENT_CLIENT_HOOKS_H_
