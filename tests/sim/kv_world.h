// KvWorld: the real kvserver and real SDK clients on the simulated fabric, in one process,
// one thread at a time and virtual time (docs/sim-kv.md).
//
// The server is server::KvServer embedded (KvServerEmbedding) on a node of a sim::Fabric;
// each client is an unloadkv::Client embedded (ClientEmbedding) on a node of its own. Nothing
// is reimplemented for the simulation: the arena, store, RPC service, grants, engine and
// policies are the code kvserver and the SDK run on soft and verbs. The world steps them all:
// it runs every engine's completions (the modeled cores charge each completion, message and
// staged copy on the core its CQ belongs to, so RPC handling and unload copies compete for
// the server's cores), then the fabric's events up to the next completion.
//
// Blocking client code (synchronous calls, YCSB's threads) runs as lockstep participants
// (transport/sim/lockstep.h): RunThreads.
//
//   auto world = KvWorld::Create(KvWorldOptions());
//   auto client = (*world)->Connect(ClientOptions());
//   (*client)->Put("k", "v");   // the world runs until the answer is in
//
// Determinism: for the same options and the same client code, the same virtual times and
// results, run after run (the arena is mapped at a fixed address; see KvServerEmbedding).
// Thread-safety: as Lockstep's; Connect and RunThreads from the thread that created the world.
// Lifetime: destroy every client before the world.
#ifndef UNLOADKV_TESTS_SIM_KV_WORLD_H_
#define UNLOADKV_TESTS_SIM_KV_WORLD_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "client/client.h"
#include "client/client_hooks.h"
#include "server/kv_server.h"
#include "tests/sim/sim_clients.h"
#include "transport/sim/fabric.h"
#include "transport/sim/lockstep.h"
#include "transport/sim/model.h"

namespace unloadkv::world {

using server::KvServer;
using server::KvServerEmbedding;
using server::KvServerOptions;

struct KvWorldOptions {
  sim::NodeModel server_model;
  sim::NodeModel client_model;
  // The server's options; `embedding` is the world's. Arena on modeled 4 KiB pages (where
  // the NIC's translation caches can miss) unless arena_huge_pages.
  KvServerOptions server;
  bool arena_huge_pages = false;
  // Virtual time with nothing in flight anywhere after which a waiter is declared stuck (a
  // bug: every request has a deadline well inside it).
  absl::Duration max_idle = absl::Seconds(120);
};

class KvWorld {
 public:
  static absl::StatusOr<std::unique_ptr<KvWorld>> Create(const KvWorldOptions& options);
  ~KvWorld();

  KvServer& server() { return *server_; }
  const Clock& clock() const { return fabric_.clock(); }
  int64_t now_ns() const { return fabric_.now_ns(); }
  // The server node's modeled NIC and CPU counters.
  sim::NodeStats server_stats() const { return sim::StatsOf(*server_device_); }
  int server_cores() const { return server_model_cores_; }

  // A client on a node of its own; `options.embedding` is set here, the rest is honored
  // (policy, max_in_flight, timeout...).
  absl::StatusOr<std::unique_ptr<Client>> Connect(ClientOptions options);
  // Runs `bodies`, each as a thread that may block in the clients' synchronous calls, until
  // all returned. FailedPrecondition if the world stalled (then the process must exit).
  absl::Status RunThreads(std::vector<std::function<void()>> bodies);
  // Steps the world until `done()` holds (from outside RunThreads).
  void Wait(const std::function<bool()>& done) { lockstep_.Wait(done); }

 private:
  KvWorld() : lockstep_([this] { return Step(); }) {}
  // One step: every engine's completions; if none, the fabric up to the next completion (or
  // 1 ms of virtual time, so that deadlines can fire). False once nothing at all happened
  // for max_idle.
  bool Step();

  sim::Fabric fabric_;
  absl::Duration max_idle_;
  int64_t idle_since_ns_ = -1;
  int server_model_cores_ = 0;
  std::unique_ptr<rnic::Device> server_device_;
  KvServerEmbedding server_embedding_;
  std::unique_ptr<KvServer> server_;
  sim::NodeModel client_model_;
  std::vector<std::unique_ptr<rnic::Device>> client_devices_;
  std::vector<std::unique_ptr<ClientEmbedding>> client_embeddings_;
  Pollers pollers_;  // the clients' engines and deadlines (ClientEmbedding::add_poller)
  sim::Lockstep lockstep_;
};

}  // namespace unloadkv::world

#endif  // UNLOADKV_TESTS_SIM_KV_WORLD_H_
