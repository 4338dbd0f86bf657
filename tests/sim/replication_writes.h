// A node's replication value writes to its backups so far, by engine path, read from its
// Prometheus registry (unloadkv_replication_value_writes_total{path}): what the simulation's
// path reports (failover_paths, migration_paths) count.
#ifndef UNLOADKV_TESTS_SIM_REPLICATION_WRITES_H_
#define UNLOADKV_TESTS_SIM_REPLICATION_WRITES_H_

#include <array>

#include "server/kv_server.h"

namespace unloadkv::world {

// {offloaded, unloaded}; zeros for a node that is down (nullptr).
std::array<double, 2> ReplicationWrites(server::KvServer* server);

}  // namespace unloadkv::world

#endif  // UNLOADKV_TESTS_SIM_REPLICATION_WRITES_H_
