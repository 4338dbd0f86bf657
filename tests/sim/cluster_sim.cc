// cluster_sim: the whole cluster in one process on the simulated fabric, under a seeded fault
// schedule, with every client operation recorded and checked (docs/sim-cluster.md).
//
//   bazel run -c opt //tests/sim:cluster_sim -- --seed=7           # one run; replays exactly
//   bazel run -c opt //tests/sim:cluster_sim -- --seeds=1..100     # a range, summarized
//   bazel run -c opt //tests/sim:cluster_sim -- --seeds=1..100,216 # ranges and seeds
//   bazel run -c opt //tests/sim:cluster_sim -- --seed=7 --trace   # the events of a failure
//   bazel run -c opt //tests/sim:cluster_sim -- --durable --seeds=1..50  # logs on simulated disks
//
// A seed fixes everything: the cluster's shape (nodes, shards, path policy), the clients'
// operations and think times, and the faults (crash and restart, pause, cut from the cluster,
// cut from the map service, partition, slow CPU, slow network, rogue write; with --durable also
// a power loss of every node, a full disk and a crash in the middle of a log compaction) with
// their times and victims. The engine's invariants
// are checked on every connection as the world runs (tests/sim/sim_invariants.h). After the
// workload every fault is healed and the cluster must come back to full replication with nothing in
// flight; then the checks:
//   1. the history (every PUT/GET/DELETE with its virtual invoke and response times, plus a
//      final read of every key) is linearizable, key by key: no acknowledged write is lost,
//      no read sees a value that was never written or was overwritten;
//   2. every replica of a shard holds the same keys, versions and value bytes, and no node
//      holds a replica of a shard it is not in the group of;
//   3. nothing leaked: no slot grant outstanding, no client connection left on any node.
// The event trace (faults, operations and their outcomes, in virtual time) is hashed: the same
// seed prints the same hash, run after run.
#include <array>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "gflags/gflags.h"
#include "server/log_writer.h"
#include "tests/kv/linearizability.h"
#include "tests/sim/cluster_world.h"
#include "transport/base/buggify.h"
#include "transport/base/logging.h"
#include "transport/placement/shard_merge.h"
#include "transport/placement/shard_move.h"
#include "transport/placement/shard_split.h"

DEFINE_uint64(seed, 1, "the run's seed (everything follows from it)");
DEFINE_string(seeds, "",
              "seeds to run and summarize, comma-separated ranges A..B (inclusive) and single "
              "seeds, e.g. 1..100,216; overrides --seed");
DEFINE_bool(trace, false,
            "print the run's events: faults, operations and the servers' log lines (all of "
            "them, or those around a failure)");
DEFINE_double(workload_seconds, 20, "virtual seconds of client operations and faults per run");
DEFINE_int32(clients, 3, "client participants per run (1..16)");
DEFINE_int32(keys, 64, "keys the clients operate on (1..1000)");
DEFINE_uint32(inline_bytes, 0,
              "clients send a value of at most this many bytes inline in its PUT (their "
              "policy's \",inline:N\", 0..4096); values are c<client>-<n>, so 5 sends a "
              "client's first 100 PUTs inline and the rest through the engine");
DEFINE_bool(durable, false,
            "nodes log to simulated disks (--fsync=always), and the faults include a power loss "
            "of every node and a full disk (docs/durability.md)");
DEFINE_string(
    fsync, "always",
    "with --durable: the nodes' --fsync; the checks expect no acknowledged write lost "
    "under always, none acknowledged more than MS (plus a log round) before a power "
    "loss under interval:MS, and under never always's (never promises nothing across a power "
    "loss: runs with one fail, as they should)");
DEFINE_bool(moves, false,
            "the faults include an operator's `cluster move` of a shard's primary or backup role "
            "to a node outside its group (transport/placement/shard_move.h), a third of them with "
            "the source "
            "or the destination crashed mid-move");
DEFINE_bool(lost_answers, false,
            "with --moves: half of the moves run with the map's answers to the source's and the "
            "destination's shard writes lost (applied, but they hear UNAVAILABLE), as when etcd "
            "paused past their deadline answers the queued requests on resume");
DEFINE_bool(
    splits, false,
    "the faults include an operator's `cluster split` of a shard at one of the "
    "workload's keys (transport/placement/shard_split.h), a third of them with the primary or a "
    "backup crashed mid-split");
DEFINE_bool(merges, false,
            "the faults include an operator's `cluster merge` of two neighbouring shards "
            "(transport/placement/shard_merge.h; a move of the right one's primary role first when "
            "needed), a "
            "third of them with their primary crashed mid-merge");
DEFINE_bool(placement, false,
            "automatic placement on (server/placer.h): the nodes' placer splits shards above "
            "--max_shard_bytes and spreads roles over the nodes by itself, among the faults");
DEFINE_uint64(max_shard_bytes, 128,
              "with --placement: split a shard above this many live bytes (the workload's "
              "values are a few bytes each: 128 makes a few splits a run)");
DEFINE_bool(buggify, true,
            "switch on the code's fault points (transport/base/buggify.h), drawn from the seed");

namespace unloadkv {
namespace {

using testing::KvOp;
using world::ClusterWorld;

constexpr int64_t kSecond = 1'000'000'000;

struct Outcome {
  bool ok = true;
  std::string failure;
  std::string failing_key;  // a linearizability failure's key
  uint64_t trace_hash = 0;
  size_t ops = 0;
  size_t scans = 0;
  world::SimInvariants::Counts invariants;  // the engine's, on every connection
  std::map<std::string, int> faults;
  int auto_shards_added = 0;  // --placement: shards at the end less shards at the start
  std::map<std::string, uint64_t> buggify;  // fault points that fired, by site
  std::map<std::string, int> refused;       // rogue writes refused, by path
  int64_t sim_ns = 0;
  double real_s = 0;
  ClusterWorld::Options shape;
};

// One seeded run. Participants share it; one runs at a time (Lockstep).
class SimRun {
 public:
  explicit SimRun(uint64_t seed) : seed_(seed), rng_(seed) {}

