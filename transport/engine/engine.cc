// Set-up and the initiator side of the write engine.
#include "transport/engine/engine.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "transport/base/little_endian.h"
#include "transport/base/logging.h"
#include "transport/engine/engine_internal.h"
#include "transport/rnic/wait.h"

namespace unloadkv::engine {

// ---------------------------------------------------------------------------- ConnectionInfo

std::string EncodeConnectionInfo(const ConnectionInfo& i) {
  std::string staging;
  for (const ConnectionInfo::StagingQp& q : i.staging) {
    absl::StrAppend(&staging, staging.empty() ? "" : ",", q.qp_num, ":", q.psn);
  }
  return absl::StrCat(
      rnic::EncodeQpAttributes(i.qp), " staging=", staging, " ring_addr=", i.ring_addr,
      " ring_rkey=", i.ring_rkey, " ring_slots=", i.ring_slots, " slot_bytes=", i.slot_bytes,
      " message_slots=", i.message_slots, " max_message_bytes=", i.max_message_bytes);
}

namespace {
// "qp_num:psn,qp_num:psn...", one to kMaxLanes entries.
bool ParseStaging(absl::string_view text, std::vector<ConnectionInfo::StagingQp>* out) {
  out->clear();
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    std::pair<absl::string_view, absl::string_view> q =
        absl::StrSplit(item, absl::MaxSplits(':', 1));
    ConnectionInfo::StagingQp s;
    if (!absl::SimpleAtoi(q.first, &s.qp_num) || !absl::SimpleAtoi(q.second, &s.psn)) return false;
    out->push_back(s);
  }
  return !out->empty() && out->size() <= kMaxLanes;
}
}  // namespace

absl::StatusOr<ConnectionInfo> DecodeConnectionInfo(absl::string_view text) {
  if (text.size() > 2048) return absl::InvalidArgumentError("connection info: over 2 KiB");
  std::vector<std::string> qp_fields;
  ConnectionInfo info;
  struct Field {
    const char* name;
    uint64_t* wide;
    uint32_t* narrow;
    bool seen;
  } fields[] = {{"staging", nullptr, nullptr, false},
                {"ring_addr", &info.ring_addr, nullptr, false},
                {"ring_rkey", nullptr, &info.ring_rkey, false},
                {"ring_slots", nullptr, &info.ring_slots, false},
                {"slot_bytes", nullptr, &info.slot_bytes, false},
                {"message_slots", nullptr, &info.message_slots, false},
                {"max_message_bytes", nullptr, &info.max_message_bytes, false}};
  for (absl::string_view token : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(token, absl::MaxSplits('=', 1));
    if (kv.first == "transport" || kv.first == "address" || kv.first == "qp_num" ||
        kv.first == "psn") {
      qp_fields.emplace_back(token);
      continue;
    }
    Field* f = nullptr;
    for (Field& candidate : fields) {
      if (kv.first == candidate.name) f = &candidate;
    }
    if (f == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("connection info: unknown key '", kv.first, "'"));
    }
    bool ok = f->wide     ? absl::SimpleAtoi(kv.second, f->wide)
              : f->narrow ? absl::SimpleAtoi(kv.second, f->narrow)
                          : ParseStaging(kv.second, &info.staging);
    if (!ok || f->seen) {
      return absl::InvalidArgumentError(
          absl::StrCat("connection info: bad or repeated value for '", f->name, "'"));
    }
    f->seen = true;
  }
  for (const Field& f : fields) {
    if (!f.seen)
      return absl::InvalidArgumentError(absl::StrCat("connection info: missing '", f.name, "'"));
  }
  absl::StatusOr<rnic::QpAttributes> qp = rnic::DecodeQpAttributes(absl::StrJoin(qp_fields, " "));
  if (!qp.ok()) return qp.status();
  info.qp = *qp;
  return info;
}

// ---------------------------------------------------------------------------- Op bookkeeping

Op* ConnectionState::FindOp(uint64_t id) {
  if (ops.empty() || id < ops.front().id) return nullptr;
  uint64_t i = id - ops.front().id;
  return i < ops.size() ? &ops[i] : nullptr;
}

Op* ConnectionState::FindOpByIndex(uint32_t low32) {
  if (ops.empty()) return nullptr;
  uint64_t first = ops.front().id;
  uint64_t id = first + static_cast<uint32_t>(low32 - static_cast<uint32_t>(first));
  return FindOp(id);
}

