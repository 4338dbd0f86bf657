// libFuzzer target for the cluster map decoder: arbitrary record bytes under each kind of key
// (what a damaged or hostile etcd could hold). Whatever assembles must be a well-formed map:
// ordered shards covering the key space, a config within limits, and every key routable.
#include <cstdint>
#include <string>
#include <vector>

#include "transport/cluster/map_records.h"

namespace c = unloadkv::cluster;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Split the input into up to 4 records at '\x00' bytes: config, shard 0, shard 1, a node.
  std::vector<std::string> parts(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0 && parts.size() < 4) {
      parts.emplace_back();
    } else {
      parts.back().push_back(static_cast<char>(data[i]));
    }
  }
  parts.resize(4);
  std::vector<c::StoredKey> keys{{c::ConfigKey("f"), parts[0], 2},
                                 {c::ShardKey("f", 0), parts[1], 3},
                                 {c::ShardKey("f", 1), parts[2], 4},
                                 {c::NodeKey("f", "n"), parts[3], 5}};
  absl::StatusOr<c::ClusterView> view = c::AssembleView("f", 9, keys);
  if (!view.ok()) return 0;
  if (view->shards < 1 || view->replicas < 1 || view->replicas > c::kMaxReplicas) {
    __builtin_trap();
  }
  if (!c::CheckCoverage(view->shard_list).ok()) __builtin_trap();
  for (const std::string& k : {std::string(""), std::string("m"), std::string("\xff\xff")}) {
    if (view->ShardFor(k) == nullptr) __builtin_trap();
  }
  return 0;
}