  Outcome Go() {
    const auto real_start = std::chrono::steady_clock::now();
    if (FLAGS_buggify) {
      EnableBuggify(seed_ ^ 0x9e3779b97f4a7c15ULL);
    } else {
      DisableBuggify();
    }
    ClusterWorld::Options o;
    o.nodes = 3 + static_cast<int>(rng_() % 3);
    o.shards = 1 + static_cast<int>(rng_() % 3);
    o.replicas = 3;
    static const char* const kPolicies[] = {"adaptive", "offload", "unload"};
    o.policy = kPolicies[rng_() % 3];
    o.lease_ttl = absl::Seconds(2 + static_cast<int>(rng_() % 2));
    static const int64_t kJitterNs[] = {0, 2'000, 20'000, 200'000};
    const int64_t jitter_ns = kJitterNs[rng_() % 4];
    o.durable = FLAGS_durable;
    o.fsync = FLAGS_fsync;
    o.placement = FLAGS_placement;
    o.max_shard_bytes = FLAGS_max_shard_bytes;
    o.disk_seed = seed_;
    if (absl::StatusOr<server::FsyncPolicy> p = server::FsyncPolicy::Parse(o.fsync);
        p.ok() && p->kind == server::FsyncPolicy::Kind::kInterval) {
      interval_ = p->interval;
    }
    out_.shape = o;
    auto world = ClusterWorld::Create(o);
    if (!world.ok()) return Fail(absl::StrCat("creating the world: ", world.status().ToString()));
    world_ = *std::move(world);
    w_ = world_.get();
    admin_ = w_->AdminMap();
    w_->Jitter(absl::Nanoseconds(jitter_ns), seed_);
    Note(absl::StrFormat(
        "shape: %d nodes, %d shards x %d replicas, policy %s, lease %s, "
        "jitter up to %d ns%s",
        o.nodes, o.shards, o.replicas, o.policy, absl::FormatDuration(o.lease_ttl), jitter_ns,
        o.durable ? absl::StrCat(", durable (fsync ", o.fsync, ")") : ""));
    std::vector<std::function<void()>> bodies;
    bodies.push_back([this] { Direct(); });
    for (int c = 0; c < FLAGS_clients; ++c) bodies.push_back([this, c] { ClientLoop(c); });
    clients_running_ = FLAGS_clients;
    if (absl::Status st = w_->Run(std::move(bodies)); !st.ok()) {
      // Participants are left blocked: the caller must report and exit.
      stalled_ = true;
      Fail(absl::StrCat("the world stopped: ", st.message()));
    }
    CheckInvariants();
    if (out_.ok && !stalled_) CheckHistory();
    const world::SimInvariants::Counts& inv = w_->invariants();
    out_.invariants = inv;
    Note(absl::StrCat("engine invariants: ", inv.writes_verified,
                      " writes in place at completion, ", inv.messages_checked, " messages after ",
                      inv.writes_before_checked, " writes issued before them, ",
                      inv.refusals_checked, " refusals; ", inv.overwritten,
                      " skipped (written since by another connection)"));
    out_.buggify = BuggifyFired();
    for (const auto& [site, n] : out_.buggify) Note(absl::StrCat("buggify fired ", n, "x: ", site));
    out_.ops = history_.size();
    out_.scans = scans_;
    out_.sim_ns = w_->now_ns();
    out_.real_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - real_start).count();
    out_.trace_hash = hash_;
    return out_;
  }

  bool stalled() const { return stalled_; }
  // The servers' log lines join the trace, in virtual time (SetLogSink).
  static void LogToTrace(void* run, LogLevel level, absl::string_view message) {
    static const char* const kLevels[] = {"I", "W", "E"};
    static_cast<SimRun*>(run)->Note(
        absl::StrCat("log ", kLevels[static_cast<int>(level)], " ", message));
  }
  // The events within `margin` of the failing key's operations (all events without one).
  void PrintTrace(int64_t margin_ns) const {
    int64_t from = 0, to = INT64_MAX;
    if (!out_.failing_key.empty()) {
      from = INT64_MAX;
      to = 0;
      for (const KvOp& op : history_) {
        if (op.key != out_.failing_key) continue;
        from = std::min(from, op.invoke_ns);
        to = std::max(to, op.response_ns.value_or(op.invoke_ns));
      }
      from -= margin_ns;
      to += margin_ns;
    }
    for (const auto& [ns, text] : events_) {
      if (ns >= from && ns <= to) std::fprintf(stderr, "%12.6f %s\n", ns / 1e9, text.c_str());
    }
  }

 private:
  Outcome Fail(const std::string& why) {
    if (out_.ok) {
      out_.ok = false;
      out_.failure = why;
      Note("FAILURE: " + why);
    }
    return out_;
  }

  void Note(const std::string& text) {
    const int64_t ns = w_ != nullptr ? w_->now_ns() : 0;
    events_.emplace_back(ns, text);
    // FNV-1a over the time and the text.
    auto mix = [this](const void* p, size_t n) {
      for (size_t i = 0; i < n; ++i) {
        hash_ ^= static_cast<const unsigned char*>(p)[i];
        hash_ *= 0x100000001b3ULL;
      }
    };
    mix(&ns, sizeof(ns));
    mix(text.data(), text.size());
  }

  absl::StatusOr<cluster::ClusterView> View() { return w_->View(); }
  bool FullyReplicated() { return w_->FullyReplicated(); }

  // Fully replicated, every node up, registered and reconciled with the map since (a node
  // that lost its lease acts again only after that: ClusterNode::LeaseValid), and no write in
  // flight on any primary.
  bool Quiesced() {
    if (!FullyReplicated()) return false;
    absl::StatusOr<cluster::ClusterView> v = View();
    if (!v.ok()) return false;
    for (int i = 0; i < w_->nodes(); ++i) {
      server::KvServer* srv = w_->server(i);
      if (srv == nullptr || w_->paused(i) || !v->IsLive(w_->node_name(i)) ||
          !srv->cluster_node()->LeaseValid()) {
        return false;
      }
      // Nothing in flight: a backup applies a record before its primary commits it, so a
      // write still waiting for another backup's ack (or for a failed link to be dropped)
      // leaves the group briefly unequal.
      for (const auto& r : srv->shards().All()) {
        if (r->pending() > 0 || !r->FailedLinks().empty()) return false;
      }
    }
    return true;
  }

  // Waits until `done` or `limit` of virtual time passed; false on the limit.
  bool WaitFor(const std::function<bool()>& done, int64_t limit_ns) {
    const int64_t until = w_->now_ns() + limit_ns;
    w_->Wait([&] { return done() || w_->now_ns() >= until; });
    return done();
  }

  int NodeIndex(const std::string& name) const {
    for (int i = 0; i < w_->nodes(); ++i) {
      if (w_->node_name(i) == name) return i;
    }
    return -1;
  }

  // The director: forms the cluster, injects the faults, heals, and runs the final checks.
  void Direct() {
    if (!WaitFor([this] { return FullyReplicated(); }, 30 * kSecond)) {
      Fail("the cluster did not form within 30 s");
    }
    Note("cluster formed");
    formed_ = true;
    const int64_t end = w_->now_ns() + static_cast<int64_t>(FLAGS_workload_seconds * kSecond);
    std::uniform_int_distribution<int64_t> gap(200'000'000, 3 * kSecond);
    while (out_.ok) {
      w_->SleepUntil(w_->now_ns() + gap(rng_));
      if (w_->now_ns() >= end) break;
      InjectOne(end);
    }
    workload_done_ = true;
    w_->Wait([this] { return clients_running_ == 0; });
    Heal();
    if (!out_.ok) return;
    if (!WaitFor([this] { return Quiesced(); }, 60 * kSecond)) {
      return void(Fail("not fully replicated, every node back, 60 s after every fault healed"));
    }
    // One more control round everywhere, so that dropped replicas are gone.
    w_->SleepUntil(w_->now_ns() + 500'000'000);
    Note("healed and fully replicated");
    if (FLAGS_placement) {
      if (absl::StatusOr<cluster::ClusterView> v = w_->View(); v.ok()) {
        out_.auto_shards_added = v->shards - out_.shape.shards;
      }
    }
    FinalReads();
    if (!out_.ok) return;
    CheckReplicas();
    CheckLeaks();
  }

