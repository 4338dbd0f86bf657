#include "tests/sim/sim_binding.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/value_policy.h"
#include "client/ycsb/measurements.h"
#include "client/ycsb/unloadkv_db.h"
#include "proto/limits.h"

namespace unloadkv::ycsb {
namespace {

// A model parameter settable as sim.<name>, on every node.
struct ModelParam {
  const char* name;
  double min, max;
  std::function<void(sim::NodeModel&, double)> set;
};

std::vector<ModelParam> ModelParams() {
  auto i64 = [](int64_t sim::NicModel::*f) {
    return [f](sim::NodeModel& m, double v) { m.nic.*f = static_cast<int64_t>(v); };
  };
  auto cpu64 = [](int64_t sim::CpuModel::*f) {
    return [f](sim::NodeModel& m, double v) { m.cpu.*f = static_cast<int64_t>(v); };
  };
  auto nic_int = [](int sim::NicModel::*f) {
    return [f](sim::NodeModel& m, double v) { m.nic.*f = static_cast<int>(v); };
  };
  return {
      {"wire_latency_ns", 0, 1e9, i64(&sim::NicModel::wire_latency_ns)},
      {"wire_gbps", 0.1, 1e4, [](sim::NodeModel& m, double v) { m.nic.wire_gbps = v; }},
      {"pcie_rtt_ns", 0, 1e9, i64(&sim::NicModel::pcie_rtt_ns)},
      {"pcie_gbps", 0.1, 1e4, [](sim::NodeModel& m, double v) { m.nic.pcie_gbps = v; }},
      {"nic_op_ns", 0, 1e9, i64(&sim::NicModel::nic_op_ns)},
      {"max_inline_bytes", 0, 4096,
       [](sim::NodeModel& m, double v) { m.nic.max_inline_bytes = static_cast<uint32_t>(v); }},
      {"mpt_cache_entries", 1, 1e7, nic_int(&sim::NicModel::mpt_cache_entries)},
      {"mtt_cache_entries", 1, 1e7, nic_int(&sim::NicModel::mtt_cache_entries)},
      {"miss_pcie_reads", 0, 64, nic_int(&sim::NicModel::miss_pcie_reads)},
      {"translation_units", 1, 1024, nic_int(&sim::NicModel::translation_units)},
      {"cores", 1, 256, [](sim::NodeModel& m, double v) { m.cpu.cores = static_cast<int>(v); }},
      {"poll_ns", 0, 1e9, cpu64(&sim::CpuModel::poll_ns)},
      {"post_ns", 0, 1e9, cpu64(&sim::CpuModel::post_ns)},
      {"message_ns", 0, 1e9, cpu64(&sim::CpuModel::message_ns)},
      {"random_access_ns", 0, 1e9, cpu64(&sim::CpuModel::random_access_ns)},
      {"copy_gbps", 0.1, 1e4, [](sim::NodeModel& m, double v) { m.cpu.copy_gbps = v; }},
  };
}

// The Db of one client thread: checked, and adding its value writes by path to the phase's
// counts when the runner lets go of it.
class PhaseDb : public CheckedDb {
 public:
  PhaseDb(std::unique_ptr<Db> inner, ValueLog* log, SimPhase* phase)
      : CheckedDb(std::move(inner), log), phase_(phase) {}
  ~PhaseDb() override {
    const WriteStats w = static_cast<UnloadkvDb&>(inner()).client().write_stats();
    phase_->offloaded += w.offload;
    phase_->unloaded += w.unload;
  }

 private:
  SimPhase* phase_;
};

}  // namespace

absl::StatusOr<SimOptions> ReadSimOptions(const Properties& p, const WorkloadConfig& c) {
  SimOptions o;
  o.policy = p.GetString("unloadkv.policy", "adaptive");
  absl::StatusOr<client_internal::ValuePolicy> values = client_internal::ParseValuePolicy(o.policy);
  if (!values.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("unloadkv.policy: ", values.status().message()));
  }
  if (absl::StatusOr<std::unique_ptr<engine::PathPolicy>> pol =
          engine::MakePolicy(values->engine_policy);
      !pol.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("unloadkv.policy: ", pol.status().message()));
  }
  absl::StatusOr<int64_t> seed = p.GetInt("sim.seed", 1, 0, int64_t{1} << 62);
  if (!seed.ok()) return seed.status();
  o.seed = static_cast<uint64_t>(*seed);
  sim::NodeModel model;
  for (const ModelParam& m : ModelParams()) {
    const std::string key = absl::StrCat("sim.", m.name);
    if (!p.Has(key)) continue;
    absl::StatusOr<double> v = p.GetDouble(key, 0, m.min, m.max);
    if (!v.ok()) return v.status();
    m.set(model, *v);
  }
  o.world.server_model = model;
  o.world.client_model = model;
  // The records' slots (each field one key, in the smallest slot class holding it), the
  // inserts the run may add, and room for updates (written to a new slot before the old one
  // is freed) and for the slots granted to clients but not used yet.
  const int cls = proto::SlotClassOf(static_cast<uint32_t>(c.field_length));
  const double slot = proto::SlotClassCapacity(std::max(cls, 0));
  const double records = static_cast<double>(c.record_count) +
                         std::ceil(static_cast<double>(c.operation_count) * c.insert);
  const double need = records * c.field_count * slot * 1.25;
  const int64_t mib = int64_t{1} << 20;
  const int64_t sized = (static_cast<int64_t>(need) / mib + 64) * mib;
  absl::StatusOr<int64_t> arena = p.GetInt("sim.arena_bytes", sized, mib, int64_t{1} << 40);
  if (!arena.ok()) return arena.status();
  o.world.server.arena_bytes = static_cast<uint64_t>(*arena);
  absl::StatusOr<bool> huge = p.GetBool("sim.arena_huge_pages", false);
  if (!huge.ok()) return huge.status();
  o.world.arena_huge_pages = *huge;
  absl::StatusOr<int64_t> workers =
      p.GetInt("sim.unload_workers", std::min(model.cpu.cores, engine::kMaxUnloadWorkers), 1,
               engine::kMaxUnloadWorkers);
  if (!workers.ok()) return workers.status();
  o.world.server.unload_workers = static_cast<int>(*workers);
  absl::StatusOr<bool> protection = p.GetBool("sim.memory_protection", true);
  if (!protection.ok()) return protection.status();
  o.world.server.memory_protection = *protection;
  // Writes the server initiates (none on a single node): the engine's part of the policy.
  o.world.server.policy = values->engine_policy;
  o.world.server.max_connections = 2048;
  return o;
}

