// Connection set-up (Engine::CreateConnection, Connection::Connect), state and teardown.
#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "transport/base/logging.h"
#include "transport/engine/engine.h"
#include "transport/engine/engine_internal.h"
#include "transport/engine/staging_header.h"

namespace unloadkv::engine {

ConnectionState::~ConnectionState() {
  if (!admitted) return;
  // The QPs first: once they are gone the NIC reads no send slot and fills no buffer.
  qp.reset();
  for (Lane& lane : lanes) lane.qp.reset();
  MutexLock l(&mu);  // nobody else holds this state any more; the lock satisfies the analysis
  const TargetState& in = target;
  std::vector<uint32_t> held_buffers;
  for (const TargetState::Held& h : in.held) held_buffers.push_back(h.buffer);
  if (in.in_hand != in.held.size()) {
    Log(LogLevel::kWarning, absl::StrCat("engine: connection ", id, " leaves with ", in.in_hand,
                                         " message buffers in hand and ", in.held.size(), " held"));
  }
  pool->Leave(in.granted + in.credits_to_return + in.withheld, held_buffers, in.borrowed);
  // Its send slots: free, held by quiet messages, or by messages still waiting to complete.
  const InitiatorState& out = initiator;
  std::vector<uint32_t> slots(out.free_send_slots.begin(), out.free_send_slots.end());
  slots.insert(slots.end(), out.orphan_send_slots.begin(), out.orphan_send_slots.end());
  for (const InitiatorState::Quiet& q : out.quiet) {
    if (q.send_slot >= 0) slots.push_back(static_cast<uint32_t>(q.send_slot));
  }
  for (const Op& op : out.ops) {
    if (op.send_slot >= 0) slots.push_back(static_cast<uint32_t>(op.send_slot));
  }
  if (slots.size() != send_reserve + out.send_borrowed) {
    Log(LogLevel::kWarning, absl::StrCat("engine: connection ", id, " leaves with ", slots.size(),
                                         " send slots of ", send_reserve + out.send_borrowed));
  }
  send_pool->Leave(slots, out.send_borrowed);
  // Its lanes' staging buffers: all posted (a staged write in hand keeps this state alive);
  // the reserve's, the borrowed ones and the ack units become spares.
  for (Lane& lane : lanes) {
    lane.pool->Leave(lane.units + 1 + lane.ack_units, {}, lane.borrowed + lane.ack_units);
  }
}

Connection::~Connection() {
  Deferred out;
  {
    MutexLock l(&state_->mu);
    FailConnection(*state_, out, FailScope::kClose);
    // The worker forgets this connection below: complete whatever is still waiting.
    for (Op& op : state_->initiator.ops) MarkDone(*state_, op, rnic::WcStatus::kFlushed);
    FinishInOrder(*state_, out);
    QueueCallbacks(*state_, out);
  }
  RunCallbacks(*state_, /*wait=*/true);
  for (const std::unique_ptr<Engine::Worker>& w : state_->engine->workers_) {
    MutexLock l(&w->mu);
    w->conns.erase(state_->id);
    w->main_qps.erase(state_->qp->qp_num());
    for (const Lane& lane : state_->lanes) w->stage_qps.erase(lane.qp->qp_num());
  }
}

void Connection::Close() {
  Deferred out;
  bool run = false;  // TakeCallbacks took them: run them after the lock
  {
    MutexLock l(&state_->mu);
    FailConnection(*state_, out, FailScope::kClose);
    run = TakeCallbacks(*state_, out);
  }
  if (run) RunTakenCallbacks(*state_, out);
  // A staged write validated before the failure may still be copying: wait for it.
  while (true) {
    {
      MutexLock l(&state_->mu);
      if (state_->copying == 0) return;
    }
    std::this_thread::yield();
  }
}

const ConnectionInfo& Connection::local_info() const { return state_->local; }

Connection::QueueState Connection::queue_state() const {
  MutexLock l(&state_->mu);
  return {static_cast<uint32_t>(state_->initiator.free_send_slots.size()),
          state_->initiator.send_borrowed, state_->initiator.send_wrs};
}

std::string Connection::DebugState() const {
  MutexLock l(&state_->mu);
  const ConnectionState& c = *state_;
  std::string s = absl::StrCat(
      "ops=", c.initiator.ops.size(),
      " unposted=", c.initiator.ops.size() - c.initiator.first_unposted,
      " credits=", c.initiator.message_credits,
      " free_send_slots=", c.initiator.free_send_slots.size(),
      " send_borrowed=", c.initiator.send_borrowed, " send_wrs=", c.initiator.send_wrs,
      " quiet=", c.initiator.quiet.size(), " unconfirmed=", c.initiator.unconfirmed.size(),
      " received=", c.target.messages_received, " credits_to_return=", c.target.credits_to_return,
      " held=", c.target.held.size(), " granted=", c.target.granted, " in_hand=", c.target.in_hand,
      " credit_level=", c.target.credit_level, " borrowed=", c.target.borrowed,
      " ready=", c.callbacks.ready.size(), " callbacks_running=", c.callbacks.running,
      " failed=", c.failed);
  for (size_t k = 0; k < c.lanes.size(); ++k) {
    const Lane& lane = c.lanes[k];
    absl::StrAppend(&s, " | lane ", k, " worker=", lane.worker, " next_seq=", lane.next_seq,
                    " acked_seq=", lane.acked_seq, " inflight=", lane.inflight.size(),
                    " limit=", lane.limit, " ack_units=", lane.ack_units,
                    " expected_seq=", lane.expected_seq, " limit_sent=", lane.limit_sent,
                    " units=", lane.units, " level=", lane.level, " ack_pending=", lane.ack_pending,
                    " acks_in_flight=", lane.acks_in_flight);
  }
  return s;
}

bool Connection::failed() const {
  MutexLock l(&state_->mu);
  return state_->failed;
}

void Connection::ObserveRequest(absl::Duration latency) {
  MutexLock l(&state_->mu);
  if (state_->policy != nullptr) state_->policy->ObserveRequest(latency);
}

uint64_t Connection::messages_received() const {
  MutexLock l(&state_->mu);
  return state_->target.messages_received;
}

void Connection::SetMessageHandler(MessageHandler handler) {
  std::shared_ptr<const MessageHandler> swapped =
      handler ? std::make_shared<const MessageHandler>(std::move(handler)) : nullptr;
  {
    MutexLock l(&state_->mu);
    std::swap(state_->handler, swapped);
  }
  // The old handler is destroyed here, unlocked: it may own this connection (RpcServer::Serve).
}

absl::Status Connection::Connect(const ConnectionInfo& remote) {
  ConnectionState& c = *state_;
  if (remote.staging.size() != c.lanes.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Connect: the peer has ", remote.staging.size(), " staging lanes and this connection ",
        c.lanes.size(), "; both engines need the same staging_lanes"));
  }
  if (remote.staging_slots == 0 || remote.staging_slots > kMaxStagingSlots ||
      remote.staging_credits == 0 || remote.staging_credits > remote.staging_slots ||
      remote.slot_bytes < std::max<size_t>(kStagingHeaderSize, kAckBytes) ||
      remote.slot_bytes > (64u << 20) || remote.message_slots == 0 ||
      remote.message_slots > kMaxMessageSlots || remote.message_credits == 0 ||
      remote.message_credits > remote.message_slots || remote.max_message_bytes < 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("Connect: peer parameters out of range: ", EncodeConnectionInfo(remote)));
  }
  MutexLock l(&c.mu);
  if (c.connected) return absl::FailedPreconditionError("Connect: already connected");
  // Outgoing staging headers, one per staged write the peer may let us have in flight (its
  // choice).
  // Deregistered before the buffer moves (a Connect that failed may be retried).
  c.headers_mr.reset();
  c.headers.assign(c.lanes.size() * remote.staging_slots * kStagingHeaderSize, 0);
  absl::StatusOr<std::unique_ptr<rnic::MemoryRegion>> headers_mr =
      c.engine->device()->RegisterMemory(c.headers.data(), c.headers.size(), 0);
  if (!headers_mr.ok()) return headers_mr.status();
  c.headers_mr = std::move(*headers_mr);
  if (absl::Status st = c.qp->Connect(remote.qp); !st.ok()) return st;
  for (size_t k = 0; k < c.lanes.size(); ++k) {
    rnic::QpAttributes stage = remote.qp;
    stage.qp_num = remote.staging[k].qp_num;
    stage.psn = remote.staging[k].psn;
    if (absl::Status st = c.lanes[k].qp->Connect(stage); !st.ok()) {
      c.qp->SetError();
      for (Lane& lane : c.lanes) lane.qp->SetError();
      return st;
    }
  }
  c.remote = remote;
  if (c.options.checks != nullptr) {
    c.check_name = absl::StrCat(c.local.qp.address, "/", c.local.qp.qp_num);
    c.peer_check_name = absl::StrCat(remote.qp.address, "/", remote.qp.qp_num);
  }
  c.initiator.message_credits = remote.message_credits;
  for (Lane& lane : c.lanes) lane.limit = remote.staging_credits;
  c.policy->OnTargetHint(remote.translation_cache);
  if (c.options.share_target_models) {
    c.policy->AttachTarget(c.engine->target_models_.For(remote.qp.transport, remote.qp.address));
  }
  c.connected = true;
  return absl::OkStatus();
}