  void InjectOne(int64_t end) {
    enum Kind {
      kCrash,
      kPause,
      kCutCluster,
      kCutMap,
      kPartition,
      kSlowCpu,
      kSlowNet,
      kRogueWrite,
      kKinds,
      // Durable runs only (the kinds above keep their seeds' draws).
      kPowerLoss = kKinds,
      kDiskFull,
      kCompactionCrash,
      kDurableKinds,
      // --moves, then --splits, drawn after the kinds above (which keep their seeds' draws).
      kMove = kDurableKinds,
      kSplit,
      kMerge,
    };
    static const char* const kNames[] = {
        "crash",    "pause",       "cut_cluster", "cut_map",   "partition",        "slow_cpu",
        "slow_net", "rogue_write", "power_loss",  "disk_full", "compaction_crash", "move",
        "split",    "merge"};
    const int base = FLAGS_durable ? kDurableKinds : kKinds;
    std::vector<Kind> extra;  // in this order, so that each flag keeps the draws it had
    if (FLAGS_moves) extra.push_back(kMove);
    if (FLAGS_splits) extra.push_back(kSplit);
    if (FLAGS_merges) extra.push_back(kMerge);
    const int kinds = base + static_cast<int>(extra.size());
    const int drawn = static_cast<int>(rng_() % static_cast<uint64_t>(kinds));
    Kind kind = drawn < base ? static_cast<Kind>(drawn) : extra[drawn - base];
    const int victim = static_cast<int>(rng_() % static_cast<uint64_t>(w_->nodes()));
    std::uniform_int_distribution<int64_t> length(300'000'000, 6 * kSecond);
    const int64_t hold = length(rng_);
    // One fault at a time, and each starts from a fully replicated cluster: a shard of r
    // replicas survives r - 1 lost memories only if they do not overlap a state transfer.
    if (!WaitFor([this] { return FullyReplicated(); }, 30 * kSecond)) {
      return void(Fail("not fully replicated 30 s after the last fault healed"));
    }
    if (w_->now_ns() >= end) return;
    ++out_.faults[kNames[kind]];
    std::string who = w_->node_name(victim);
    // A partition: a random proper subset of the nodes (the victim among them) on one side,
    // cut off from the map service too half of the time.
    std::vector<int> side = {victim};
    const bool side_loses_map = rng_() % 2 == 0;
    int factor = 1;
    if (kind == kPartition) {
      const int extra = static_cast<int>(rng_() % static_cast<uint64_t>(w_->nodes() - 1));
      for (int i = 0; static_cast<int>(side.size()) < 1 + extra && i < w_->nodes(); ++i) {
        if (i != victim && rng_() % 2 == 0) side.push_back(i);
      }
      who.clear();
      for (int i : side) absl::StrAppend(&who, who.empty() ? "" : ",", w_->node_name(i));
      if (side_loses_map) absl::StrAppend(&who, " (and the map)");
    } else if (kind == kSlowCpu) {
      factor = 2 + static_cast<int>(rng_() % 30);
      absl::StrAppend(&who, " x", factor);
    } else if (kind == kSlowNet) {
      factor = 1 + static_cast<int>(rng_() % 100);  // milliseconds
      absl::StrAppend(&who, " up to ", factor, " ms");
    } else if (kind == kRogueWrite) {
      return RogueWrite(victim);
    } else if (kind == kCompactionCrash) {
      return CompactionCrash(victim, hold);
    } else if (kind == kMove) {
      return MoveRole(hold);
    } else if (kind == kSplit) {
      return SplitShard(hold);
    } else if (kind == kMerge) {
      return MergeShards(hold);
    }
    Note(absl::StrFormat("fault %s %s for %.3f s", kNames[kind], who, hold / 1e9));
    // A third of the faults come with a slow CPU or a slow network on another node (or the
    // same) for as long: faults that lose nothing may overlap any other.
    std::optional<std::pair<Kind, int>> companion;
    if (rng_() % 3 == 0) {
      const int other = static_cast<int>(rng_() % static_cast<uint64_t>(w_->nodes()));
      if (rng_() % 2 == 0) {
        const int x = 2 + static_cast<int>(rng_() % 30);
        companion.emplace(kSlowCpu, other);
        w_->SlowCpu(other, x);
        Note(absl::StrFormat("fault slow_cpu %s x%d alongside", w_->node_name(other), x));
      } else {
        const int ms = 1 + static_cast<int>(rng_() % 100);
        companion.emplace(kSlowNet, other);
        w_->SlowNetwork(other, absl::Milliseconds(ms));
        Note(absl::StrFormat("fault slow_net %s up to %d ms alongside", w_->node_name(other), ms));
      }
      ++out_.faults[kNames[companion->first]];
    }
    switch (kind) {
      case kCrash:
        w_->Crash(victim);
        w_->SleepUntil(w_->now_ns() + hold);
        w_->Restart(victim);
        break;
      case kPause:
        w_->Pause(victim, absl::Nanoseconds(hold));
        w_->SleepUntil(w_->now_ns() + hold);
        break;
      case kCutCluster:
        w_->CutFromCluster(victim, true);
        w_->SleepUntil(w_->now_ns() + hold);
        w_->CutFromCluster(victim, false);
        break;
      case kCutMap:
        w_->CutFromMap(victim, true);
        w_->SleepUntil(w_->now_ns() + hold);
        w_->CutFromMap(victim, false);
        break;
      case kPartition:
        w_->Partition(side, true);
        for (int i : side) {
          if (side_loses_map) w_->CutFromMap(i, true);
        }
        w_->SleepUntil(w_->now_ns() + hold);
        w_->Partition(side, false);
        for (int i : side) w_->CutFromMap(i, false);
        break;
      case kSlowCpu:
        w_->SlowCpu(victim, factor);
        w_->SleepUntil(w_->now_ns() + hold);
        w_->SlowCpu(victim, 1);
        break;
      case kSlowNet:
        w_->SlowNetwork(victim, absl::Milliseconds(factor));
        w_->SleepUntil(w_->now_ns() + hold);
        w_->SlowNetwork(victim, absl::ZeroDuration());
        break;
      case kPowerLoss:
        // Every node at once: each disk keeps what was synced (and a seeded part of the rest).
        w_->PowerLoss();
        lossy_.push_back(w_->now_ns());
        w_->SleepUntil(w_->now_ns() + hold);
        for (int i = 0; i < w_->nodes(); ++i) w_->Restart(i);
        break;
      case kDiskFull:
        w_->DiskFull(victim, true);
        w_->SleepUntil(w_->now_ns() + hold);
        w_->DiskFull(victim, false);
        break;
      case kRogueWrite:
      case kCompactionCrash:
      case kMove:
      case kSplit:
      case kMerge:
        break;
    }
    Note(absl::StrFormat("healed %s %s", kNames[kind], who));
    if (companion) {
      const int other = companion->second;
      if (companion->first == kSlowCpu) {
        w_->SlowCpu(other, 1);
      } else {
        w_->SlowNetwork(other, absl::ZeroDuration());
      }
      Note(absl::StrFormat("healed %s %s", kNames[companion->first], w_->node_name(other)));
    }
    // A restarted node is back once its new incarnation runs.
    if (kind == kCrash && !WaitFor([&] { return w_->server(victim) != nullptr; }, 30 * kSecond)) {
      Fail(absl::StrCat(who, " did not restart within 30 s"));
    }
    if (kind == kPowerLoss && !WaitFor(
                                  [&] {
                                    for (int i = 0; i < w_->nodes(); ++i) {
                                      if (w_->server(i) == nullptr) return false;
                                    }
                                    return true;
                                  },
                                  30 * kSecond)) {
      Fail("not every node restarted within 30 s of the power coming back");
    }
  }