void MarkDone(ConnectionState& c, Op& op, rnic::WcStatus status) {
  if (op.done) return;
  op.done = true;
  op.status = status;
  op.done_at = c.engine->clock().Now();
  // A quiet write's completion time is when the engine learned of it, not its latency.
  if (op.is_write && op.posted && !op.quiet && status == rnic::WcStatus::kSuccess) {
    uint64_t before = c.policy->switches();
    Decision taken = op.decision;
    taken.path = op.path;  // the ordering and full-ring rules may have overridden the policy
    c.policy->Observe(taken, op.done_at - op.posted_at);
    if (c.options.metrics != nullptr && c.policy->switches() != before) {
      c.options.metrics->OnPolicySwitch();
    }
  }
}

void FinishInOrder(ConnectionState& c, Deferred& out) {
  while (!c.ops.empty() && c.ops.front().done) {
    Op op = std::move(c.ops.front());
    c.ops.pop_front();
    if (c.first_unposted > 0) --c.first_unposted;
    // As on RC, once an op failed every later one reports kFlushed, even one whose path
    // (another QP) completed it first. Such a write may have been placed.
    if (op.status != rnic::WcStatus::kSuccess) {
      c.reported_failure = true;
    } else if (c.reported_failure) {
      op.status = rnic::WcStatus::kFlushed;
    }
    if (op.is_write) {
      WriteResult r{op.status, op.path, op.done_at - op.submitted};
      if (c.options.metrics != nullptr) {
        c.options.metrics->OnWriteCompleted(
            op.path, op.local.length, op.quiet ? absl::InfiniteDuration() : r.latency, r.ok());
      }
      if (op.write_done) out.push_back([cb = std::move(op.write_done), r] { cb(r); });
    } else if (op.send_done) {
      out.push_back([cb = std::move(op.send_done), s = op.status] { cb(s); });
    }
  }
}

void FailConnection(ConnectionState& c, Deferred& out, FailScope scope) {
  if (scope == FailScope::kMainFailed || scope == FailScope::kClose) c.qp->SetError();
  // Lanes go down with the first failure (after a refusal only the refusing lane: the
  // initiator must read the NAK before its other lanes see the connection close) or on close.
  if (!c.failed || scope == FailScope::kClose) {
    for (Lane& lane : c.lanes) {
      if (scope != FailScope::kRefusalSent || lane.refused) lane.qp->SetError();
    }
  }
  if (c.failed) return;
  c.failed = true;
  // Ops never posted, and unloaded writes waiting for an ack, can no longer complete. Posted
  // offloaded writes and messages complete through their own QP, which reports each one (with
  // the precise status of a refusal racing with this failure, or kFlushed).
  for (size_t k = c.first_unposted; k < c.ops.size(); ++k) {
    MarkDone(c, c.ops[k], rnic::WcStatus::kFlushed);
  }
  for (Lane& lane : c.lanes) {
    for (uint64_t id : lane.inflight) {
      if (Op* op = c.FindOp(id); op != nullptr) MarkDone(c, *op, rnic::WcStatus::kFlushed);
    }
    lane.inflight.clear();
  }
  FinishInOrder(c, out);
}

void AckUnloaded(ConnectionState& c, int lane_index, uint64_t applied, rnic::WcStatus status,
                 Deferred& out) {
  Lane& lane = c.lanes[lane_index];
  while (!lane.inflight.empty()) {
    Op* op = c.FindOp(lane.inflight.front());
    if (op == nullptr) {
      lane.inflight.pop_front();
      continue;
    }
    if (op->unload_seq >= applied) break;
    MarkDone(c, *op, rnic::WcStatus::kSuccess);
    lane.inflight.pop_front();
    --c.send_wrs;  // its unsignaled WRITE_WITH_IMM is certainly retired by now
  }
  lane.acked_seq = std::max(lane.acked_seq, applied);
  if (status != rnic::WcStatus::kSuccess) {
    if (!lane.inflight.empty()) {
      Op* op = c.FindOp(lane.inflight.front());
      if (op != nullptr) MarkDone(c, *op, status);
    }
    FinishInOrder(c, out);
    FailConnection(c, out, FailScope::kStageFailed);
  }
}

