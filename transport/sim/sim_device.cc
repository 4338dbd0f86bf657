// Control path of the simulated fabric: the event loop, nodes, and the rnic handles.
#include <algorithm>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "transport/rnic/backend_objects.h"
#include "transport/rnic/request_checks.h"
#include "transport/sim/datapath.h"
#include "transport/sim/fabric.h"
#include "transport/sim/node.h"
#include "transport/sim/windows.h"

namespace unloadkv::sim {

// ---------------------------------------------------------------------------- Fabric

Fabric::Fabric() = default;
Fabric::~Fabric() = default;

void Fabric::Schedule(int64_t at_ns, std::function<void()> fn) {
  events_.push(Event{std::max(at_ns, now_ns_), next_seq_++, std::move(fn)});
}

void Fabric::SetLinkCut(int a, int b, bool cut) {
  const std::pair<int, int> link(std::min(a, b), std::max(a, b));
  if (cut) {
    cut_links_.insert(link);
  } else {
    cut_links_.erase(link);
  }
}

bool Fabric::LinkCut(int a, int b) const {
  return !cut_links_.empty() && cut_links_.count({std::min(a, b), std::max(a, b)}) > 0;
}

void Fabric::SetJitter(int64_t max_ns, uint64_t seed) {
  jitter_max_ns_ = std::max<int64_t>(0, max_ns);
  jitter_rng_.seed(seed);
}

void Fabric::SetNodeDelay(int id, int64_t max_ns) {
  if (max_ns > 0) {
    node_delay_ns_[id] = max_ns;
  } else {
    node_delay_ns_.erase(id);
  }
}

int64_t Fabric::DrawDelay(int from, int to) {
  int64_t max_ns = jitter_max_ns_;
  if (!node_delay_ns_.empty()) {
    for (int id : {from, to}) {
      auto it = node_delay_ns_.find(id);
      if (it != node_delay_ns_.end()) max_ns += it->second;
    }
  }
  if (max_ns == 0) return 0;
  return static_cast<int64_t>(jitter_rng_() % static_cast<uint64_t>(max_ns + 1));
}

void Fabric::SetCpuSlowdown(int id, int factor) {
  if (NodeState* n = node(id)) n->cpu_slowdown = std::max(1, factor);
}

NodeState* Fabric::node(int id) const {
  if (id < 0 || id >= static_cast<int>(nodes_.size())) return nullptr;
  return nodes_[id].get();
}

int Fabric::Run(int64_t max_wait_ns) {
  constexpr int64_t kFar = std::numeric_limits<int64_t>::max() / 4;
  const int64_t limit = max_wait_ns >= kFar - now_ns_ ? kFar : now_ns_ + max_wait_ns;
  const uint64_t before = completions_added_;
  int ran = 0;
  while (!events_.empty() && events_.top().at_ns <= limit) {
    const int64_t t = events_.top().at_ns;
    now_ns_ = t;
    while (!events_.empty() && events_.top().at_ns == t) {
      // Copy out before pop: the handler may schedule more events.
      std::function<void()> fn = std::move(const_cast<Event&>(events_.top()).fn);
      events_.pop();
      fn();
      ++ran;
    }
    if (completions_added_ != before) return ran;
  }
  if (limit < kFar) now_ns_ = std::max(now_ns_, limit);  // waiting lets time pass
  return ran;
}

// ---------------------------------------------------------------------------- handles

namespace {

class SimMemoryRegion : public rnic::MemoryRegion {
 public:
  SimMemoryRegion(const Description& d, NodeState* node) : MemoryRegion(d), node_(node) {}
  ~SimMemoryRegion() override {
    node_->regions.Erase(rkey());
    node_->paging.erase(rkey());
    UnbindWindowsOfRegion(*node_, rkey());  // its windows go with it
  }

 private:
  NodeState* node_;
};

class SimMemoryWindow : public rnic::MemoryWindow {
 public:
  explicit SimMemoryWindow(NodeState* node) : node_(node) { node_->windows[this] = &state_; }
  ~SimMemoryWindow() override {
    if (state_.key != 0) UnbindWindow(*node_, &state_);
    node_->windows.erase(this);
  }
  uint32_t rkey() const override { return state_.last_key; }