  // The victim dies at a step of its next log compaction drawn from the seed (its page cache
  // kept, or lost with its power), and restarts `hold` later. The faults counted are those that
  // struck; a compaction that did not come within 10 s is taken back.
  void CompactionCrash(int victim, int64_t hold) {
    using Op = storage::MemoryDisk::Op;
    // The steps from the state's aside file on (the segment the appends go to meanwhile was
    // opened before it: //server:replica_log_test crashes there too).
    static constexpr Op kOps[] = {Op::kAppend, Op::kSync, Op::kRename, Op::kSyncDir, Op::kRemove};
    static constexpr const char* kOpNames[] = {"append", "sync", "rename", "dir sync", "remove"};
    const size_t k = rng_() % 5;
    const uint64_t nth = kOps[k] == Op::kAppend ? 1 + rng_() % 16 : 1;
    const bool power = rng_() % 2 == 0;
    const std::string who = w_->node_name(victim);
    w_->CrashInCompaction(victim, kOps[k], nth, power);
    if (!WaitFor([&] { return w_->Halted(victim); }, 10 * kSecond)) {
      w_->Disarm(victim);
      Note(absl::StrFormat("no compaction on %s within 10 s: crash taken back", who));
      --out_.faults["compaction_crash"];  // counted as injected
      ++out_.faults["compaction_crash_missed"];
      return;
    }
    if (power) {
      lossy_.push_back(w_->now_ns());
      ++out_.faults["compaction_crash_power"];
    }
    Note(absl::StrFormat("fault compaction_crash %s at its %s #%d%s, down for %.3f s", who,
                         kOpNames[k], nth, power ? " with a power loss" : "", hold / 1e9));
    WaitFor([&] { return w_->server(victim) == nullptr; }, 10 * kSecond);
    w_->SleepUntil(w_->now_ns() + hold);
    w_->Restart(victim);
    Note(absl::StrFormat("healed compaction_crash %s", who));
    if (!WaitFor([&] { return w_->server(victim) != nullptr; }, 30 * kSecond)) {
      Fail(absl::StrCat(who, " did not restart within 30 s"));
    }
  }

  // An operator's `cluster move` (transport/placement/shard_move.h): a shard's primary or backup
  // role to a node outside its group, a step every 50 ms for at most 20 s; a third of them with the
  // source or the destination crashed mid-move (restarted `hold` later). What an unfinished
  // move left is undone (UndoMove), as `kvclient cluster move` does.
  void MoveRole(int64_t hold) {
    absl::StatusOr<cluster::ClusterView> v = w_->View();
    if (!v.ok() || v->shard_list.empty()) return;
    const cluster::ShardInfo s = v->shard_list[rng_() % v->shard_list.size()];
    std::vector<std::string> outside;
    for (const auto& [name, info] : v->nodes) {
      if (!s.HasReplica(name) && std::count(s.joining.begin(), s.joining.end(), name) == 0) {
        outside.push_back(name);
      }
    }
    if (outside.empty() || s.primary.empty()) {
      Note(absl::StrFormat("no node outside shard %d's group: move skipped", s.id));
      --out_.faults["move"];
      ++out_.faults["move_skipped"];
      return;
    }
    MoveRequest req;
    req.shard = s.id;
    req.to = outside[rng_() % outside.size()];
    if (rng_() % 2 == 0 && !s.backups.empty()) req.from = s.backups[rng_() % s.backups.size()];
    // Half of the primary's moves go to one of its backups (a swap: the old primary rejoins).
    if (req.from.empty() && !s.backups.empty() && rng_() % 2 == 0) {
      req.to = s.backups[rng_() % s.backups.size()];
    }
    const std::string from = req.from.empty() ? s.primary : req.from;
    int crash = -1;
    if (rng_() % 3 == 0) crash = NodeIndex(rng_() % 2 == 0 ? req.to : from);
    // Within the first 150 ms, and only while the new node catches up (after it, a hand-over's
    // new primary brings the other backups back by transfer: a crash of it then would be a
    // second failure overlapping a transfer, which an in-memory shard does not survive; see
    // "Faults" in docs/sim-cluster.md).
    const int64_t crash_ms = static_cast<int64_t>(rng_() % 150);
    const int64_t crash_at = w_->now_ns() + crash_ms * 1'000'000;
    Note(absl::StrFormat("fault move shard %d: %s's %s role to %s%s", s.id, from,
                         req.from.empty() ? "primary" : "backup", req.to,
                         crash < 0 ? ""
                                   : absl::StrCat(", ", w_->node_name(crash), " to crash at +",
                                                  crash_ms, " ms if it is not done")));
    // Drawn only with the flag, so that runs without it keep their seeds' draws.
    const bool lose_answers = FLAGS_lost_answers && rng_() % 2 == 0;
    auto lose = [&, at = std::array<int, 2>{NodeIndex(from), NodeIndex(req.to)}](bool on) {
      for (int i : at) {
        if (i >= 0) w_->LoseMapAnswers(i, on);
      }
    };
    if (lose_answers) {
      lose(true);
      ++out_.faults["move_lost_answers"];
      Note("the map's answers to the source's and the destination's shard writes are lost");
    }
    const int64_t until = w_->now_ns() + 20 * kSecond;
    bool crashed = false;
    bool joining = true;  // the copy still under way: a crash then overlaps no other failure
    while (true) {
      if (crash >= 0 && !crashed && joining && w_->now_ns() >= crash_at) {
        w_->Crash(crash);
        crashed = true;
        ++out_.faults["move_crash"];
        Note(absl::StrCat(w_->node_name(crash), " crashed mid-move"));
      }
      absl::StatusOr<MoveStep> st = StepMove(admin_.get(), &req);
      if (st.ok()) joining = st->state == MoveStep::State::kJoining;
      if (st.ok() && st->state == MoveStep::State::kDone) {
        ++out_.faults["move_done"];
        Note(absl::StrCat("move done: ", st->said));
        break;
      }
      if (!st.ok() && (req.resolved || st.status().code() != absl::StatusCode::kUnavailable)) {
        ++out_.faults["move_refused"];
        Note(absl::StrCat("move refused: ", st.status().message()));
        break;
      }
      if (w_->now_ns() >= until) {
        ++out_.faults["move_timed_out"];
        Note("move timed out");
        break;
      }
      w_->SleepUntil(w_->now_ns() + 50'000'000);
    }
    if (lose_answers) lose(false);
    // Undo what it left; the map may change under it (a node's write first): try again.
    if (req.resolved) Undo([&] { return UndoMove(admin_.get(), req); });
    if (crashed) RestartAfter(crash, hold);
  }

  // Calls `undo` until the map takes it (at most 100 tries, 50 ms apart); notes what it did.
  void Undo(const std::function<absl::StatusOr<std::string>()>& undo) {
    for (int i = 0; i < 100; ++i) {
      absl::StatusOr<std::string> undone = undo();
      if (undone.ok()) {
        if (!undone->empty()) Note(*undone);
        return;
      }
      w_->SleepUntil(w_->now_ns() + 50'000'000);
    }
  }

  // Restarts the crashed node `crash` after `hold` and waits for its new incarnation.
  void RestartAfter(int crash, int64_t hold) {
    w_->SleepUntil(w_->now_ns() + hold);
    w_->Restart(crash);
    if (!WaitFor([&] { return w_->server(crash) != nullptr; }, 30 * kSecond)) {
      Fail(absl::StrCat(w_->node_name(crash), " did not restart within 30 s"));
    }
  }

