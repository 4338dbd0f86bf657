#include "transport/sim/datapath.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "transport/rnic/request_checks.h"
#include "transport/sim/windows.h"

namespace unloadkv::sim {
namespace {

constexpr uint64_t kHeaderBytes = 64;  // modeled transport headers per message on the wire
// How long a requester waits for an answer before giving up (verbs: timeout x retry_cnt).
constexpr int64_t kTransportTimeoutNs = 100'000;

void Push(Fabric& f, SimCqState* cq, const rnic::WorkCompletion& wc) {
  if (cq == nullptr || !cq->alive) return;
  cq->queue.push_back(wc);
  f.CountCompletion();
}

void CompleteSend(Fabric& f, SimQpState& qp, const Outstanding& o, rnic::WcStatus status) {
  if (status == rnic::WcStatus::kSuccess && !o.wr.signaled) return;
  rnic::WorkCompletion wc;
  wc.wr_id = o.wr.wr_id;
  wc.status = status;
  wc.opcode = rnic::CompletionOpcode(o.wr.opcode);
  wc.qp_num = qp.qp_num;
  if (o.wr.opcode == rnic::Opcode::kRead && status == rnic::WcStatus::kSuccess) {
    wc.byte_len = static_cast<uint32_t>(o.wr.TotalLength());
  }
  Push(f, qp.send_cq, wc);
}

void CompleteRecv(Fabric& f, SimQpState& qp, const rnic::RecvWorkRequest& r,
                  rnic::WcStatus status) {
  rnic::WorkCompletion wc;
  wc.wr_id = r.wr_id;
  wc.status = status;
  wc.opcode = rnic::WcOpcode::kRecv;
  wc.qp_num = qp.qp_num;
  Push(f, qp.recv_cq, wc);
}

// A receive is posted for the QP's next request (its own, or in its SRQ).
bool HasRecv(const SimQpState& qp) {
  return qp.srq != nullptr ? !qp.srq->state.empty() : !qp.recvs.empty();
}

// Removes and returns the receive the QP's next request uses. Requires HasRecv.
rnic::RecvWorkRequest TakeRecv(SimQpState& qp) {
  if (qp.srq != nullptr) return qp.srq->state.Take();
  rnic::RecvWorkRequest r = qp.recvs.front();
  qp.recvs.pop_front();
  return r;
}

SimQpState* FindQp(Fabric& f, int node, uint32_t qp_num, NodeState** out_node = nullptr) {
  NodeState* n = f.node(node);
  if (n == nullptr || !n->alive) return nullptr;
  auto it = n->qps.find(qp_num);
  if (it == n->qps.end()) return nullptr;
  if (out_node != nullptr) *out_node = n;
  return it->second.get();
}

// Serializes `bytes` on the node's outgoing link from `t`; returns the arrival time.
int64_t Transmit(NodeState& n, int64_t t, uint64_t bytes) {
  const NicModel& m = n.model.nic;
  int64_t start = std::max(t, n.link_free_ns);
  n.link_free_ns = start + TransferNs(bytes, m.wire_gbps);
  return n.link_free_ns + m.wire_latency_ns;
}

// One translation-cache miss starting no earlier than `t`; returns when it is resolved.
int64_t Miss(NodeState& n, int64_t t) {
  auto unit = std::min_element(n.translation_unit_free.begin(), n.translation_unit_free.end());
  int64_t start = std::max(t, *unit);
  *unit = start + n.model.nic.miss_pcie_reads * n.model.nic.pcie_rtt_ns;
  return *unit;
}

// Translates [addr, addr+len) of region `key` starting at `t`; returns when all translations
// are known. Page misses are fetched in parallel on the translation units.
int64_t Translate(NodeState& n, uint32_t key, uint64_t addr, uint64_t len, int64_t t) {
  if (len == 0) return t;
  int64_t ready = t;
  // A window has its own context (MPT) but its region's translations (MTT).
  const rnic::RegionEntry* e = n.regions.Find(key);
  const uint32_t mtt_key = e != nullptr && e->is_window() ? e->region_key : key;
  if (n.mpt.Touch(key)) {
    ++n.stats.mpt_hits;
  } else {
    ++n.stats.mpt_misses;
    ready = Miss(n, ready);
  }
  auto it = n.paging.find(mtt_key);
  const uint64_t ps = it == n.paging.end() ? 4096 : it->second.page_size;
  const uint64_t off = it == n.paging.end() ? addr : addr - it->second.base;
  int64_t done = ready;
  for (uint64_t page = off / ps; page <= (off + len - 1) / ps; ++page) {
    if (n.mtt.Touch((uint64_t{mtt_key} << 40) ^ page)) {
      ++n.stats.mtt_hits;
    } else {
      ++n.stats.mtt_misses;
      done = std::max(done, Miss(n, ready));
    }
  }
  return done;
}

// A request or response of `qp` was lost on a cut link: from now on the QP sends nothing,
// and it fails once its retries would have run out.
void Lose(Fabric& f, NodeState& n, SimQpState& qp) {
  if (qp.lost || qp.state == rnic::QpState::kError) return;
  qp.lost = true;
  const int node = n.id;
  const uint32_t qp_num = qp.qp_num;
  const uint64_t epoch = qp.epoch;
  f.Schedule(f.now_ns() + kTransportTimeoutNs, [&f, node, qp_num, epoch] {
    NodeState* n = nullptr;
    SimQpState* q = FindQp(f, node, qp_num, &n);
    if (q != nullptr && q->epoch == epoch) {
      FailQp(f, *n, *q, rnic::WcStatus::kRetryExceeded, /*tell_peer=*/false);
    }
  });
}

// Delivers a response (ACK, NAK or READ data) for request `psn` to the requester QP.
void Respond(Fabric& f, NodeState& from, int64_t depart, int req_node, uint32_t req_qp,
             uint64_t req_epoch, uint32_t psn, rnic::WcStatus status, std::string data) {
  if (f.LinkCut(from.id, req_node)) {
    NodeState* rn = nullptr;
    SimQpState* rq = FindQp(f, req_node, req_qp, &rn);
    if (rq != nullptr && rq->epoch == req_epoch) Lose(f, *rn, *rq);
    return;
  }
  int64_t arrive = Transmit(from, depart, kHeaderBytes + data.size());
  f.Schedule(arrive, [&f, req_node, req_qp, req_epoch, psn, status, data = std::move(data)] {
    NodeState* n = nullptr;
    SimQpState* qp = FindQp(f, req_node, req_qp, &n);
    if (qp == nullptr || qp->epoch != req_epoch || qp->state == rnic::QpState::kError) return;
    const NicModel& m = n->model.nic;
    int64_t start = std::max(f.now_ns(), n->rx_free_ns);
    n->rx_free_ns = start + m.nic_op_ns;
    int64_t cqe = start + m.nic_op_ns + TransferNs(data.size(), m.pcie_gbps) + m.pcie_rtt_ns / 2;
    f.Schedule(cqe, [&f, req_node, req_qp, req_epoch, psn, status, data] {
      NodeState* n = nullptr;
      SimQpState* qp = FindQp(f, req_node, req_qp, &n);
      if (qp == nullptr || qp->epoch != req_epoch || qp->state == rnic::QpState::kError) return;
      // Responses come back in PSN order; NAKs also acknowledge what came before them.
      while (!qp->outstanding.empty()) {
        Outstanding& o = qp->outstanding.front();
        if (o.local_error != rnic::WcStatus::kSuccess) {
          FailQp(f, *n, *qp, rnic::WcStatus::kFlushed, /*tell_peer=*/true);
          return;
        }
        if (o.local_op) {
          // Not done yet cannot happen: a later request leaves the NIC only after it is done
          // (tx_ready_ns), so its response comes later than the local operation's completion.
          if (!o.done) break;
          CompleteSend(f, *qp, o, rnic::WcStatus::kSuccess);
          qp->outstanding.pop_front();
          continue;
        }
        if (static_cast<int32_t>(o.psn - psn) > 0) break;
        if (o.psn == psn && status != rnic::WcStatus::kSuccess) {
          FailQp(f, *n, *qp, status, /*tell_peer=*/false);
          return;
        }
        if (o.psn == psn && o.wr.opcode == rnic::Opcode::kRead) {
          size_t off = 0;
          for (int i = 0; i < o.wr.num_sge && off < data.size(); ++i) {
            size_t k = std::min<size_t>(o.wr.sg_list[i].length, data.size() - off);
            std::memcpy(reinterpret_cast<void*>(o.wr.sg_list[i].addr), data.data() + off, k);
            off += k;
          }
        }
        CompleteSend(f, *qp, o, rnic::WcStatus::kSuccess);
        qp->outstanding.pop_front();
      }
      CompleteLocalOps(f, *qp);
      if (!qp->outstanding.empty() &&
          qp->outstanding.front().local_error != rnic::WcStatus::kSuccess) {
        FailQp(f, *n, *qp, rnic::WcStatus::kFlushed, /*tell_peer=*/true);
      }
    });
  });
}

// Refuses the request at the head of the inbound queue: after every earlier request is placed,
// NAK it and fail the responder QP.
void Refuse(Fabric& f, NodeState& n, SimQpState& qp, const Request& r, rnic::WcStatus status) {
  qp.inbound.clear();
  int64_t at = std::max(f.now_ns(), qp.last_placed_ns) + n.model.nic.nic_op_ns;
  int node = n.id;
  uint32_t qp_num = qp.qp_num;
  uint64_t epoch = qp.epoch;
  int peer_node = qp.peer_node;
  uint32_t peer_qp = qp.peer_qp;
  uint32_t psn = r.psn;
  // Mark failing now so nothing else executes; the NAK and the state change happen at `at`.
  qp.state = rnic::QpState::kError;
  f.Schedule(at, [&f, node, qp_num, epoch, peer_node, peer_qp, psn, status] {
    NodeState* n = nullptr;
    SimQpState* q = FindQp(f, node, qp_num, &n);
    if (q == nullptr || q->epoch != epoch) return;
    SimQpState* peer = FindQp(f, peer_node, peer_qp);
    uint64_t peer_epoch = peer != nullptr ? peer->epoch : 0;
    Respond(f, *n, f.now_ns(), peer_node, peer_qp, peer_epoch, psn, status, "");
    q->state = rnic::QpState::kReadyToSend;  // let FailQp run its full transition
    FailQp(f, *n, *q, rnic::WcStatus::kFlushed, /*tell_peer=*/false);
  });
}

}  // namespace

int64_t TransferNs(uint64_t bytes, double gbps) {
  return static_cast<int64_t>(static_cast<double>(bytes) * 8.0 / gbps);
}

int64_t ChargeCpu(Fabric& f, NodeState& n, int core, int64_t cost_ns) {
  cost_ns *= n.cpu_slowdown;
  int64_t& free = n.core_free[core % n.core_free.size()];
  free = std::max(free, f.now_ns()) + cost_ns;
  n.stats.cpu_busy_ns += cost_ns;
  return free;
}

void FailQp(Fabric& f, NodeState& n, SimQpState& qp, rnic::WcStatus head_status, bool tell_peer) {
  if (qp.state == rnic::QpState::kError) return;
  qp.state = rnic::QpState::kError;
  ++qp.epoch;
  UnbindWindowsOfQp(n, qp);  // their keys stop working with it
  bool head = true;
  for (const Outstanding& o : qp.outstanding) {
    CompleteSend(f, qp, o,
                 o.local_error != rnic::WcStatus::kSuccess ? o.local_error
                 : head                                    ? head_status
                                                           : rnic::WcStatus::kFlushed);
    head = false;
  }
  qp.outstanding.clear();
  for (const rnic::RecvWorkRequest& r : qp.placing) {
    CompleteRecv(f, qp, r, rnic::WcStatus::kFlushed);
  }
  qp.placing.clear();
  for (const rnic::RecvWorkRequest& r : qp.recvs) {
    CompleteRecv(f, qp, r, rnic::WcStatus::kFlushed);
  }
  qp.recvs.clear();
  qp.inbound.clear();
  qp.lost = false;
  if (tell_peer && qp.peer_node >= 0 && !f.LinkCut(n.id, qp.peer_node)) {
    int peer_node = qp.peer_node;
    uint32_t peer_qp = qp.peer_qp;
    f.Schedule(f.now_ns() + n.model.nic.wire_latency_ns, [&f, peer_node, peer_qp] {
      NodeState* pn = nullptr;
      SimQpState* peer = FindQp(f, peer_node, peer_qp, &pn);
      if (peer != nullptr) FailQp(f, *pn, *peer, rnic::WcStatus::kRetryExceeded, false);
    });
  }
}

// A request as it travels: the WR's fields and a copy of its payload (not for READ).
Request MakeRequest(const rnic::SendWorkRequest& wr, uint32_t psn) {
  Request r;
  r.opcode = wr.opcode;
  r.psn = psn;
  r.remote_addr = wr.remote_addr;
  r.rkey = wr.opcode == rnic::Opcode::kSendWithInvalidate ? wr.invalidate_rkey : wr.rkey;
  r.imm = wr.imm;
  r.length = static_cast<uint32_t>(wr.TotalLength());
  if (wr.opcode != rnic::Opcode::kRead) {
    r.payload.reserve(r.length);
    for (int k = 0; k < wr.num_sge; ++k) {
      r.payload.append(reinterpret_cast<const char*>(wr.sg_list[k].addr), wr.sg_list[k].length);
    }
  }
  return r;
}

// Request `r` of (src_node, src_qp) reaches (dst_node, dst_qp): queued and drained, or, with
// nobody to answer, dropped (the requester's retries run out after the transport timeout,
// unless something, a NAK already in flight, fails it first).
void Arrive(Fabric& f, int src_node, uint32_t src_qp, int dst_node, uint32_t dst_qp,
            uint64_t src_epoch, const Request& r) {
  {
    // Lost on a cut link, or behind a request of its QP that was: dropped. (A request whose
    // QP failed after sending it still arrives, as packets on the wire do.)
    NodeState* sn = nullptr;
    SimQpState* s = FindQp(f, src_node, src_qp, &sn);
    const bool current = s != nullptr && s->epoch == src_epoch;
    if (f.LinkCut(src_node, dst_node) || (current && s->lost)) {
      if (current) Lose(f, *sn, *s);
      return;
    }
  }
  NodeState* d = nullptr;
  SimQpState* q = FindQp(f, dst_node, dst_qp, &d);
  if (q == nullptr || q->state == rnic::QpState::kError ||
      (q->state == rnic::QpState::kReadyToSend &&
       (q->peer_node != src_node || q->peer_qp != src_qp))) {
    f.Schedule(f.now_ns() + kTransportTimeoutNs, [&f, src_node, src_qp, src_epoch] {
      NodeState* sn = nullptr;
      SimQpState* s = FindQp(f, src_node, src_qp, &sn);
      if (s != nullptr && s->epoch == src_epoch) {
        FailQp(f, *sn, *s, rnic::WcStatus::kRetryExceeded, /*tell_peer=*/false);
      }
    });
    return;
  }
  q->inbound.push_back(r);
  Drain(f, *d, *q);
}

// The request at the head of `qp`'s inbound queue (PSN `psn`) needs a receive and none is
// posted: arms the RNR timer once per request; it refuses the request when it fires first.
void ArmRnr(Fabric& f, NodeState& n, SimQpState& qp, uint32_t psn) {
  if (qp.rnr_armed && qp.rnr_psn == psn) return;
  qp.rnr_armed = true;
  qp.rnr_psn = psn;
  if (qp.config.rnr_timeout == absl::InfiniteDuration()) return;
  int node = n.id;
  uint32_t qp_num = qp.qp_num;
  uint64_t epoch = qp.epoch;
  f.Schedule(f.now_ns() + absl::ToInt64Nanoseconds(qp.config.rnr_timeout),
             [&f, node, qp_num, epoch, psn] {
               NodeState* n = nullptr;
               SimQpState* q = FindQp(f, node, qp_num, &n);
               if (q == nullptr || q->epoch != epoch || !q->rnr_armed || q->rnr_psn != psn ||
                   q->inbound.empty() || HasRecv(*q)) {
                 return;
               }
               Refuse(f, *n, *q, q->inbound.front(), rnic::WcStatus::kRnrRetryExceeded);
             });
}

// The NIC finished placing `req` on (node, qp_num): bytes written (or read), the receive
// completed, the response sent.
void Place(Fabric& f, int node, uint32_t qp_num, uint64_t epoch, const Request& req,
           const rnic::RecvWorkRequest& recv, bool needs_recv) {
  NodeState* n = nullptr;
  SimQpState* q = FindQp(f, node, qp_num, &n);
  if (q == nullptr || q->epoch != epoch) return;  // its receive was flushed (FailQp)
  if (needs_recv) q->placing.pop_front();
  std::string data;
  if (req.opcode == rnic::Opcode::kRead) {
    data.assign(reinterpret_cast<const char*>(req.remote_addr), req.length);
  } else if (!needs_recv || req.opcode == rnic::Opcode::kWriteWithImm) {
    if (req.length > 0) {
      std::memcpy(reinterpret_cast<void*>(req.remote_addr), req.payload.data(), req.length);
    }
  } else {
    size_t off = 0;
    for (int i = 0; i < recv.num_sge && off < req.payload.size(); ++i) {
      size_t k = std::min<size_t>(recv.sg_list[i].length, req.payload.size() - off);
      std::memcpy(reinterpret_cast<void*>(recv.sg_list[i].addr), req.payload.data() + off, k);
      off += k;
    }
  }
  if (needs_recv) {
    rnic::WorkCompletion wc;
    wc.wr_id = recv.wr_id;
    wc.opcode = req.opcode == rnic::Opcode::kWriteWithImm ? rnic::WcOpcode::kRecvRdmaWithImm
                                                          : rnic::WcOpcode::kRecv;
    wc.byte_len = req.length;
    wc.has_imm =
        req.opcode == rnic::Opcode::kWriteWithImm || req.opcode == rnic::Opcode::kSendWithImm;
    wc.imm = wc.has_imm ? req.imm : 0;
    wc.has_invalidate = req.opcode == rnic::Opcode::kSendWithInvalidate;
    wc.invalidated_rkey = wc.has_invalidate ? req.rkey : 0;
    wc.qp_num = q->qp_num;
    SimCqState* cq = q->recv_cq;
    f.Schedule(f.now_ns() + n->model.nic.pcie_rtt_ns / 2,
               [&f, cq, wc, ref = q->recv_cq_ref] { Push(f, cq, wc); });
  }
  SimQpState* peer = FindQp(f, q->peer_node, q->peer_qp);
  uint64_t peer_epoch = peer != nullptr ? peer->epoch : 0;
  Respond(f, *n, f.now_ns() + n->model.nic.nic_op_ns, q->peer_node, q->peer_qp, peer_epoch, req.psn,
          rnic::WcStatus::kSuccess, std::move(data));
}

absl::Status PostSend(Fabric& f, NodeState& n, SimQpState& qp,
                      absl::Span<const rnic::SendWorkRequest> wrs) {
  if (qp.state == rnic::QpState::kReset) {
    return absl::FailedPreconditionError(
        absl::StrCat("PostSend: queue pair ", qp.qp_num, " is not connected"));
  }
  const NicModel& m = n.model.nic;
  for (size_t i = 0; i < wrs.size(); ++i) {
    const rnic::SendWorkRequest& wr = wrs[i];
    if (absl::Status st = rnic::CheckSendRequest(wr, rnic::DeviceLimits(), i); !st.ok()) {
      return st;
    }
    if (qp.outstanding.size() >= qp.config.max_send_wr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("PostSend: send queue full (", qp.config.max_send_wr, " outstanding)"));
    }
    Outstanding o;
    o.wr = wr;
    if (qp.state == rnic::QpState::kError) {
      CompleteSend(f, qp, o, rnic::WcStatus::kFlushed);
      continue;
    }
    if (!rnic::LocalBuffersValid(n.regions, wr)) {
      o.local_error = rnic::WcStatus::kLocalProtectionError;
    }
    const bool local_op =
        wr.opcode == rnic::Opcode::kBindWindow || wr.opcode == rnic::Opcode::kLocalInvalidate;
    if (local_op && o.local_error == rnic::WcStatus::kSuccess && !qp.poisoned) {
      o.local_error = DoLocalOp(f, n, qp, wr);
      if (o.local_error == rnic::WcStatus::kSuccess) {
        ScheduleLocalOp(f, n, qp, std::move(o));
        continue;
      }
    }
    if (o.local_error != rnic::WcStatus::kSuccess || qp.poisoned) {
      if (qp.outstanding.empty()) {
        CompleteSend(f, qp, o, o.local_error);
        FailQp(f, n, qp, rnic::WcStatus::kFlushed, /*tell_peer=*/true);
        continue;
      }
      qp.poisoned = true;
      qp.outstanding.push_back(o);
      continue;
    }
    o.psn = qp.next_psn++;
    Request r = MakeRequest(wr, o.psn);
    // The CPU rings the doorbell; the NIC fetches the request and its payload over PCIe.
    int64_t posted = ChargeCpu(f, n, qp.send_cq->core, n.model.cpu.post_ns);
    // The NIC pipelines fetches; requests of one QP only leave in post order.
    int64_t start = std::max(posted, n.tx_free_ns);
    n.tx_free_ns = start + m.nic_op_ns;
    const bool inline_post = r.payload.size() + 32 <= m.max_inline_bytes;
    int64_t fetched = start + m.nic_op_ns +
                      (inline_post ? m.pcie_rtt_ns / 2
                                   : m.pcie_rtt_ns + TransferNs(r.payload.size(), m.pcie_gbps));
    fetched = std::max(fetched, qp.tx_ready_ns);
    qp.tx_ready_ns = fetched;
    int64_t arrive = Transmit(n, fetched, kHeaderBytes + r.payload.size());
    arrive = std::max(arrive + f.DrawDelay(n.id, qp.peer_node), qp.last_arrival_ns);
    qp.last_arrival_ns = arrive;
    qp.outstanding.push_back(o);
    int src_node = n.id;
    uint32_t src_qp = qp.qp_num;
    int dst_node = qp.peer_node;
    uint32_t dst_qp = qp.peer_qp;
    uint64_t src_epoch = qp.epoch;
    f.Schedule(arrive, [&f, src_node, src_qp, dst_node, dst_qp, src_epoch, r = std::move(r)] {
      Arrive(f, src_node, src_qp, dst_node, dst_qp, src_epoch, r);
    });
  }
  return absl::OkStatus();
}