uint64_t ConnectionCqEntries(const EngineOptions& o) {
  const uint64_t lanes = static_cast<uint64_t>(o.staging_lanes);
  const uint64_t send_wrs =
      lanes * (o.staging_slots + kAckSlots) + o.message_slots + kOffloadedWrBudget + kAckSlots;
  // Receives: the message pool buffers its peer may fill (at most message_slots credits), the
  // staged writes of its lanes (at most staging_slots credits each) and one unsolicited ack
  // each, and the acks of its own staged writes (at most one per write: send_wrs).
  // Plus the main QP's memory-window binds and invalidations (windows.cc).
  return (1 + lanes) * send_wrs + kWindowWrBudget + o.message_slots +
         lanes * (o.staging_slots + 1) + send_wrs;
}

absl::Status Engine::AdmitToPools(ConnectionState& c) {
  const EngineOptions& o = options_;
  MutexLock l(&c.mu);
  // The peer's first credits: buffers posted in the pools, reserved while the connection
  // lives (each lane's also backs one unsolicited ack).
  absl::StatusOr<std::vector<uint32_t>> slots = c.send_pool->Admit();
  if (!slots.ok()) return slots.status();
  if (absl::Status st = c.pool->Admit(); !st.ok()) {
    c.send_pool->Leave(*slots, 0);
    return st;
  }
  for (size_t k = 0; k < c.lanes.size(); ++k) {
    if (absl::Status st = c.lanes[k].pool->Admit(); !st.ok()) {
      for (size_t j = 0; j < k; ++j) c.lanes[j].pool->Leave(o.min_staging_credits + 1, {}, 0);
      c.pool->Leave(o.min_message_credits, {}, 0);
      c.send_pool->Leave(*slots, 0);
      return st;
    }
  }
  c.initiator.free_send_slots.assign(slots->begin(), slots->end());
  c.admitted = true;
  c.target.granted = o.min_message_credits;
  c.target.credit_level = o.min_message_credits;
  for (Lane& lane : c.lanes) {
    lane.units = o.min_staging_credits;
    lane.level = o.min_staging_credits;
    lane.limit_sent = o.min_staging_credits;
  }
  return absl::OkStatus();
}