 private:
  NodeState* node_;
  SimWindowState state_;
};

class SimCompletionQueue : public rnic::CompletionQueue {
 public:
  SimCompletionQueue(Fabric* f, NodeState* node, std::shared_ptr<SimCqState> state)
      : f_(f), node_(node), state_(std::move(state)) {}
  ~SimCompletionQueue() override { state_->alive = false; }

  // Polling charges the modeled CPU: a fixed cost per completion, plus, for a staged write
  // (a WRITE_WITH_IMM's receive), the copy the unload worker makes of byte_len bytes to a
  // random destination, and for a message the cost of handling it.
  //
  // A core still busy with earlier work cannot poll: Poll returns nothing and the fabric wakes
  // the caller when the core is free. Under load, completions therefore pile up and are
  // handled in batches, as on a real busy core.
  int Poll(absl::Span<rnic::WorkCompletion> out) override {
    const int64_t free = node_->core_free[state_->core % node_->core_free.size()];
    if (free > f_->now_ns()) {
      if (wake_at_ != free) {
        wake_at_ = free;
        f_->Schedule(free, [f = f_] { f->CountCompletion(); });
      }
      return 0;
    }
    if (state_->queue.empty()) f_->Run(0);
    size_t n = std::min(out.size(), state_->queue.size());
    const CpuModel& cpu = node_->model.cpu;
    for (size_t i = 0; i < n; ++i) {
      out[i] = state_->queue.front();
      state_->queue.pop_front();
      int64_t cost = cpu.poll_ns;
      if (out[i].status == rnic::WcStatus::kSuccess) {
        if (out[i].opcode == rnic::WcOpcode::kRecvRdmaWithImm) {
          cost += cpu.random_access_ns + TransferNs(out[i].byte_len, cpu.copy_gbps);
        } else if (out[i].opcode == rnic::WcOpcode::kRecv) {
          cost += cpu.message_ns;
        }
      }
      ChargeCpu(*f_, *node_, state_->core, cost);
    }
    return static_cast<int>(n);
  }
  void RequestNotify() override {}
  int notify_fd() const override { return -1; }
  const std::shared_ptr<SimCqState>& state() const { return state_; }

 private:
  Fabric* f_;
  NodeState* node_;
  std::shared_ptr<SimCqState> state_;
  int64_t wake_at_ = -1;
};

class SimSharedReceiveQueue : public rnic::SharedReceiveQueue {
 public:
  SimSharedReceiveQueue(Fabric* f, NodeState* node, std::shared_ptr<SimSrqState> state)
      : f_(f), node_(node), state_(std::move(state)) {}
  using rnic::SharedReceiveQueue::PostRecv;
  absl::Status PostRecv(absl::Span<const rnic::RecvWorkRequest> wrs) override {
    return PostSrqRecv(*f_, *node_, *state_, wrs);
  }
  absl::Status ArmLimit(uint32_t limit) override { return state_->state.ArmLimit(limit); }
  bool TakeLimitEvent() override { return state_->state.TakeLimitEvent(); }
  const std::shared_ptr<SimSrqState>& state() const { return state_; }
  const NodeState* node() const { return node_; }