void RetireQuietBefore(ConnectionState& c, uint64_t main_index) {
  while (!c.quiet.empty() && c.quiet.front().main_index < main_index) {
    const ConnectionState::Quiet q = c.quiet.front();
    c.quiet.pop_front();
    --c.send_wrs;
    if (q.send_slot >= 0) {
      c.free_send_slots.push_back(q.send_slot);
    } else if (Op* op = c.FindOp(q.op_id); op != nullptr) {
      MarkDone(c, *op, rnic::WcStatus::kSuccess);
    }
  }
  while (!c.unconfirmed.empty() && c.unconfirmed.front() < main_index) {
    c.unconfirmed.pop_front();
    ++c.messages_confirmed;
  }
}

namespace {

bool Overlaps(const Op& a, uint64_t addr, uint32_t len) {
  return addr < a.remote_addr + a.local.length && a.remote_addr < addr + len;
}

// Of the messages without a callback, and of the lazy writes, every this-many-th is signaled.
uint32_t SignalEvery(const ConnectionState& c) {
  return std::max<uint32_t>(1, c.options.message_slots / 4);
}

// Posts a WR on the main QP, or adds it to the open batch (posted when the batch ends).
bool PostMain(ConnectionState& c, const rnic::SendWorkRequest& wr)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  if (c.batch_depth > 0) {
    c.batched.push_back(wr);
    return true;
  }
  return c.qp->PostSend(wr).ok();
}