  // What a step of an operator's command said, and whether it is done.
  struct Said {
    bool done = false;
    std::string said;
  };
  // Steps an operator's command (`step`) every 50 ms until done, refused or 20 s passed, and
  // crashes node `crash` (-1: none) at `crash_at` if not done by then (*crashed). Counts the
  // outcome as faults "<what>_done", "_refused", "_timed_out", "_crash". True when done.
  bool StepCommand(const std::string& what, int crash, int64_t crash_at, bool* crashed,
                   const std::function<absl::StatusOr<Said>()>& step) {
    const int64_t until = w_->now_ns() + 20 * kSecond;
    while (true) {
      if (crash >= 0 && !*crashed && w_->now_ns() >= crash_at) {
        w_->Crash(crash);
        *crashed = true;
        ++out_.faults[what + "_crash"];
        Note(absl::StrCat(w_->node_name(crash), " crashed mid-", what));
      }
      absl::StatusOr<Said> st = step();
      if (st.ok() && st->done) {
        ++out_.faults[what + "_done"];
        Note(absl::StrCat(what, " done: ", st->said));
        return true;
      }
      if (!st.ok() && st.status().code() != absl::StatusCode::kUnavailable) {
        ++out_.faults[what + "_refused"];
        Note(absl::StrCat(what, " refused: ", st.status().message()));
        return false;
      }
      if (w_->now_ns() >= until) {
        ++out_.faults[what + "_timed_out"];
        Note(absl::StrCat(what, " timed out"));
        return false;
      }
      w_->SleepUntil(w_->now_ns() + 50'000'000);
    }
  }

  // An operator's `cluster split` (transport/placement/shard_split.h) of a shard at one of the
  // workload's keys inside its range, a step every 50 ms for at most 20 s; a third of them with the
  // shard's primary or one of its backups crashed within 100 ms (restarted `hold` later). A
  // split left unfinished is called off (UndoSplit), as `kvclient cluster split` does.
  void SplitShard(int64_t hold) {
    absl::StatusOr<cluster::ClusterView> v = w_->View();
    if (!v.ok() || v->shard_list.empty()) return;
    const cluster::ShardInfo s = v->shard_list[rng_() % v->shard_list.size()];
    std::vector<std::string> inside;
    for (int k = 0; k < FLAGS_keys; ++k) {
      const std::string key = Key(k);
      if (key > s.start && (s.end.empty() || key < s.end)) inside.push_back(key);
    }
    if (inside.empty() || s.primary.empty() || v->shards >= 64) {
      Note(absl::StrFormat("no key inside shard %d's range: split skipped", s.id));
      --out_.faults["split"];
      ++out_.faults["split_skipped"];
      return;
    }
    SplitRequest req;
    req.shard = s.id;
    req.at = inside[rng_() % inside.size()];
    int crash = -1;
    if (rng_() % 3 == 0) {
      const std::vector<std::string> group = s.Replicas();
      crash = NodeIndex(group[rng_() % group.size()]);
    }
    const int64_t crash_ms = static_cast<int64_t>(rng_() % 100);
    const int64_t crash_at = w_->now_ns() + crash_ms * 1'000'000;
    Note(absl::StrFormat("fault split shard %d at %s%s", s.id, req.at,
                         crash < 0 ? ""
                                   : absl::StrCat(", ", w_->node_name(crash), " to crash at +",
                                                  crash_ms, " ms if it is not done")));
    bool crashed = false;
    const bool done = StepCommand("split", crash, crash_at, &crashed, [&] {
      absl::StatusOr<SplitStep> st = StepSplit(admin_.get(), &req);
      return st.ok() ? absl::StatusOr<Said>(Said{st->done, st->said}) : st.status();
    });
    if (!done) Undo([&] { return UndoSplit(admin_.get(), req); });
    if (crashed) RestartAfter(crash, hold);
  }

  // An operator's `cluster merge` (transport/placement/shard_merge.h) of a shard and the one after
  // it, a step every 50 ms for at most 20 s; a third of them with the left shard's primary crashed
  // within 300 ms (restarted `hold` later). A merge left unfinished is called off.
  void MergeShards(int64_t hold) {
    absl::StatusOr<cluster::ClusterView> v = w_->View();
    if (!v.ok() || v->shard_list.size() < 2) {
      Note("one shard: merge skipped");
      --out_.faults["merge"];
      ++out_.faults["merge_skipped"];
      return;
    }
    const size_t i = rng_() % (v->shard_list.size() - 1);  // shard_list is in key order
    MergeRequest req;
    req.a = v->shard_list[i].id;
    req.b = v->shard_list[i + 1].id;
    int crash = -1;
    if (rng_() % 3 == 0 && !v->shard_list[i].primary.empty()) {
      crash = NodeIndex(v->shard_list[i].primary);
    }
    const int64_t crash_ms = static_cast<int64_t>(rng_() % 300);
    const int64_t crash_at = w_->now_ns() + crash_ms * 1'000'000;
    Note(absl::StrFormat("fault merge shards %d and %d%s", req.a, req.b,
                         crash < 0 ? ""
                                   : absl::StrCat(", ", w_->node_name(crash), " to crash at +",
                                                  crash_ms, " ms if it is not done")));
    bool crashed = false;
    const bool done = StepCommand("merge", crash, crash_at, &crashed, [&] {
      absl::StatusOr<MergeStep> st = StepMerge(admin_.get(), &req);
      return st.ok() ? absl::StatusOr<Said>(Said{st->done, st->said}) : st.status();
    });
    if (!done) Undo([&] { return UndoMerge(admin_.get(), req); });
    if (!done && req.moving && req.move.resolved) {
      Undo([&] { return UndoMove(admin_.get(), req.move); });
    }
    if (crashed) RestartAfter(crash, hold);
  }

  // A peer writes where the victim's NIC must refuse, on a path and in a way drawn from the
  // seed (ClusterWorld::RogueWrite): refused the same on both paths, nothing copied.
  void RogueWrite(int victim) {
    // The first node from the victim on that holds a replica (some hold none).
    for (int k = 0; k < w_->nodes(); ++k) {
      const int i = (victim + k) % w_->nodes();
      if (w_->server(i) != nullptr && !w_->server(i)->shards().All().empty()) {
        victim = i;
        break;
      }
    }
    const engine::Path path = rng_() % 2 == 0 ? engine::Path::kOffload : engine::Path::kUnload;
    // Half of them replay keys stolen from the victim node: another client's grant window, or
    // the window its attached primary writes the mirror through.
    static constexpr ClusterWorld::Rogue kKinds[] = {
        ClusterWorld::Rogue::kAcrossEnd, ClusterWorld::Rogue::kUnknownKey,
        ClusterWorld::Rogue::kStolenGrantKey, ClusterWorld::Rogue::kStolenMirrorKey};
    static constexpr const char* kKindNames[] = {"across_end", "unknown_key", "stolen_grant_key",
                                                 "stolen_mirror_key"};
    static constexpr const char* kWhat[] = {"across an arena's end", "under an unknown key",
                                            "with a client's stolen grant key",
                                            "with a primary's stolen mirror key"};
    const size_t k = rng_() % 4;
    const ClusterWorld::Rogue kind = kKinds[k];
    const char* what = kWhat[k];
    engine::Path took = path;
    const absl::Status st = w_->RogueWrite(victim, path, kind, rng_(), &took);
    Note(absl::StrFormat("fault rogue_write %s: %s on the %s path -> %s", w_->node_name(victim),
                         what, engine::PathName(path), st.ToString()));
    if (absl::IsUnavailable(st)) return;
    if (!st.ok()) return void(Fail(absl::StrCat("rogue write ", what, ": ", st.message())));
    ++out_.refused[engine::PathName(took)];
    ++out_.refused[kKindNames[k]];
  }

