#include "tests/sim/replication_writes.h"

#include "prometheus/metric_family.h"

namespace unloadkv::world {

std::array<double, 2> ReplicationWrites(server::KvServer* server) {
  std::array<double, 2> by_path = {0, 0};
  if (server == nullptr) return by_path;
  for (const prometheus::MetricFamily& f : server->registry()->Collect()) {
    if (f.name != "unloadkv_replication_value_writes_total") continue;
    for (const prometheus::ClientMetric& m : f.metric) {
      for (const prometheus::ClientMetric::Label& l : m.label) {
        if (l.name != "path") continue;
        if (l.value == "offload") by_path[0] += m.counter.value;
        if (l.value == "unload") by_path[1] += m.counter.value;
      }
    }
  }
  return by_path;
}

}  // namespace unloadkv::world