// Posts `op` if it can go now; returns false when it must wait (ring, credits, queue depth).
bool TryPost(ConnectionState& c, Op& op) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  if (c.send_wrs >= c.max_send_wrs) return false;
  if (!op.is_write) {
    if (c.message_credits == 0 || c.free_send_slots.empty()) return false;
    op.send_slot = c.free_send_slots.back();
    c.free_send_slots.pop_back();
    char* slot = c.send_slots.data() + size_t(op.send_slot) * c.slot_stride;
    MessageHeader header;
    header.messages_seen = c.messages_received;
    header.credits_returned = c.credits_to_return;
    // The target delivers the message once these many unloaded writes of each lane are applied.
    for (size_t k = 0; k < c.lanes.size(); ++k) {
      header.lane_writes[k] = static_cast<uint32_t>(c.lanes[k].next_seq);
    }
    EncodeMessageHeader(header, static_cast<int>(c.lanes.size()), slot);
    std::memcpy(slot + c.message_header_bytes, op.message.data(), op.message.size());
    // A message nobody waits for goes unsignaled (on the soft RNIC a signaled SEND costs an
    // ACK packet each); every few, and whenever the last free slot is taken, one is signaled
    // so that its completion retires the quiet ones before it and their slots come back.
    const bool signaled = op.send_done != nullptr || c.free_send_slots.empty() ||
                          c.quiet_since_signaled + 1 >= SignalEvery(c);
    rnic::SendWorkRequest wr = rnic::MakeSendWithImm(
        MakeWrId(signaled ? WrKind::kMessage : WrKind::kQuietMessage, c.id,
                 static_cast<uint32_t>(op.id)),
        c.send_mr->Sge(size_t(op.send_slot) * c.slot_stride,
                       static_cast<uint32_t>(c.message_header_bytes + op.message.size())),
        kImmMessage);
    wr.signaled = signaled;
    if (!PostMain(c, wr)) {
      c.free_send_slots.push_back(op.send_slot);
      op.send_slot = -1;
      return false;
    }
    --c.message_credits;
    c.credits_to_return = 0;  // they went back in the header
    ++c.send_wrs;
    op.main_index = c.main_posted++;
    op.posted = true;
    op.posted_at = c.engine->clock().Now();
    std::string().swap(op.message);
    c.unconfirmed.push_back(op.main_index);
    if (signaled) {
      c.quiet_since_signaled = 0;
    } else {
      ++c.quiet_since_signaled;
      c.quiet.push_back({op.main_index, op.send_slot, op.id});
      op.send_slot = -1;
      // No callback to hold back: done once posted (its failure fails the connection).
      MarkDone(c, op, rnic::WcStatus::kSuccess);
    }
    return true;
  }
  const uint32_t len = op.local.length;
  const bool fits = len + kStagingHeaderSize <= c.remote.slot_bytes;
  // Ordering: a write overlapping an in-flight write of the other path, or of another lane,
  // must take that path and lane too (QPs are not ordered with each other); overlapping
  // writes in flight on two of them, it waits.
  int overlap_lane = -1;
  for (size_t k = 0; k < c.lanes.size(); ++k) {
    for (uint64_t id : c.lanes[k].inflight) {
      Op* prior = c.FindOp(id);
      if (prior == nullptr || !Overlaps(*prior, op.remote_addr, len)) continue;
      if (overlap_lane >= 0 && overlap_lane != static_cast<int>(k)) return false;
      overlap_lane = static_cast<int>(k);
    }
  }
  const bool overlap = overlap_lane >= 0;
  bool overlap_offload = false;
  for (size_t k = 0; k < c.first_unposted && k < c.ops.size(); ++k) {
    const Op& prior = c.ops[k];
    if (prior.is_write && prior.posted && !prior.done && prior.path == Path::kOffload &&
        Overlaps(prior, op.remote_addr, len)) {
      overlap_offload = true;
    }
  }
  Path path = op.decision.path;
  if (overlap && overlap_offload) return false;
  if (overlap) {
    if (!fits) return false;
    path = Path::kUnload;
  } else if (overlap_offload) {
    path = Path::kOffload;
  }
  // The lane: the overlapped one, else the least occupied, searching from a rotating start.
  int lane_index = overlap_lane;
  if (path == Path::kUnload && !overlap) {
    uint64_t best = UINT64_MAX;
    const uint32_t n = static_cast<uint32_t>(c.lanes.size());
    for (uint32_t j = 0; j < n; ++j) {
      const uint32_t k = (c.next_lane + j) % n;
      const uint64_t used = c.lanes[k].next_seq - c.lanes[k].acked_seq;
      if (used < best) {
        best = used;
        lane_index = static_cast<int>(k);
      }
    }
  }
  if (path == Path::kUnload &&
      c.lanes[lane_index].next_seq - c.lanes[lane_index].acked_seq >= c.remote.ring_slots) {
    if (overlap || c.policy->OnRingFull() == FullRingAction::kWait) return false;
    path = Path::kOffload;
  }
  rnic::SendWorkRequest wr;
  if (path == Path::kOffload) {
    wr = rnic::MakeWrite(MakeWrId(WrKind::kOffloadWrite, c.id, static_cast<uint32_t>(op.id)),
                         op.local, op.remote_addr, op.rkey);
    // A lazy write may go unsignaled (no ACK for it on the soft RNIC), except every few, whose
    // latency the policy learns from and whose completion retires the quiet ones before it.
    wr.signaled = !op.lazy || c.lazy_writes_since_signaled + 1 >= SignalEvery(c);
  } else {
    Lane& lane = c.lanes[lane_index];
    const uint64_t seq = lane.next_seq;
    const uint32_t slot = static_cast<uint32_t>(seq % c.remote.ring_slots);
    // Slot of the whole ring (lane after lane); the immediate names the slot within the lane.
    const uint64_t ring_slot = uint64_t(lane_index) * c.remote.ring_slots + slot;
    StagingHeader h{len, seq, op.remote_addr, op.rkey};
    EncodeStagingHeader(h, c.headers.data() + ring_slot * kStagingHeaderSize);
    wr.wr_id = MakeWrId(WrKind::kUnloadWrite, c.id, static_cast<uint32_t>(op.id));
    wr.opcode = rnic::Opcode::kWriteWithImm;
    wr.sg_list[0] = c.headers_mr->Sge(ring_slot * kStagingHeaderSize, kStagingHeaderSize);
    wr.sg_list[1] = op.local;
    wr.num_sge = len > 0 ? 2 : 1;
    wr.remote_addr = c.remote.ring_addr + ring_slot * c.remote.slot_bytes;
    wr.rkey = c.remote.ring_rkey;
    wr.imm = slot;
    // Unsignaled: the engine's ack says more than the NIC's completion would (applied, not
    // just delivered), and retires the send-queue entry (see AckUnloaded). Errors still
    // complete.
    wr.signaled = false;
    if (!lane.qp->PostSend(wr).ok()) return false;
    op.lane = lane_index;
    op.unload_seq = seq;
    ++lane.next_seq;
    lane.inflight.push_back(op.id);
    c.next_lane = static_cast<uint32_t>(lane_index + 1) % c.lanes.size();
    if (c.options.metrics != nullptr) {
      uint64_t used = 0;
      for (const Lane& l : c.lanes) used += l.next_seq - l.acked_seq;
      c.options.metrics->OnRingOccupancy(static_cast<uint32_t>(used),
                                         c.remote.ring_slots * uint32_t(c.lanes.size()));
    }
  }
  if (path == Path::kOffload) {
    if (!PostMain(c, wr)) return false;
    op.main_index = c.main_posted++;
    if (wr.signaled) {
      c.lazy_writes_since_signaled = 0;
    } else {
      ++c.lazy_writes_since_signaled;
      op.quiet = true;
      c.quiet.push_back({op.main_index, -1, op.id});
    }
  }
  op.path = path;
  op.posted = true;
  op.posted_at = c.engine->clock().Now();
  ++c.send_wrs;
  return true;
}

}  // namespace