void Engine::DescribeLocal(ConnectionState& c) const {
  const EngineOptions& o = options_;
  c.local.qp = c.qp->local_attributes();
  for (const Lane& lane : c.lanes) {
    c.local.staging.push_back({lane.qp->qp_num(), lane.qp->local_attributes().psn});
  }
  c.local.staging_slots = o.staging_slots;
  c.local.staging_credits = o.min_staging_credits;
  c.local.slot_bytes = o.staging_slot_bytes;
  c.local.message_slots = o.message_slots;
  c.local.message_credits = o.min_message_credits;
  c.local.max_message_bytes = o.max_message_bytes;
  c.local.translation_cache = device_->translation_cache_state();
}

void Engine::ServeOnWorkers(const std::shared_ptr<ConnectionState>& c) {
  for (size_t k = 0; k < workers_.size(); ++k) {
    bool serves = static_cast<int>(k) == c->worker;
    for (const Lane& lane : c->lanes) serves |= lane.worker == static_cast<int>(k);
    if (!serves) continue;
    MutexLock l(&workers_[k]->mu);
    workers_[k]->conns[c->id] = c;
    if (static_cast<int>(k) == c->worker) workers_[k]->main_qps[c->qp->qp_num()] = c->id;
    for (const Lane& lane : c->lanes) {
      if (lane.worker == static_cast<int>(k)) workers_[k]->stage_qps[lane.qp->qp_num()] = c->id;
    }
  }
}

