// Memory windows of the simulated RNIC (rnic/memory_window.h). A bind or invalidation takes
// effect when posted, and completes, in send-queue order, when the modeled NIC has done it:
// the NIC fetches the work request (a PCIe round trip, as for any request not written inline)
// and writes the window's context to host memory (half a round trip, a posted write), then the
// completion (half a round trip). No measured per-bind latency was found to calibrate against,
// so the model charges what the mechanism needs from the PCIe figures already calibrated
// (docs/sim-model.md). The bound window's context enters the NIC's MPT cache; a WRITE through
// it then needs the window's context (MPT, by window key) and its region's translations (MTT,
// by the region's key), as on hardware, where a window shares its region's translation table.
#include "transport/sim/windows.h"

#include <algorithm>
#include <vector>

#include "transport/sim/datapath.h"

namespace unloadkv::sim {
namespace {

rnic::WcStatus Bind(const Fabric& f, NodeState& n, SimQpState& qp, const rnic::WindowBind& b) {
  auto wit = n.windows.find(b.window);
  if (wit == n.windows.end()) return rnic::WcStatus::kWindowBindError;  // another device's
  SimWindowState* w = wit->second;
  if (w->key != 0) return rnic::WcStatus::kWindowBindError;
  const uint32_t region_key = b.region->lkey();
  if (!n.regions.CanBind(region_key, b.access, b.addr, b.length)) {
    return rnic::WcStatus::kWindowBindError;
  }
  const uint32_t key = n.keys.Next([&](uint32_t k) { return f.KeyInUse(k); });
  n.regions.Insert(key, {b.addr, b.length, b.access, qp.qp_num, region_key});
  w->key = key;
  w->qp = qp.qp_num;
  w->region_key = region_key;
  w->last_key = key;
  n.bound[key] = w;
  qp.window_keys.insert(key);
  return rnic::WcStatus::kSuccess;
}

rnic::WcStatus Invalidate(NodeState& n, SimQpState& qp, uint32_t key) {
  auto it = n.bound.find(key);
  if (it == n.bound.end() || it->second->qp != qp.qp_num) return rnic::WcStatus::kWindowBindError;
  UnbindWindow(n, it->second);
  return rnic::WcStatus::kSuccess;
}

void CompleteLocalSend(Fabric& f, SimQpState& qp, const Outstanding& o) {
  if (!o.wr.signaled) return;
  rnic::WorkCompletion wc;
  wc.wr_id = o.wr.wr_id;
  wc.opcode = rnic::CompletionOpcode(o.wr.opcode);
  wc.qp_num = qp.qp_num;
  if (qp.send_cq != nullptr && qp.send_cq->alive) {
    qp.send_cq->queue.push_back(wc);
    f.CountCompletion();
  }
}

}  // namespace

void UnbindWindow(NodeState& n, SimWindowState* w) {
  n.regions.Erase(w->key);
  n.bound.erase(w->key);
  if (auto q = n.qps.find(w->qp); q != n.qps.end()) q->second->window_keys.erase(w->key);
  w->key = 0;
  w->qp = 0;
}

void UnbindWindowsOfRegion(NodeState& n, uint32_t region_key) {
  std::vector<SimWindowState*> on_it;
  for (const auto& [k, w] : n.bound) {
    if (w->region_key == region_key) on_it.push_back(w);
  }
  for (SimWindowState* w : on_it) UnbindWindow(n, w);
}

void UnbindWindowsOfQp(NodeState& n, SimQpState& qp) {
  while (!qp.window_keys.empty()) UnbindWindow(n, n.bound.at(*qp.window_keys.begin()));
}

rnic::WcStatus DoLocalOp(const Fabric& f, NodeState& n, SimQpState& qp,
                         const rnic::SendWorkRequest& wr) {
  return wr.opcode == rnic::Opcode::kBindWindow ? Bind(f, n, qp, wr.bind)
                                                : Invalidate(n, qp, wr.invalidate_rkey);
}

void ScheduleLocalOp(Fabric& f, NodeState& n, SimQpState& qp, Outstanding o) {
  const NicModel& m = n.model.nic;
  o.local_op = true;
  o.local_id = qp.next_local_id++;
  const int64_t posted = ChargeCpu(f, n, qp.send_cq->core, n.model.cpu.post_ns);
  const int64_t start = std::max(posted, n.tx_free_ns);
  n.tx_free_ns = start + m.nic_op_ns;
  int64_t done = start + m.nic_op_ns + m.pcie_rtt_ns + m.pcie_rtt_ns / 2;
  done = std::max(done, qp.tx_ready_ns);  // after the QP's earlier requests left
  qp.tx_ready_ns = done;
  if (o.wr.opcode == rnic::Opcode::kBindWindow) n.mpt.Touch(o.wr.bind.window->rkey());
  const int node = n.id;
  const uint32_t qp_num = qp.qp_num;
  const uint64_t epoch = qp.epoch;
  const uint64_t id = o.local_id;
  qp.outstanding.push_back(std::move(o));
  f.Schedule(done + m.pcie_rtt_ns / 2, [&f, node, qp_num, epoch, id] {
    NodeState* nn = f.node(node);
    if (nn == nullptr || !nn->alive) return;
    auto it = nn->qps.find(qp_num);
    if (it == nn->qps.end() || it->second->epoch != epoch) return;  // failed: flushed
    SimQpState& q = *it->second;
    for (Outstanding& x : q.outstanding) {
      if (x.local_op && x.local_id == id) x.done = true;
    }
    CompleteLocalOps(f, q);
  });
}

void CompleteLocalOps(Fabric& f, SimQpState& qp) {
  while (!qp.outstanding.empty()) {
    const Outstanding& o = qp.outstanding.front();
    if (!o.local_op || !o.done || o.local_error != rnic::WcStatus::kSuccess) return;
    CompleteLocalSend(f, qp, o);
    qp.outstanding.pop_front();
  }
}

}  // namespace unloadkv::sim