  void Heal() {
    w_->HealPartitions();
    for (int i = 0; i < w_->nodes(); ++i) {
      w_->CutFromCluster(i, false);
      w_->CutFromMap(i, false);
      w_->SlowCpu(i, 1);
      w_->SlowNetwork(i, absl::ZeroDuration());
      w_->DiskFull(i, false);
      w_->Disarm(i);
      if (w_->server(i) == nullptr) w_->Restart(i);
    }
  }

  ClientOptions ClientOpts() const {
    ClientOptions o;
    o.timeout = absl::Seconds(1);
    o.failover_timeout = absl::Seconds(10);
    o.policy = out_.shape.policy;
    if (FLAGS_inline_bytes > 0) absl::StrAppend(&o.policy, ",inline:", FLAGS_inline_bytes);
    return o;
  }

  std::string Key(int k) const { return absl::StrFormat("k%03d", k); }

  void ClientLoop(int c) {
    std::mt19937_64 rng(seed_ * 1000003 + static_cast<uint64_t>(c));
    w_->Wait([this] { return formed_ || !out_.ok; });
    auto client = w_->Connect(ClientOpts());
    if (!client.ok()) {
      Fail(absl::StrCat("client ", c, " could not connect: ", client.status().ToString()));
    } else {
      std::uniform_int_distribution<int64_t> think(5'000'000, 50'000'000);
      int n = 0;
      while (!workload_done_ && out_.ok) {
        w_->SleepUntil(w_->now_ns() + think(rng));
        if (workload_done_) break;
        const std::string key = Key(static_cast<int>(rng() % FLAGS_keys));
        const uint64_t dice = rng() % 100;
        if (dice < 42) {
          Put(**client, c, key, absl::StrCat("c", c, "-", n++));
        } else if (dice < 80) {
          Get(**client, c, key);
        } else if (dice < 92) {
          Delete(**client, c, key);
        } else {
          Scan(**client, c, static_cast<int>(rng() % FLAGS_keys));
        }
      }
    }
    client = absl::UnavailableError("closed");  // destroys the client inside the run
    --clients_running_;
  }

  // Outcome unknown: the write may or may not have taken effect.
  static bool Unknown(absl::StatusCode code) {
    return code == absl::StatusCode::kUnknown || code == absl::StatusCode::kDeadlineExceeded ||
           code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kCancelled ||
           code == absl::StatusCode::kInternal;
  }

  void Record(KvOp op, const std::string& what, const absl::Status& st) {
    Note(absl::StrFormat("c%d %s -> %s%s", op.client, what,
                         st.ok() ? "ok" : absl::StatusCodeToString(st.code()),
                         op.response_ns ? "" : " (outcome unknown)"));
    history_.push_back(std::move(op));
    CheckInvariants();
  }

  // The engine's invariants are checked as the world runs: a violation fails the run when
  // first seen, near its events in the trace (the engine's log line names the connection).
  void CheckInvariants() {
    const world::SimInvariants::Counts& inv = w_->invariants();
    if (inv.violations() == 0) return;
    Fail(absl::StrCat("engine invariants violated: ", inv.write_violations,
                      " writes completed without their bytes in place (1), ", inv.order_violations,
                      " messages handed over before a write issued ahead of them (2), ",
                      inv.refusal_violations, " writes refused where the NIC accepts them (3)"));
  }

  void Put(Client& client, int c, const std::string& key, const std::string& value) {
    written_[key].insert(value);
    KvOp op{KvOp::kPut, key, value, true, w_->now_ns(), std::nullopt, c};
    const absl::Status st = client.Put(key, value);
    if (st.ok()) {
      op.response_ns = w_->now_ns();
    } else if (!Unknown(st.code())) {
      Note(absl::StrFormat("c%d put %s=%s refused: %s", c, key, value, st.ToString()));
      return;  // refused: nothing applied
    }
    Record(std::move(op), absl::StrCat("put ", key, "=", value), st);
  }

  void Get(Client& client, int c, const std::string& key) {
    KvOp op{KvOp::kGet, key, std::nullopt, true, w_->now_ns(), std::nullopt, c};
    absl::StatusOr<std::string> v = client.Get(key);
    if (!v.ok() && v.status().code() != absl::StatusCode::kNotFound) {
      Note(absl::StrFormat("c%d get %s failed: %s", c, key, v.status().ToString()));
      return;  // a failed read has no effect
    }
    op.response_ns = w_->now_ns();
    if (v.ok()) op.value = *v;
    Record(std::move(op), absl::StrCat("get ", key, " = ", v.ok() ? *v : "(none)"),
           absl::OkStatus());
  }

  void Delete(Client& client, int c, const std::string& key) {
    KvOp op{KvOp::kDelete, key, std::nullopt, true, w_->now_ns(), std::nullopt, c};
    const absl::Status st = client.Delete(key);
    if (st.ok() || st.code() == absl::StatusCode::kNotFound) {
      op.response_ns = w_->now_ns();
      op.found = st.ok();
    } else if (!Unknown(st.code())) {
      Note(absl::StrFormat("c%d delete %s refused: %s", c, key, st.ToString()));
      return;
    }
    Record(std::move(op), absl::StrCat("delete ", key), st);
  }

  // A scan of up to 8 keys from key `first`, across shards. Not in the linearizability check
  // (it covers single keys); checked here: keys in order, in range, and every value one that
  // a PUT of that key wrote (or tried to). A failed scan has no effect.
  void Scan(Client& client, int c, int first) {
    const std::string start = Key(first), end = Key(first + 8);
    absl::StatusOr<ScanPage> page = client.Scan(start, end, 16);
    if (!page.ok()) {
      Note(
          absl::StrFormat("c%d scan [%s, %s) failed: %s", c, start, end, page.status().ToString()));
      return;
    }
    std::string prev;
    for (const auto& [key, value] : page->items) {
      if (key < start || key >= end || (!prev.empty() && key <= prev)) {
        return void(Fail(absl::StrCat("scan [", start, ", ", end, ") returned ", key,
                                      " out of order or range")));
      }
      auto it = written_.find(key);
      if (it == written_.end() || it->second.count(value) == 0) {
        return void(Fail(absl::StrCat("scan [", start, ", ", end, ") returned ", key, " = ", value,
                                      ", never written")));
      }
      prev = key;
    }
    ++scans_;
    Note(absl::StrFormat("c%d scan [%s, %s) -> %d items", c, start, end, page->items.size()));
  }

  // A fresh client reads every key once the cluster healed: part of the checked history.
  void FinalReads() {
    auto client = w_->Connect(ClientOpts());
    if (!client.ok()) {
      return void(
          Fail(absl::StrCat("final reader could not connect: ", client.status().ToString())));
    }
    for (int k = 0; k < FLAGS_keys && out_.ok; ++k) {
      const std::string key = Key(k);
      KvOp op{KvOp::kGet, key, std::nullopt, true, w_->now_ns(), std::nullopt, FLAGS_clients};
      absl::StatusOr<std::string> v = (*client)->Get(key);
      if (!v.ok() && v.status().code() != absl::StatusCode::kNotFound) {
        return void(Fail(
            absl::StrCat("final read of ", key, " failed after healing: ", v.status().ToString())));
      }
      op.response_ns = w_->now_ns();
      if (v.ok()) op.value = *v;
      Record(std::move(op), absl::StrCat("final get ", key, " = ", v.ok() ? *v : "(none)"),
             absl::OkStatus());
    }
  }

