// How many client connections a node can hold: kvserver's --max_connections default, and the
// check of an explicit value.
#ifndef UNLOADKV_SERVER_CONNECTION_BUDGET_H_
#define UNLOADKV_SERVER_CONNECTION_BUDGET_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "transport/engine/engine.h"
#include "transport/rnic/device.h"

namespace unloadkv::server {

struct ConnectionBudget {
  int max_connections = 0;
  uint64_t bytes_per_connection = 0;  // the worst case one connection can make resident
  std::string summary;                // one line: the limit and what bounds it
};

// `requested` 0 asks for the default: the most connections, up to 65536, whose reserved message
// buffers fit in the device's shared receive queue and whose completions fit in its CQ
// (engine::Engine::MaxConnectionsPerWorker)
// and whose worst-case memory (engine::Engine::MaxConnectionBytes, plus the device's buffers
// for each connection's QPs) fits, with the engine's shared buffers, in half of
// `available_bytes` (MemAvailable). An explicit `requested` above the queue's bound is refused
// (InvalidArgument naming the bound); above the memory bound it is kept, and the summary says
// so. `eo` is the engine's options without max_connections_per_worker.
absl::StatusOr<ConnectionBudget> ResolveConnectionBudget(int requested,
                                                         const engine::EngineOptions& eo,
                                                         const rnic::DeviceLimits& limits,
                                                         uint64_t available_bytes);

// MemAvailable of /proc/meminfo, bytes; 0 when it cannot be read.
uint64_t MemAvailableBytes();

}  // namespace unloadkv::server

#endif  // UNLOADKV_SERVER_CONNECTION_BUDGET_H_