 private:
  Fabric* f_;
  NodeState* node_;
  std::shared_ptr<SimSrqState> state_;
};

class SimQueuePair : public rnic::QueuePair {
 public:
  SimQueuePair(Fabric* f, NodeState* node, SimQpState* qp) : f_(f), node_(node), qp_(qp) {}
  ~SimQueuePair() override {
    FailQp(*f_, *node_, *qp_, rnic::WcStatus::kFlushed, /*tell_peer=*/true);
    if (qp_->srq != nullptr) qp_->srq->qps.erase(qp_->qp_num);
    node_->qps.erase(qp_->qp_num);
  }
  uint32_t qp_num() const override { return qp_->qp_num; }
  rnic::QpState state() const override { return qp_->state; }
  rnic::QpAttributes local_attributes() const override {
    return rnic::QpAttributes{"sim", absl::StrCat("node:", node_->id), qp_->qp_num, 0};
  }
  absl::Status Connect(const rnic::QpAttributes& remote) override {
    if (remote.transport != "sim") {
      return absl::InvalidArgumentError(absl::StrCat("Connect: peer uses transport '",
                                                     remote.transport, "', this device is 'sim'"));
    }
    absl::string_view addr = remote.address;
    int node;
    if (!absl::ConsumePrefix(&addr, "node:") || !absl::SimpleAtoi(addr, &node) ||
        f_->node(node) == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("Connect: '", remote.address, "' names no node of this fabric"));
    }
    if (qp_->state != rnic::QpState::kReset) {
      return absl::FailedPreconditionError("Connect: queue pair is not in the reset state");
    }
    qp_->peer_node = node;
    qp_->peer_qp = remote.qp_num;
    qp_->state = rnic::QpState::kReadyToSend;
    // Requests that arrived before Connect from another QP than the peer are refused.
    Drain(*f_, *node_, *qp_);
    return absl::OkStatus();
  }
  absl::Status PostSend(absl::Span<const rnic::SendWorkRequest> wrs) override {
    return sim::PostSend(*f_, *node_, *qp_, wrs);
  }
  absl::Status PostRecv(absl::Span<const rnic::RecvWorkRequest> wrs) override {
    return sim::PostRecv(*f_, *node_, *qp_, wrs);
  }
  void SetError() override {
    FailQp(*f_, *node_, *qp_, rnic::WcStatus::kFlushed, /*tell_peer=*/true);
  }

 private:
  Fabric* f_;
  NodeState* node_;
  SimQpState* qp_;  // owned by node_->qps until this handle is destroyed
};

class SimDevice : public rnic::Device {
 public:
  SimDevice(Fabric* f, NodeState* node) : f_(f), node_(node) {}
  ~SimDevice() override { node_->alive = false; }

  std::string transport() const override { return "sim"; }
  rnic::DeviceLimits limits() const override { return rnic::DeviceLimits(); }
  // The modeled MTT cache: full once it holds mtt_cache_entries translations.
  rnic::TranslationCacheState translation_cache_state() const override {
    if (node_->mtt.capacity() == 0) return rnic::TranslationCacheState::kUnknown;
    return node_->mtt.size() >= node_->mtt.capacity() ? rnic::TranslationCacheState::kFull
                                                      : rnic::TranslationCacheState::kWarming;
  }
  absl::StatusOr<std::unique_ptr<rnic::MemoryRegion>> RegisterMemory(void* addr, size_t length,
                                                                     uint32_t access) override {
    if (absl::Status st = rnic::CheckRegistration(addr, length, access); !st.ok()) return st;
    const uint32_t key = node_->keys.Next([&](uint32_t k) { return f_->KeyInUse(k); });
    size_t page = (access & rnic::kHugePageBacked) ? size_t{2} << 20 : 4096;
    access &= ~uint32_t{rnic::kHugePageBacked};
    node_->regions.Insert(key, {reinterpret_cast<uint64_t>(addr), length, access});
    node_->paging[key] = {page, reinterpret_cast<uint64_t>(addr)};
    rnic::MemoryRegion::Description d{addr, length, key, key, access, page};
    return std::unique_ptr<rnic::MemoryRegion>(new SimMemoryRegion(d, node_));
  }
  absl::StatusOr<std::unique_ptr<rnic::MemoryWindow>> AllocateWindow() override {
    return std::unique_ptr<rnic::MemoryWindow>(new SimMemoryWindow(node_));
  }
  absl::StatusOr<std::unique_ptr<rnic::CompletionQueue>> CreateCompletionQueue(
      int capacity) override {
    if (capacity <= 0) {
      return absl::InvalidArgumentError("CreateCompletionQueue: capacity must be positive");
    }
    auto state = std::make_shared<SimCqState>();
    state->core = node_->next_core++ % std::max(1, node_->model.cpu.cores);
    return std::unique_ptr<rnic::CompletionQueue>(
        new SimCompletionQueue(f_, node_, std::move(state)));
  }
  absl::StatusOr<std::unique_ptr<rnic::QueuePair>> CreateQueuePair(
      const rnic::QpConfig& config) override {
    auto objects = rnic::BackendQpObjects<SimCompletionQueue, SimSharedReceiveQueue>(config, "sim");
    if (!objects.ok()) return objects.status();
    SimCompletionQueue* scq = objects->send_cq;
    SimCompletionQueue* rcq = objects->recv_cq;
    if (absl::Status st = rnic::CheckQpConfig(config, limits()); !st.ok()) return st;
    std::shared_ptr<SimSrqState> srq;
    if (objects->srq != nullptr) {
      if (objects->srq->node() != node_) {
        return absl::InvalidArgumentError(
            "CreateQueuePair: srq must be a shared receive queue of this device");
      }
      srq = objects->srq->state();
    }
    auto qp = std::make_unique<SimQpState>();
    qp->qp_num = node_->next_qp++;
    if (srq != nullptr) srq->qps.insert(qp->qp_num);
    qp->srq = std::move(srq);
    qp->node = node_->id;
    qp->config = config;
    qp->send_cq_ref = scq->state();
    qp->recv_cq_ref = rcq->state();
    qp->send_cq = qp->send_cq_ref.get();
    qp->recv_cq = qp->recv_cq_ref.get();
    SimQpState* raw = qp.get();
    node_->qps[raw->qp_num] = std::move(qp);
    return std::unique_ptr<rnic::QueuePair>(new SimQueuePair(f_, node_, raw));
  }
  absl::StatusOr<std::unique_ptr<rnic::SharedReceiveQueue>> CreateSharedReceiveQueue(
      const rnic::SrqConfig& config) override {
    if (absl::Status st = rnic::CheckSrqConfig(config, limits()); !st.ok()) return st;
    return std::unique_ptr<rnic::SharedReceiveQueue>(
        new SimSharedReceiveQueue(f_, node_, std::make_shared<SimSrqState>(config)));
  }
  int Progress(absl::Duration max_wait) override {
    return f_->Run(max_wait == absl::InfiniteDuration()
                       ? std::numeric_limits<int64_t>::max()
                       : std::max<int64_t>(0, absl::ToInt64Nanoseconds(max_wait)));
  }
  const Clock& clock() const override { return f_->clock(); }
  NodeState* node() const { return node_; }