absl::StatusOr<std::unique_ptr<Connection>> Engine::CreateConnection(
    std::unique_ptr<PathPolicy> policy, Role role) {
  if (policy == nullptr) return absl::InvalidArgumentError("CreateConnection: no policy");
  MutexLock create(&create_mu_);  // a server admits clients and opens replication links at once
  // The workers this connection would use (its own and its lanes'): each serves a bounded
  // number, so their CQs cannot overrun.
  const int first = static_cast<int>(next_connection_ & 0xffffff) % workers_.size();
  const int per_port = static_cast<int>(workers_.size()) / ports_;
  for (int k = 0; k < options_.staging_lanes && k < per_port; ++k) {
    Worker& w = *workers_[static_cast<size_t>(LaneWorker(first, k))];
    MutexLock l(&w.mu);
    if (w.conns.size() >= options_.max_connections_per_worker) {
      return absl::ResourceExhaustedError(absl::StrCat("CreateConnection: worker ", w.index,
                                                       " serves ", w.conns.size(),
                                                       " connections, max_connections_per_worker"));
    }
  }
  auto c = std::make_shared<ConnectionState>();
  c->self = c;
  c->engine = this;
  c->options = options_;
  c->options.throttle_when_backlogged &= role == Role::kServes;
  c->id = next_connection_++ & 0xffffff;
  c->table = table_;
  c->worker = static_cast<int>(c->id % workers_.size());
  c->pool = workers_[c->worker]->pool;
  c->send_pool = workers_[c->worker]->send_pool;
  c->send_reserve = SendReserve(options_);
  c->policy = std::move(policy);
  const EngineOptions& o = options_;
  const uint32_t lanes = static_cast<uint32_t>(o.staging_lanes);
  c->initiator.max_send_wrs =
      lanes * (o.staging_slots + kAckSlots) + o.message_slots + kOffloadedWrBudget;
  c->message_header_bytes = MessageHeaderBytes(o.staging_lanes);
  if (absl::Status st = CreateQueuePairs(*c); !st.ok()) return st;
  if (absl::Status st = AllocateBuffers(*c); !st.ok()) return st;
  if (absl::Status st = AdmitToPools(*c); !st.ok()) return st;
  DescribeLocal(*c);
  ServeOnWorkers(c);
  return std::unique_ptr<Connection>(new Connection(std::move(c)));
}

absl::Status Engine::CreateQueuePairs(ConnectionState& c) {
  const EngineOptions& o = options_;
  rnic::QpConfig cfg;
  cfg.send_cq = workers_[c.worker]->cq.get();
  cfg.recv_cq = cfg.send_cq;
  cfg.max_send_wr = c.initiator.max_send_wrs + kAckSlots + kWindowWrBudget;
  cfg.srq = c.pool->srq();
  cfg.rnr_timeout = absl::InfiniteDuration();  // the peer engine always reposts
  absl::StatusOr<std::unique_ptr<rnic::QueuePair>> qp =
      workers_[c.worker]->device->CreateQueuePair(cfg);
  if (!qp.ok()) return qp.status();
  c.qp = std::move(*qp);
  c.lanes.resize(static_cast<size_t>(o.staging_lanes));
  for (size_t k = 0; k < c.lanes.size(); ++k) {
    Lane& lane = c.lanes[k];
    lane.worker = LaneWorker(c.worker, static_cast<int>(k));
    lane.pool = workers_[lane.worker]->stage_pool;
    cfg.send_cq = workers_[lane.worker]->cq.get();
    cfg.recv_cq = cfg.send_cq;
    cfg.srq = lane.pool->srq();
    qp = workers_[lane.worker]->device->CreateQueuePair(cfg);
    if (!qp.ok()) return qp.status();
    lane.qp = std::move(*qp);
  }
  return absl::OkStatus();
}

absl::Status Engine::AllocateBuffers(ConnectionState& c) {
  c.acks.assign(c.lanes.size() * kAckSlots * kAckBytes, 0);
  absl::StatusOr<std::unique_ptr<rnic::MemoryRegion>> mr =
      device_->RegisterMemory(c.acks.data(), c.acks.size(), 0);
  if (!mr.ok()) return mr.status();
  c.acks_mr = std::move(*mr);
  return absl::OkStatus();
}

}  // namespace unloadkv::engine