void PostReady(ConnectionState& c, Deferred& out) {
  // Post in order; the first op that cannot go holds back the ones behind it.
  while (!c.failed && c.first_unposted < c.ops.size()) {
    if (!TryPost(c, c.ops[c.first_unposted])) break;
    ++c.first_unposted;
  }
}

// ---------------------------------------------------------------------------- Connection

Connection::~Connection() {
  Deferred out;
  {
    MutexLock l(&state_->mu);
    FailConnection(*state_, out, FailScope::kClose);
    // The worker forgets this connection below: complete whatever is still waiting.
    for (Op& op : state_->ops) MarkDone(*state_, op, rnic::WcStatus::kFlushed);
    FinishInOrder(*state_, out);
  }
  for (auto& f : out) f();
  for (const std::unique_ptr<Engine::Worker>& w : state_->engine->workers_) {
    MutexLock l(&w->mu);
    w->conns.erase(state_->id);
  }
}

const ConnectionInfo& Connection::local_info() const { return state_->local; }

Connection::Batch::~Batch() {
  if (state_ == nullptr) return;
  ConnectionState& c = *state_;
  Deferred out;
  {
    MutexLock l(&c.mu);
    if (--c.batch_depth == 0 && !c.batched.empty()) {
      std::vector<rnic::SendWorkRequest> wrs;
      wrs.swap(c.batched);
      if (c.failed || !c.qp->PostSend(wrs).ok()) {
        // The NIC took none of them, so none will complete through the QP: they fail here.
        const uint64_t first = c.main_posted - wrs.size();
        for (size_t k = 0; k < c.first_unposted && k < c.ops.size(); ++k) {
          Op& op = c.ops[k];
          const bool on_main = !op.is_write || op.path == Path::kOffload;
          if (op.posted && on_main && op.main_index >= first) {
            MarkDone(c, op, rnic::WcStatus::kFlushed);
          }
        }
        FailConnection(c, out, FailScope::kMainFailed);
        FinishInOrder(c, out);
      }
    }
  }
  for (auto& f : out) f();
}

Connection::Batch Connection::BeginBatch() {
  MutexLock l(&state_->mu);
  ++state_->batch_depth;
  return Batch(state_.get());
}

Connection::QueueState Connection::queue_state() const {
  MutexLock l(&state_->mu);
  return {static_cast<uint32_t>(state_->free_send_slots.size()), state_->send_wrs};
}

bool Connection::failed() const {
  MutexLock l(&state_->mu);
  return state_->failed;
}

uint64_t Connection::messages_received() const {
  MutexLock l(&state_->mu);
  return state_->messages_received;
}