  // Under `interval:MS` a power loss may lose the writes acknowledged in the last MS (plus a
  // log round and the step that noticed the sync due): those writes' outcomes become unknown,
  // and reads answered in that window are not evidence (they may have seen a write the loss
  // took back). Everything older must be there: the same checker finds a loss of it.
  std::vector<KvOp> Checkable() const {
    std::vector<KvOp> ops = history_;
    if (!interval_) return ops;
    const int64_t window =
        absl::ToInt64Nanoseconds(*interval_ + 2 * out_.shape.disk_latency) + 2'000'000;
    std::vector<KvOp> kept;
    for (KvOp& op : ops) {
      bool in_window = false;
      for (const int64_t t : lossy_) {
        const int64_t end = op.response_ns.value_or(INT64_MAX);
        in_window |= end > t - window && op.invoke_ns <= t;
      }
      if (!in_window) {
        kept.push_back(std::move(op));
      } else if (op.kind != KvOp::kGet) {
        op.response_ns.reset();  // may or may not have survived
        kept.push_back(std::move(op));
      }
    }
    return kept;
  }

  void CheckHistory() {
    const absl::Status st = testing::CheckLinearizable(Checkable());
    if (st.ok()) return;
    // The checker names the key first: "key 'k007' ...".
    const std::string& m = std::string(st.message());
    const size_t q = m.find('\'');
    if (q != std::string::npos) {
      const size_t e = m.find('\'', q + 1);
      if (e != std::string::npos) out_.failing_key = m.substr(q + 1, e - q - 1);
    }
    Fail(absl::StrCat("history not linearizable: ", st.message()));
  }

  struct Item {
    uint64_t version;
    std::string bytes;
    bool operator==(const Item& o) const { return version == o.version && bytes == o.bytes; }
  };
  static std::map<std::string, Item> Contents(server::ShardReplica& r) {
    std::map<std::string, Item> out;
    for (const server::KvStore::Mutation& m : r.store().Snapshot()) {
      out[m.key] = Item{m.version, std::string(r.store().arena() + m.slot.offset, m.size)};
    }
    return out;
  }

  void CheckReplicas() {
    absl::StatusOr<cluster::ClusterView> v = View();
    if (!v.ok()) return void(Fail("reading the map: " + v.status().ToString()));
    for (const cluster::ShardInfo& s : v->shard_list) {
      std::vector<std::string> group = s.backups;
      group.insert(group.begin(), s.primary);
      std::optional<std::map<std::string, Item>> reference;
      for (int i = 0; i < w_->nodes(); ++i) {
        server::KvServer* srv = w_->server(i);
        if (srv == nullptr) return void(Fail(w_->node_name(i) + " is down after healing"));
        std::shared_ptr<server::ShardReplica> r = srv->shards().Get(s.id);
        const bool member = std::find(group.begin(), group.end(), w_->node_name(i)) != group.end();
        if (!member) {
          if (r != nullptr) {
            return void(Fail(absl::StrCat(w_->node_name(i), " holds a replica of shard ", s.id,
                                          " outside its group")));
          }
          continue;
        }
        if (r == nullptr) {
          return void(Fail(
              absl::StrCat(w_->node_name(i), " is in shard ", s.id, "'s group with no replica")));
        }
        std::map<std::string, Item> items = Contents(*r);
        if (!reference) {
          reference = std::move(items);
        } else if (items != *reference) {
          std::string first = "extra keys";
          for (const auto& [key, item] : *reference) {
            auto it = items.find(key);
            if (it == items.end()) {
              first = absl::StrCat(key, " missing");
            } else if (!(it->second == item)) {
              first = absl::StrCat(key, " = ", it->second.bytes, " v", it->second.version,
                                   " where the primary has ", item.bytes, " v", item.version);
            } else {
              continue;
            }
            break;
          }
          return void(Fail(absl::StrCat("shard ", s.id, ": ", w_->node_name(i), " holds ",
                                        items.size(), " keys that differ from ", s.primary, "'s ",
                                        reference->size(), " (first: ", first, ")")));
        }
      }
      Note(absl::StrFormat("shard %d: %d replicas agree on %d keys", s.id, group.size(),
                           reference ? reference->size() : 0));
    }
  }

  void CheckLeaks() {
    // Clients are gone: their grants are returned and their connections reaped (the reaper
    // runs every millisecond of virtual time), leaving only the replication links.
    auto clean = [this](std::string* why) {
      size_t links = 0, conns = 0;
      for (int i = 0; i < w_->nodes(); ++i) {
        server::KvServer* srv = w_->server(i);
        conns += srv->connections() + srv->half_open();
        for (const auto& r : srv->shards().All()) {
          links += r->LinkNodes().size();
          const server::KvStore::Stats st = r->store().stats();
          if (st.grants_outstanding != 0) {
            *why = absl::StrCat(w_->node_name(i), " shard ", r->id(), ": ", st.grants_outstanding,
                                " slot grants outstanding");
            return false;
          }
          // With no grant out, the arena holds the live values' slots and nothing else.
          uint64_t live = 0;
          for (const server::KvStore::Mutation& m : r->store().Snapshot()) {
            live += m.slot.capacity;
          }
          if (st.arena_used_bytes != live) {
            *why = absl::StrCat(w_->node_name(i), " shard ", r->id(), ": ", st.arena_used_bytes,
                                " arena bytes in use, ", live, " of them live values");
            return false;
          }
        }
      }
      if (conns != links) {
        *why = absl::StrCat(conns, " connections open on the nodes, ", links,
                            " replication links; by node (connections/links out):");
        for (int i = 0; i < w_->nodes(); ++i) {
          server::KvServer* srv = w_->server(i);
          size_t out = 0;
          for (const auto& r : srv->shards().All()) out += r->LinkNodes().size();
          absl::StrAppend(why, " ", w_->node_name(i), " ", srv->connections(), "+",
                          srv->half_open(), "/", out);
        }
        return false;
      }
      return true;
    };
    std::string why;
    if (!WaitFor([&] { return clean(&why); }, 10 * kSecond)) {
      Fail("leak after every client left: " + why);
    }
  }