absl::StatusOr<std::unique_ptr<SimYcsb>> SimYcsb::Create(const SimOptions& options,
                                                         int field_count) {
  std::unique_ptr<SimYcsb> s(new SimYcsb());
  s->options_ = options;
  absl::StatusOr<std::unique_ptr<world::KvWorld>> world = world::KvWorld::Create(options.world);
  if (!world.ok()) return world.status();
  s->world_ = std::move(*world);
  s->log_ = std::make_unique<ValueLog>(field_count);
  return s;
}

absl::StatusOr<SimPhase> SimYcsb::Run(Workload& workload, RunOptions o) {
  world::KvWorld* world = world_.get();
  o.clock = &world->clock();
  o.seed = options_.seed;
  o.run_threads = [world](std::vector<std::function<void()>> bodies) {
    return world->RunThreads(std::move(bodies));
  };
  SimPhase phase;
  ClientOptions co;
  co.policy = options_.policy;
  DbFactory connect = [this, world, co, &phase]() -> absl::StatusOr<std::unique_ptr<Db>> {
    absl::StatusOr<std::unique_ptr<Client>> c = world->Connect(co);
    if (!c.ok()) return c.status();
    return std::unique_ptr<Db>(new PhaseDb(
        UnloadkvDb::Wrap(std::move(*c), UnloadkvDb::Layout::kFieldPerKey), log_.get(), &phase));
  };
  const sim::NodeStats before = world->server_stats();
  const int64_t t0 = world->now_ns();
  absl::StatusOr<RunResult> r = RunPhase(workload, o, connect);
  if (!r.ok()) return r.status();
  phase.run = std::move(*r);
  const sim::NodeStats after = world->server_stats();
  phase.virtual_ns = world->now_ns() - t0;
  phase.mtt_misses = after.mtt_misses - before.mtt_misses;
  if (phase.virtual_ns > 0) {
    phase.server_core_utilization = static_cast<double>(after.cpu_busy_ns - before.cpu_busy_ns) /
                                    (static_cast<double>(phase.virtual_ns) * world->server_cores());
  }
  return phase;
}

std::string FormatSimSummary(const SimPhase& phase, const ValueLog::Counts& checks) {
  std::string out;
  absl::StrAppend(&out, "[SIM], ValueWritesOffloaded, ", phase.offloaded, "\n");
  absl::StrAppend(&out, "[SIM], ValueWritesUnloaded, ", phase.unloaded, "\n");
  absl::StrAppend(&out, "[SIM], UnloadedShare(%), ", JavaDouble(100 * phase.unloaded_share()),
                  "\n");
  absl::StrAppend(&out, "[SIM], ServerCoreUtilization(%), ",
                  JavaDouble(100 * phase.server_core_utilization), "\n");
  absl::StrAppend(&out, "[SIM], ServerTranslationMisses, ", phase.mtt_misses, "\n");
  absl::StrAppend(&out, "[SIM], CheckedReads, ", checks.reads, "\n");
  absl::StrAppend(&out, "[SIM], BadReads, ", checks.bad_reads, "\n");
  absl::StrAppend(&out, "[SIM], CheckedScanValues, ", checks.scanned_values, "\n");
  absl::StrAppend(&out, "[SIM], BadScanValues, ", checks.bad_scanned_values, "\n");
  if (!checks.first_problem.empty()) {
    absl::StrAppend(&out, "[SIM], FirstProblem, ", checks.first_problem, "\n");
  }
  return out;
}

}  // namespace unloadkv::ycsb
