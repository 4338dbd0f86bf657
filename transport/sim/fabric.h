// The simulated fabric: a deterministic discrete-event world of nodes, each with a modeled RNIC
// and modeled CPU cores (model.h), all in virtual time and one thread.
//
//   sim::Fabric fabric;
//   auto a = fabric.CreateDevice(), b = fabric.CreateDevice();   // rnic::Device each
//   ... connect QPs, post work; waiting on a CQ (rnic::WaitForCompletions) or calling
//   Progress() runs the events and advances virtual time.
//
// Thread-safety: none. A fabric and everything created from it belong to one thread.
// Lifetime: the fabric must outlive its devices and everything they created.
#ifndef UNLOADKV_TRANSPORT_SIM_FABRIC_H_
#define UNLOADKV_TRANSPORT_SIM_FABRIC_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <queue>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "transport/base/clock.h"
#include "transport/rnic/device.h"
#include "transport/sim/model.h"

namespace unloadkv::sim {

struct NodeState;

// Counters of one node's modeled NIC and CPU (cumulative).
struct NodeStats {
  uint64_t mpt_hits = 0, mpt_misses = 0;
  uint64_t mtt_hits = 0, mtt_misses = 0;
  uint64_t cpu_busy_ns = 0;  // summed over cores
};

class Fabric {
 public:
  Fabric();
  ~Fabric();
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;

  // A new node with its own NIC and CPU, as an rnic::Device.
  std::unique_ptr<rnic::Device> CreateDevice(const NodeModel& model = NodeModel());

  // Seeds the memory keys of the nodes created from now on (rnic::KeySource::Seeded): the
  // same seed gives the same keys. Default 1.
  void SetKeySeed(uint64_t seed) { key_seed_ = seed; }
  // A region or window of some node holds `key`.
  bool KeyInUse(uint32_t key) const;

  // Virtual time since the fabric was created.
  int64_t now_ns() const { return now_ns_; }
  const Clock& clock() const { return clock_; }

  // Runs events in time order until a completion is added to some CQ (the whole instant of it
  // is finished), or virtual time reaches now + max_wait_ns. Virtual time then stands at that
  // instant, or at now + max_wait_ns if nothing completed. Returns the events run.
  int Run(int64_t max_wait_ns);
  bool idle() const { return events_.empty(); }

  // Schedules `fn` at virtual time `at_ns` (not before now). Events of one instant run in the
  // order they were scheduled.
  void Schedule(int64_t at_ns, std::function<void()> fn);

  NodeState* node(int id) const;
  uint64_t completions_added() const { return completions_added_; }
  void CountCompletion() { ++completions_added_; }

  // Faults, for simulations (deterministic like everything else):
  // While cut, what nodes `a` and `b` send each other is lost, both ways: a QP whose request
  // or response was lost sends nothing more and fails with RETRY_EXCEEDED after the transport
  // timeout, as RC's retries run out; its peer finds out when it next sends.
  void SetLinkCut(int a, int b, bool cut);
  bool LinkCut(int a, int b) const;
  // Every request leaves up to `max_ns` later than the model says (uniform, drawn from
  // `seed`), never ahead of an earlier request of its QP: connections overtake each other,
  // a QP's order holds. 0: off (the default).
  void SetJitter(int64_t max_ns, uint64_t seed);
  // Every request node `id` sends or receives leaves up to `max_ns` later still (uniform,
  // drawn with the jitter): a congested link, where requests wait milliseconds and overtake
  // those of other QPs. 0: off (the default).
  void SetNodeDelay(int id, int64_t max_ns);
  // How much later than the model a request from node `from` to node `to` leaves: the jitter
  // and both nodes' delays, drawn.
  int64_t DrawDelay(int from, int to);
  // Multiplies node `id`'s CPU costs (polling, messages, staged copies) by `factor` >= 1: a
  // slow or overloaded host, whose unload workers fall behind.
  void SetCpuSlowdown(int id, int factor);

 private:
  class VirtualClock : public Clock {
   public:
    explicit VirtualClock(const Fabric* f) : f_(f) {}
    absl::Time Now() const override { return absl::UnixEpoch() + absl::Nanoseconds(f_->now_ns_); }

   private:
    const Fabric* f_;
  };
  struct Event {
    int64_t at_ns;
    uint64_t seq;
    std::function<void()> fn;
    bool operator>(const Event& o) const {
      return at_ns != o.at_ns ? at_ns > o.at_ns : seq > o.seq;
    }
  };

  int64_t now_ns_ = 0;
  uint64_t next_seq_ = 0;
  uint64_t completions_added_ = 0;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  std::vector<std::unique_ptr<NodeState>> nodes_;
  std::set<std::pair<int, int>> cut_links_;  // (smaller id, larger id)
  int64_t jitter_max_ns_ = 0;
  std::mt19937_64 jitter_rng_;
  std::map<int, int64_t> node_delay_ns_;  // SetNodeDelay, nodes with one only
  uint64_t key_seed_ = 1;
  VirtualClock clock_{this};
};

// Statistics of the node behind a device created by Fabric::CreateDevice.
NodeStats StatsOf(const rnic::Device& device);
// The fabric node id of such a device (-1 for any other device).
int NodeIdOf(const rnic::Device& device);
// Whether [addr, addr + length) lies in a region, or a bound window, registered under `rkey`
// for remote writes on a live node of `fabric`: memory a check may read (it is mapped while
// registered). A window's key counts only through the QP `via_qp` of its node it is bound to
// (kAnyQp: through whichever). Keys are unique across a fabric's nodes.
inline constexpr uint32_t kAnyQp = 0xffffffff;
// Whether [addr, addr + length) lies inside a region (not a window) of a live node: memory a
// check may read, whatever key wrote it.
bool Mapped(const Fabric& fabric, uint64_t addr, uint64_t length);
bool RemoteWritable(const Fabric& fabric, uint32_t rkey, uint64_t addr, uint64_t length,
                    uint32_t via_qp = kAnyQp);

}  // namespace unloadkv::sim

#endif  // UNLOADKV_TRANSPORT_SIM_FABRIC_H_
