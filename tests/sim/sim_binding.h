// YCSB on the simulated fabric (docs/sim-kv.md): `-p unloadkv.transport=sim`. The real
// kvserver and one SDK client per YCSB thread run in this process on a world::KvWorld, in
// virtual time; the threads run in lockstep, each one operation at a time as YCSB's threads
// do. Every figure is modeled. Reads are checked against what was written (CheckedDb).
//
// Properties (besides the core workload's and unloadkv.policy):
//   sim.seed                 workload seed (the fabric itself has no randomness); default 1
//   sim.arena_bytes          the server's arena; default: the records' slots plus headroom
//   sim.arena_huge_pages     arena on modeled 2 MiB pages; default false (4 KiB, where the
//                            NIC's translation caches can miss)
//   sim.unload_workers       server engine workers; default: the server's modeled cores
//   sim.memory_protection    grants as memory windows (docs/security.md); default true
//   sim.<parameter>          the cost model, both nodes (transport/sim/model.h, docs/
//                            sim-model.md): wire_latency_ns wire_gbps pcie_rtt_ns pcie_gbps
//                            nic_op_ns max_inline_bytes mpt_cache_entries mtt_cache_entries
//                            miss_pcie_reads translation_units cores poll_ns post_ns
//                            message_ns random_access_ns copy_gbps
#ifndef UNLOADKV_TESTS_SIM_SIM_BINDING_H_
#define UNLOADKV_TESTS_SIM_SIM_BINDING_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "client/ycsb/checked_db.h"
#include "client/ycsb/properties.h"
#include "client/ycsb/runner.h"
#include "client/ycsb/workload.h"
#include "tests/sim/kv_world.h"

namespace unloadkv::ycsb {

struct SimOptions {
  world::KvWorldOptions world;
  std::string policy = "adaptive";  // every client connection's path policy
  uint64_t seed = 1;
};

// Reads the sim.* properties and unloadkv.policy; sizes the arena for `config` unless
// sim.arena_bytes is set. InvalidArgument naming the property.
absl::StatusOr<SimOptions> ReadSimOptions(const Properties& p, const WorkloadConfig& config);

// One phase's results, beyond YCSB's.
struct SimPhase {
  RunResult run;
  uint64_t offloaded = 0, unloaded = 0;  // value writes, by the path they took
  double unloaded_share() const {
    return offloaded + unloaded == 0 ? 0 : static_cast<double>(unloaded) / (offloaded + unloaded);
  }
  double server_core_utilization = 0;  // busy / (cores x phase time), 0..1
  uint64_t mtt_misses = 0;             // the server NIC's page-translation misses
  int64_t virtual_ns = 0;              // the phase's length in virtual time
};

// A world and the value log of one YCSB run: phases run one after the other on the same
// server (a load, then runs), as against one long-lived kvserver.
class SimYcsb {
 public:
  static absl::StatusOr<std::unique_ptr<SimYcsb>> Create(const SimOptions& options,
                                                         int field_count);
  // Runs a phase with `options` (clock, thread runner and seed are the simulation's).
  absl::StatusOr<SimPhase> Run(Workload& workload, RunOptions options);
  const ValueLog& log() const { return *log_; }
  world::KvWorld& world() { return *world_; }

 private:
  SimYcsb() = default;
  SimOptions options_;
  std::unique_ptr<world::KvWorld> world_;
  std::unique_ptr<ValueLog> log_;
};

// The [SIM] lines printed after YCSB's summary (YCSB's "[SECTION], metric, value" form).
std::string FormatSimSummary(const SimPhase& phase, const ValueLog::Counts& checks);

}  // namespace unloadkv::ycsb

#endif  // UNLOADKV_TESTS_SIM_SIM_BINDING_H_