absl::Status PostRecv(Fabric& f, NodeState& n, SimQpState& qp,
                      absl::Span<const rnic::RecvWorkRequest> wrs) {
  if (qp.srq != nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("PostRecv: queue pair ", qp.qp_num, " takes its receives from an SRQ"));
  }
  for (size_t i = 0; i < wrs.size(); ++i) {
    const rnic::RecvWorkRequest& wr = wrs[i];
    if (absl::Status st = rnic::CheckRecvRequest(wr, i); !st.ok()) return st;
    if (qp.recvs.size() >= qp.config.max_recv_wr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("PostRecv: receive queue full (", qp.config.max_recv_wr, " posted)"));
    }
    if (qp.state == rnic::QpState::kError) {
      CompleteRecv(f, qp, wr, rnic::WcStatus::kFlushed);
      continue;
    }
    if (!rnic::LocalBuffersValid(n.regions, wr)) {
      CompleteRecv(f, qp, wr, rnic::WcStatus::kLocalProtectionError);
      FailQp(f, n, qp, rnic::WcStatus::kFlushed, /*tell_peer=*/true);
      continue;
    }
    qp.recvs.push_back(wr);
  }
  Drain(f, n, qp);
  return absl::OkStatus();
}

absl::Status PostSrqRecv(Fabric& f, NodeState& n, SimSrqState& srq,
                         absl::Span<const rnic::RecvWorkRequest> wrs) {
  absl::Status st = srq.state.Post(wrs, n.regions);
  for (uint32_t num : srq.qps) {  // in QP number order
    if (srq.state.empty()) break;
    auto it = n.qps.find(num);
    if (it != n.qps.end()) Drain(f, n, *it->second);
  }
  return st;
}