 private:
  Fabric* f_;
  NodeState* node_;
};

}  // namespace

std::unique_ptr<rnic::Device> Fabric::CreateDevice(const NodeModel& model) {
  auto node = std::make_unique<NodeState>();
  node->id = static_cast<int>(nodes_.size());
  node->model = model;
  node->keys = rnic::KeySource::Seeded(key_seed_ * 0x9e3779b97f4a7c15ULL + nodes_.size());
  node->mpt = LruSet(model.nic.mpt_cache_entries);
  node->mtt = LruSet(model.nic.mtt_cache_entries);
  node->translation_unit_free.assign(std::max(1, model.nic.translation_units), 0);
  node->core_free.assign(std::max(1, model.cpu.cores), 0);
  NodeState* raw = node.get();
  nodes_.push_back(std::move(node));
  return std::make_unique<SimDevice>(this, raw);
}

NodeStats StatsOf(const rnic::Device& device) {
  auto* d = dynamic_cast<const SimDevice*>(&device);
  return d == nullptr ? NodeStats() : d->node()->stats;
}

bool Fabric::KeyInUse(uint32_t key) const {
  for (const auto& n : nodes_) {
    if (n->regions.Contains(key)) return true;
  }
  return false;
}

bool Mapped(const Fabric& fabric, uint64_t addr, uint64_t length) {
  for (int id = 0;; ++id) {
    const NodeState* n = fabric.node(id);
    if (n == nullptr) return false;
    if (n->alive && n->regions.Covers(addr, length)) return true;
  }
}

bool RemoteWritable(const Fabric& fabric, uint32_t rkey, uint64_t addr, uint64_t length,
                    uint32_t via_qp) {
  for (int id = 0;; ++id) {  // keys are unique across the fabric's nodes
    const NodeState* n = fabric.node(id);
    if (n == nullptr) return false;
    const rnic::RegionEntry* e = n->regions.Find(rkey);
    if (e == nullptr) continue;
    return n->alive &&
           n->regions.Check(rkey, addr, length, rnic::kRemoteWrite,
                            e->is_window() && via_qp == kAnyQp ? e->bound_to : via_qp) ==
               rnic::AccessVerdict::kOk;
  }
}

int NodeIdOf(const rnic::Device& device) {
  auto* d = dynamic_cast<const SimDevice*>(&device);
  return d == nullptr ? -1 : d->node()->id;
}

}  // namespace unloadkv::sim