void Connection::SetMessageHandler(MessageHandler handler) {
  {
    MutexLock l(&state_->mu);
    std::swap(state_->handler, handler);
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
  if (remote.ring_slots == 0 || remote.ring_slots > 65536 ||
      remote.slot_bytes < kStagingHeaderSize || remote.slot_bytes > (64u << 20) ||
      remote.message_slots == 0 || remote.message_slots > kMaxMessageSlots ||
      remote.max_message_bytes < 64 || remote.ring_addr == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Connect: peer parameters out of range: ", EncodeConnectionInfo(remote)));
  }
  MutexLock l(&c.mu);
  if (c.connected) return absl::FailedPreconditionError("Connect: already connected");
  // Outgoing staging headers, one per slot of the peer's ring (its size is the peer's choice).
  // Deregistered before the buffer moves (a Connect that failed may be retried).
  c.headers_mr.reset();
  c.headers.assign(c.lanes.size() * remote.ring_slots * kStagingHeaderSize, 0);
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
  c.message_credits = remote.message_slots;
  c.connected = true;
  return absl::OkStatus();
}

absl::Status Connection::Write(const rnic::ScatterGatherEntry& local, uint64_t remote_addr,
                               uint32_t rkey, WriteCallback done, std::optional<Path>* posted_path,
                               const WriteOptions& options) {
  ConnectionState& c = *state_;
  Deferred out;
  {
    MutexLock l(&c.mu);
    if (!c.connected || c.failed) {
      return absl::FailedPreconditionError(c.failed ? "Write: connection has failed"
                                                    : "Write: connection is not connected");
    }
    if (local.length > c.engine->device()->limits().max_message_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("Write: ", local.length, " bytes over the limit"));
    }
    Op& op = c.ops.emplace_back();
    op.id = c.next_op_id++;
    op.is_write = true;
    op.local = local;
    op.remote_addr = remote_addr;
    op.rkey = rkey;
    op.write_done = std::move(done);
    op.lazy = options.lazy_completion;
    op.submitted = c.engine->clock().Now();
    op.decision = c.policy->Decide(remote_addr, local.length,
                                   local.length + kStagingHeaderSize <= c.remote.slot_bytes);
    op.path = op.decision.path;
    PostReady(c, out);
    if (posted_path != nullptr) {
      *posted_path = op.posted ? std::optional<Path>(op.path) : std::nullopt;
    }
  }
  for (auto& f : out) f();
  return absl::OkStatus();
}