  const uint64_t seed_;
  std::mt19937_64 rng_;  // the director's; clients have their own
  std::unique_ptr<ClusterWorld> world_;
  ClusterWorld* w_ = nullptr;                         // world_
  std::unique_ptr<cluster::MemoryClusterMap> admin_;  // the operator's (MoveRole)
  Outcome out_;
  bool stalled_ = false;
  bool formed_ = false;
  bool workload_done_ = false;
  int clients_running_ = 0;
  std::vector<KvOp> history_;
  // When a disk lost its unsynced writes (a power loss; a compaction crash with one).
  std::vector<int64_t> lossy_;
  // --fsync=interval:MS's interval (the history check allows for it; see Checkable).
  std::optional<absl::Duration> interval_;
  std::map<std::string, std::set<std::string>> written_;  // every value a PUT tried, by key
  size_t scans_ = 0;
  std::vector<std::pair<int64_t, std::string>> events_;
  uint64_t hash_ = 0xcbf29ce484222325ULL;
};

std::string Command(uint64_t seed) {
  return absl::StrCat("bazel run -c opt //tests/sim:cluster_sim -- --seed=", seed,
                      " --workload_seconds=", FLAGS_workload_seconds, " --clients=", FLAGS_clients,
                      " --keys=", FLAGS_keys, FLAGS_buggify ? "" : " --buggify=false",
                      FLAGS_durable ? absl::StrCat(" --durable --fsync=", FLAGS_fsync) : "",
                      " --trace");
}

// Parses "1..100,216": ranges A..B (inclusive, A <= B) and single seeds, in order.
bool ParseSeeds(absl::string_view text, std::vector<uint64_t>* seeds) {
  constexpr uint64_t kMaxSeeds = 1000000;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    std::vector<absl::string_view> ab = absl::StrSplit(item, "..");
    uint64_t a = 0, b = 0;
    if (ab.size() == 1) {
      if (!absl::SimpleAtoi(ab[0], &a)) return false;
      b = a;
    } else if (ab.size() != 2 || !absl::SimpleAtoi(ab[0], &a) || !absl::SimpleAtoi(ab[1], &b) ||
               a > b) {
      return false;
    }
    if (b - a >= kMaxSeeds - seeds->size()) return false;
    for (uint64_t seed = a; seed <= b; ++seed) seeds->push_back(seed);
  }
  return true;
}

int Main(int argc, char** argv) {
  gflags::SetUsageMessage("whole-cluster deterministic simulation with fault injection");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  if (argc > 1) {
    std::fprintf(stderr, "cluster_sim: unexpected argument '%s'\n", argv[1]);
    return 2;
  }
  if (FLAGS_clients < 1 || FLAGS_clients > 16 || FLAGS_keys < 1 || FLAGS_keys > 1000 ||
      !(FLAGS_workload_seconds > 0 && FLAGS_workload_seconds <= 3600)) {
    std::fprintf(stderr,
                 "cluster_sim: --clients must be in 1..16, --keys in 1..1000, "
                 "--workload_seconds in (0, 3600]\n");
    return 2;
  }
  if (FLAGS_inline_bytes > 4096) {
    std::fprintf(stderr, "cluster_sim: --inline_bytes must be in 0..4096\n");
    return 2;
  }
  if (FLAGS_lost_answers && !FLAGS_moves) {
    std::fprintf(stderr, "cluster_sim: --lost_answers needs --moves (it acts during moves)\n");
    return 2;
  }
  if (absl::StatusOr<unloadkv::server::FsyncPolicy> p =
          unloadkv::server::FsyncPolicy::Parse(FLAGS_fsync);
      !p.ok()) {
    std::fprintf(stderr, "cluster_sim: %s\n", std::string(p.status().message()).c_str());
    return 2;
  }
  std::vector<uint64_t> seeds = {FLAGS_seed};
  if (!FLAGS_seeds.empty()) {
    seeds.clear();
    if (!ParseSeeds(FLAGS_seeds, &seeds)) {
      std::fprintf(stderr,
                   "cluster_sim: --seeds must be ranges A..B (A <= B) or seeds, comma-separated, "
                   "a million at most (got '%s')\n",
                   FLAGS_seeds.c_str());
      return 2;
    }
  }
  const bool range = seeds.size() > 1;
  std::map<std::string, int> faults;
  std::map<std::string, int> buggify_runs;  // runs in which each fault point fired
  std::vector<uint64_t> failed;
  int64_t sim_ns = 0;
  double real_s = 0;
  size_t ops = 0, scans = 0;
  world::SimInvariants::Counts inv;    // summed over the runs
  std::map<std::string, int> refused;  // rogue writes refused as they must be, by path
  int auto_shards_added = 0;
  const auto start = std::chrono::steady_clock::now();
  for (const uint64_t seed : seeds) {
    // Kept after a stall: its participants are blocked and the process must end.
    auto* run = new SimRun(seed);
    SetLogSink(&SimRun::LogToTrace, run);
    const Outcome out = run->Go();
    SetLogSink(nullptr, nullptr);
    for (const auto& [k, n] : out.faults) faults[k] += n;
    auto_shards_added += out.auto_shards_added;
    for (const auto& [site, n] : out.buggify) ++buggify_runs[site];
    for (const auto& [path, n] : out.refused) refused[path] += n;
    sim_ns += out.sim_ns;
    real_s += out.real_s;
    ops += out.ops;
    scans += out.scans;
    inv.writes_verified += out.invariants.writes_verified;
    inv.messages_checked += out.invariants.messages_checked;
    inv.writes_before_checked += out.invariants.writes_before_checked;
    inv.refusals_checked += out.invariants.refusals_checked;
    inv.overwritten += out.invariants.overwritten;
    std::printf(
        "seed %" PRIu64
        ": %s  %d nodes, %d shards, %s; %zu ops, %d faults, %.1f s "
        "simulated in %.2f s; trace %016" PRIx64 "\n",
        seed, out.ok ? "ok  " : "FAIL", out.shape.nodes, out.shape.shards, out.shape.policy.c_str(),
        out.ops,
        [&] {
          int n = 0;
          for (const auto& [k, c] : out.faults) n += c;
          return n;
        }(),
        out.sim_ns / 1e9, out.real_s, out.trace_hash);
    std::fflush(stdout);
    if (!out.ok) {
      failed.push_back(seed);
      std::printf("  failure: %s\n  replay: %s\n", out.failure.c_str(), Command(seed).c_str());
      if (FLAGS_trace) run->PrintTrace(2 * kSecond);
    } else if (FLAGS_trace) {
      run->PrintTrace(0);
    }
    if (run->stalled()) {
      std::printf("  the world stalled: stopping here\n");
      std::fflush(stdout);
      std::_Exit(1);
    }
    delete run;
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (range) {
    std::string kinds;
    for (const auto& [k, n] : faults) absl::StrAppend(&kinds, kinds.empty() ? "" : ", ", k, " ", n);
    std::printf("\n%zu runs, %zu failed%s; %zu ops, %zu scans; faults: %s\n", seeds.size(),
                failed.size(), failed.empty() ? "" : " (seeds listed above)", ops, scans,
                kinds.empty() ? "none" : kinds.c_str());
    if (FLAGS_placement) {
      std::printf("automatic placement: %d shards added by the placer's splits (net of merges)\n",
                  auto_shards_added);
    }
    std::string points;
    for (const auto& [site, n] : buggify_runs) {
      absl::StrAppend(&points, points.empty() ? "" : "; ", site, " (", n, " runs)");
    }
    std::printf("fault points fired: %s\n", points.empty() ? "none" : points.c_str());
    std::printf(
        "engine invariants checked: %" PRIu64 " writes in place when they completed (1), %" PRIu64
        " messages handed over after the %" PRIu64
        " unfinished writes issued before them (2), %" PRIu64
        " refusals where the NIC refuses (3); rogue writes refused as the NIC would: offload %d, "
        "unload %d (across an arena's end %d, unknown key %d, stolen grant key %d, stolen mirror "
        "key %d); %" PRIu64 " checks skipped (another connection wrote there since)\n",
        inv.writes_verified, inv.messages_checked, inv.writes_before_checked, inv.refusals_checked,
        refused["offload"], refused["unload"], refused["across_end"], refused["unknown_key"],
        refused["stolen_grant_key"], refused["stolen_mirror_key"], inv.overwritten);
    std::printf(
        "simulated %.1f s of cluster time in %.1f s real (%.0fx): one real hour covers "
        "%.1f simulated cluster-hours\n",
        sim_ns / 1e9, wall, sim_ns / 1e9 / wall, sim_ns / 1e9 / wall);
  }
  return failed.empty() ? 0 : 1;
}

}  // namespace
}  // namespace unloadkv

int main(int argc, char** argv) { return unloadkv::Main(argc, argv); }