void Drain(Fabric& f, NodeState& n, SimQpState& qp) {
  const NicModel& m = n.model.nic;
  while (!qp.inbound.empty() && qp.state == rnic::QpState::kReadyToSend) {
    Request& r = qp.inbound.front();
    bool is_write = r.opcode == rnic::Opcode::kWrite || r.opcode == rnic::Opcode::kWriteWithImm;
    bool is_read = r.opcode == rnic::Opcode::kRead;
    bool needs_recv = r.opcode != rnic::Opcode::kWrite && !is_read;
    if (is_write || is_read) {
      uint32_t need = is_write ? uint32_t{rnic::kRemoteWrite} : uint32_t{rnic::kRemoteRead};
      if (n.regions.Check(r.rkey, r.remote_addr, r.length, need, qp.qp_num) !=
          rnic::AccessVerdict::kOk) {
        Refuse(f, n, qp, r, rnic::WcStatus::kRemoteAccessError);
        return;
      }
    }
    const bool invalidates = r.opcode == rnic::Opcode::kSendWithInvalidate;
    if (invalidates) {
      auto w = n.bound.find(r.rkey);
      if (w == n.bound.end() || w->second->qp != qp.qp_num) {
        Refuse(f, n, qp, r, rnic::WcStatus::kRemoteAccessError);
        return;
      }
    }
    if (needs_recv && !HasRecv(qp)) {
      ArmRnr(f, n, qp, r.psn);
      return;
    }
    qp.rnr_armed = false;
    rnic::RecvWorkRequest recv;
    if (needs_recv) {
      recv = TakeRecv(qp);
      if (r.opcode != rnic::Opcode::kWriteWithImm && r.length > recv.TotalLength()) {
        CompleteRecv(f, qp, recv, rnic::WcStatus::kLocalLengthError);
        Refuse(f, n, qp, r, rnic::WcStatus::kRemoteInvalidRequest);
        return;
      }
      qp.placing.push_back(recv);
    }
    // Accepted: the window is invalid from here on, before the receive completes.
    if (invalidates) UnbindWindow(n, n.bound.at(r.rkey));
    // The receive pipeline: message processing, translation, DMA to host memory.
    int64_t start = std::max(f.now_ns(), n.rx_free_ns);
    n.rx_free_ns = start + m.nic_op_ns;
    int64_t t = start + m.nic_op_ns;
    if (is_write || is_read) {
      t = Translate(n, r.rkey, r.remote_addr, r.length, t);
    } else {
      uint64_t left = r.length;
      int64_t done = t;
      for (int i = 0; i < recv.num_sge && left > 0; ++i) {
        uint64_t k = std::min<uint64_t>(left, recv.sg_list[i].length);
        done = std::max(done, Translate(n, recv.sg_list[i].lkey, recv.sg_list[i].addr, k, t));
        left -= k;
      }
      t = done;
    }
    int64_t placed = is_read ? t + m.pcie_rtt_ns + TransferNs(r.length, m.pcie_gbps)
                             : t + TransferNs(r.length, m.pcie_gbps) + m.pcie_rtt_ns / 2;
    // A SEND_WITH_INVALIDATE writes the window's context back (a posted write, half a round
    // trip) before its receive completes (docs/sim-model.md).
    if (invalidates) placed += m.pcie_rtt_ns / 2;
    placed = std::max(placed, qp.last_placed_ns);
    qp.last_placed_ns = placed;
    Request req = std::move(r);
    qp.inbound.pop_front();
    int node = n.id;
    uint32_t qp_num = qp.qp_num;
    uint64_t epoch = qp.epoch;
    f.Schedule(placed, [&f, node, qp_num, epoch, req = std::move(req), recv, needs_recv] {
      Place(f, node, qp_num, epoch, req, recv, needs_recv);
    });
  }
}

}  // namespace unloadkv::sim