absl::Status Connection::Send(absl::Span<const char> message, SendCallback done) {
  ConnectionState& c = *state_;
  Deferred out;
  {
    MutexLock l(&c.mu);
    if (!c.connected || c.failed) {
      return absl::FailedPreconditionError(c.failed ? "Send: connection has failed"
                                                    : "Send: connection is not connected");
    }
    uint32_t limit = std::min(c.options.max_message_bytes, c.remote.max_message_bytes);
    if (message.size() > limit) {
      return absl::InvalidArgumentError(
          absl::StrCat("Send: message of ", message.size(), " bytes, limit ", limit));
    }
    Op& op = c.ops.emplace_back();
    op.id = c.next_op_id++;
    op.is_write = false;
    op.message.assign(message.data(), message.size());
    op.send_done = std::move(done);
    op.submitted = c.engine->clock().Now();
    PostReady(c, out);
  }
  for (auto& f : out) f();
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------- Engine

Engine::Engine(rnic::Device* device, const EngineOptions& options)
    : device_(device), options_(options), table_(std::make_shared<ValidationTable>()) {}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(rnic::Device* device,
                                                       const EngineOptions& options) {
  if (device == nullptr) return absl::InvalidArgumentError("Engine: no device");
  if (options.unload_workers < 1 || options.unload_workers > kMaxUnloadWorkers) {
    return absl::InvalidArgumentError(
        absl::StrCat("Engine: unload_workers must be in 1..", kMaxUnloadWorkers));
  }
  if (options.staging_lanes < 1 || options.staging_lanes > kMaxLanes) {
    return absl::InvalidArgumentError(
        absl::StrCat("Engine: staging_lanes must be in 1..", kMaxLanes));
  }
  if (options.staging_slots < 1 || options.staging_slots > kMaxStagingSlots ||
      options.staging_slot_bytes < 64 || options.staging_slot_bytes > (64u << 20)) {
    return absl::InvalidArgumentError(absl::StrCat("Engine: staging_slots must be in 1..",
                                                   kMaxStagingSlots,
                                                   " and staging_slot_bytes in 64..64 MiB"));
  }
  if (options.message_slots < 1 || options.message_slots > kMaxMessageSlots ||
      options.max_message_bytes < 64 || options.max_message_bytes > (1u << 20)) {
    return absl::InvalidArgumentError(absl::StrCat("Engine: message_slots must be in 1..",
                                                   kMaxMessageSlots,
                                                   " and max_message_bytes in 64..1 MiB"));
  }
  std::unique_ptr<Engine> e(new Engine(device, options));
  for (int i = 0; i < options.unload_workers; ++i) {
    auto w = std::make_unique<Worker>();
    w->index = i;
    absl::StatusOr<std::unique_ptr<rnic::CompletionQueue>> cq = device->CreateCompletionQueue(4096);
    if (!cq.ok()) return cq.status();
    w->cq = std::move(*cq);
    e->workers_.push_back(std::move(w));
  }
  MappedMemory probe(size_t{2} << 20, options.huge_pages);
  e->staging_memory_ = !probe.huge() && options.huge_pages && device->models_host()
                           ? "2 MiB huge pages (modeled node)"
                           : DescribePages(probe, options.huge_pages);
  return e;
}

Engine::~Engine() { Stop(); }

namespace {
class EngineMemoryRegion : public rnic::MemoryRegion {
 public:
  EngineMemoryRegion(std::unique_ptr<rnic::MemoryRegion> inner,
                     std::shared_ptr<ValidationTable> table)
      : MemoryRegion(Description{inner->addr(), inner->length(), inner->lkey(), inner->rkey(),
                                 inner->access(), inner->page_size()}),
        inner_(std::move(inner)),
        table_(std::move(table)) {}
  ~EngineMemoryRegion() override {
    MutexLock l(&table_->mu);
    table_->regions.Erase(rkey());
  }

 private:
  std::unique_ptr<rnic::MemoryRegion> inner_;
  std::shared_ptr<ValidationTable> table_;
};
}  // namespace

absl::StatusOr<std::unique_ptr<rnic::MemoryRegion>> Engine::RegisterMemory(void* addr,
                                                                           size_t length,
                                                                           uint32_t access) {
  absl::StatusOr<std::unique_ptr<rnic::MemoryRegion>> mr =
      device_->RegisterMemory(addr, length, access);
  if (!mr.ok()) return mr.status();
  {
    MutexLock l(&table_->mu);
    table_->regions.Insert((*mr)->rkey(), {(*mr)->address(), (*mr)->length(), (*mr)->access()});
  }
  return std::unique_ptr<rnic::MemoryRegion>(new EngineMemoryRegion(std::move(*mr), table_));
}

absl::StatusOr<std::unique_ptr<Connection>> Engine::CreateConnection(
    std::unique_ptr<PathPolicy> policy) {
  if (policy == nullptr) return absl::InvalidArgumentError("CreateConnection: no policy");
  auto c = std::make_shared<ConnectionState>();
  c->engine = this;
  c->options = options_;
  c->id = next_connection_++ & 0xffffff;
  c->worker = static_cast<int>(c->id % workers_.size());
  c->policy = std::move(policy);
  const EngineOptions& o = options_;
  const uint32_t lanes = static_cast<uint32_t>(o.staging_lanes);
  // Receives: messages, then per lane staged writes (our ring) and the peer's acks.
  c->stage_recvs_per_lane = o.staging_slots + kAckSlots;
  c->recv_count = o.message_slots + lanes * c->stage_recvs_per_lane;
  c->max_send_wrs = lanes * (o.staging_slots + kAckSlots) + o.message_slots + kOffloadedWrBudget;
  c->message_header_bytes = MessageHeaderBytes(o.staging_lanes);
  rnic::QpConfig cfg;
  cfg.send_cq = workers_[c->worker]->cq.get();
  cfg.recv_cq = cfg.send_cq;
  cfg.max_send_wr = c->max_send_wrs + kAckSlots;
  cfg.max_recv_wr = o.message_slots;
  cfg.rnr_timeout = absl::InfiniteDuration();  // the peer engine always reposts
  absl::StatusOr<std::unique_ptr<rnic::QueuePair>> qp = device_->CreateQueuePair(cfg);
  if (!qp.ok()) return qp.status();
  c->qp = std::move(*qp);
  c->lanes.resize(lanes);
  for (uint32_t k = 0; k < lanes; ++k) {
    Lane& lane = c->lanes[k];
    lane.worker = static_cast<int>((c->worker + k) % workers_.size());
    cfg.send_cq = workers_[lane.worker]->cq.get();
    cfg.recv_cq = cfg.send_cq;
    cfg.max_recv_wr = c->stage_recvs_per_lane;
    qp = device_->CreateQueuePair(cfg);
    if (!qp.ok()) return qp.status();
    lane.qp = std::move(*qp);
  }

  c->ring = std::make_unique<MappedMemory>(size_t{lanes} * o.staging_slots * o.staging_slot_bytes,
                                           o.huge_pages);
  if (c->ring->data() == nullptr) return absl::ResourceExhaustedError("staging ring: mmap failed");
  // On a modeled node, huge pages requested are huge pages had (whatever this host offers).
  const bool huge = c->ring->huge() || (o.huge_pages && device_->models_host());
  uint32_t ring_access =
      rnic::kLocalWrite | rnic::kRemoteWrite | (huge ? uint32_t{rnic::kHugePageBacked} : 0u);
  auto reg = [&](void* p, size_t n, uint32_t access,
                 std::unique_ptr<rnic::MemoryRegion>* out) -> absl::Status {
    absl::StatusOr<std::unique_ptr<rnic::MemoryRegion>> mr = device_->RegisterMemory(p, n, access);
    if (!mr.ok()) return mr.status();
    *out = std::move(*mr);
    return absl::OkStatus();
  };
  c->slot_stride = c->message_header_bytes + o.max_message_bytes;
  c->send_slots.assign(size_t{o.message_slots} * c->slot_stride, 0);
  c->recv_buffers.assign(size_t{o.message_slots} * c->slot_stride, 0);
  c->stage_recv_buffers.assign(size_t{c->recv_count - o.message_slots} * kAckBytes, 0);
  c->acks.assign(size_t{lanes} * kAckSlots * kAckBytes, 0);
  for (absl::Status st :
       {reg(c->ring->data(), c->ring->size(), ring_access, &c->ring_mr),
        reg(c->send_slots.data(), c->send_slots.size(), 0, &c->send_mr),
        reg(c->recv_buffers.data(), c->recv_buffers.size(), rnic::kLocalWrite, &c->recv_mr),
        reg(c->stage_recv_buffers.data(), c->stage_recv_buffers.size(), rnic::kLocalWrite,
            &c->stage_recv_mr),
        reg(c->acks.data(), c->acks.size(), 0, &c->acks_mr)}) {
    if (!st.ok()) return st;
  }
  for (uint32_t i = 0; i < o.message_slots; ++i) c->free_send_slots.push_back(i);
  {
    MutexLock l(&c->mu);
    for (uint32_t i = 0; i < c->recv_count; ++i) Repost(*c, i);
  }
  c->local.qp = c->qp->local_attributes();
  for (const Lane& lane : c->lanes) {
    c->local.staging.push_back({lane.qp->qp_num(), lane.qp->local_attributes().psn});
  }
  c->local.ring_addr = c->ring_mr->address();
  c->local.ring_rkey = c->ring_mr->rkey();
  c->local.ring_slots = o.staging_slots;
  c->local.slot_bytes = o.staging_slot_bytes;
  c->local.message_slots = o.message_slots;
  c->local.max_message_bytes = o.max_message_bytes;
  for (size_t k = 0; k < workers_.size(); ++k) {
    bool serves = static_cast<int>(k) == c->worker;
    for (const Lane& lane : c->lanes) serves |= lane.worker == static_cast<int>(k);
    if (!serves) continue;
    MutexLock l(&workers_[k]->mu);
    workers_[k]->conns[c->id] = c;
  }
  return std::unique_ptr<Connection>(new Connection(std::move(c)));
}

int Engine::PollOnce() {
  int n = 0;
  for (auto& w : workers_) n += w->PollOnce(*table_, options_.metrics);
  return n;
}

void Engine::Start() {
  if (!threads_.empty()) return;
  stop_.store(false);
  for (auto& w : workers_) {
    threads_.emplace_back([this, worker = w.get()] {
      while (!stop_.load(std::memory_order_acquire)) {
        if (worker->PollOnce(*table_, options_.metrics) > 0) continue;
        rnic::WaitForWork(*device_, *worker->cq, absl::Milliseconds(1),
                          [&] { return worker->PollOnce(*table_, options_.metrics) > 0; });
      }
    });
  }
}

int Engine::Drive(absl::Duration max_wait) {
  int n = PollOnce();
  if (n > 0) return n;
  // A caller-driven engine has one worker worth waiting on (the SDK's has exactly one).
  rnic::WaitForWork(*device_, *workers_.front()->cq, max_wait, [&] {
    n = PollOnce();
    return n > 0;
  });
  return n > 0 ? n : PollOnce();
}

void Engine::Stop() {
  stop_.store(true, std::memory_order_release);
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

}  // namespace unloadkv::engine
