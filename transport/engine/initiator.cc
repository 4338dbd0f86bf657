// The initiator side: Write, Send and Batch queue ops; PostReady posts them in order, each down
// the path its policy (and the ordering rules) choose.
#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "transport/base/buggify.h"
#include "transport/base/logging.h"
#include "transport/engine/engine.h"
#include "transport/engine/engine_internal.h"
#include "transport/engine/staging_header.h"

namespace unloadkv::engine {

namespace {

bool Overlaps(const Op& a, uint64_t addr, uint32_t len) {
  return addr < a.remote_addr + a.local.length && a.remote_addr < addr + len;
}

// Posts a WR on the main QP, or adds it to the open batch (posted when the batch ends).
absl::Status PostMain(ConnectionState& c, const rnic::SendWorkRequest& wr)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  if (c.initiator.batch_depth > 0) {
    c.initiator.batched.push_back(wr);
    return absl::OkStatus();
  }
  return c.qp->PostSend(wr);
}

// Posts message `op` if a send slot and a credit are free: true posted, false must wait.
absl::StatusOr<bool> PostMessage(ConnectionState& c, Op& op) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  if (c.initiator.message_credits == 0) return false;
  if (c.initiator.free_send_slots.empty()) {
    if (c.send_reserve + c.initiator.send_borrowed >= c.options.message_slots) return false;
    const std::optional<uint32_t> lent = c.send_pool->Borrow();
    if (!lent) return false;  // retried when one of this connection's own slots comes back
    ++c.initiator.send_borrowed;
    c.initiator.free_send_slots.push_back(static_cast<int>(*lent));
  }
  op.send_slot = c.initiator.free_send_slots.back();
  c.initiator.free_send_slots.pop_back();
  char* slot = c.send_pool->slot(static_cast<uint32_t>(op.send_slot));
  if (c.target.withheld > 0 && c.initiator.queued_messages <= c.options.message_slots) {
    // The peer takes our messages again (this one leaves the backlog): its credits go back.
    c.target.credits_to_return += c.target.withheld;
    c.target.withheld = 0;
  }
  MessageHeader header;
  header.messages_seen = c.target.messages_received;
  header.credits_returned = c.target.credits_to_return;
  // Out of credits after this one with more queued behind it: the peer lends more (or not).
  header.wants_credits =
      c.initiator.message_credits == 1 && c.initiator.first_unposted + 1 < c.initiator.ops.size();
  // The target delivers the message once these many unloaded writes of each lane are applied.
  for (size_t k = 0; k < c.lanes.size(); ++k) {
    header.lane_writes[k] = static_cast<uint32_t>(c.lanes[k].next_seq);
  }
  EncodeMessageHeader(header, static_cast<int>(c.lanes.size()), slot);
  std::memcpy(slot + c.message_header_bytes, op.message.data(), op.message.size());
  // A message nobody waits for goes unsignaled (on the soft RNIC a signaled SEND costs an
  // ACK packet each); every few one is signaled, so that its completion retires the quiet
  // ones before it and their slots come back. A connection owns at least that many slots
  // (SendReserve), so it cannot hold all of them in quiet messages with none signaled after.
  const bool signaled =
      op.send_done != nullptr || c.initiator.quiet_since_signaled + 1 >= SignalEvery(c.options);
  const uint64_t wr_id = MakeWrId(signaled ? WrKind::kMessage : WrKind::kQuietMessage, c.id,
                                  static_cast<uint32_t>(op.id));
  const rnic::ScatterGatherEntry sge =
      c.send_pool->Sge(static_cast<uint32_t>(op.send_slot),
                       static_cast<uint32_t>(c.message_header_bytes + op.message.size()));
  // A message carries kImmMessage, or, invalidating a window of the peer's, no immediate (a
  // verbs SEND has one or the other); the peer takes either as a message.
  rnic::SendWorkRequest wr = op.invalidate_rkey != 0
                                 ? rnic::MakeSendWithInvalidate(wr_id, sge, op.invalidate_rkey)
                                 : rnic::MakeSendWithImm(wr_id, sge, kImmMessage);
  wr.signaled = signaled;
  if (absl::Status st = PostMain(c, wr); !st.ok()) {
    ReleaseSendSlot(c, op.send_slot);
    op.send_slot = -1;
    return st;
  }
  --c.initiator.message_credits;
  --c.initiator.queued_messages;
  c.target.granted += c.target.credits_to_return;  // they went back in the header
  c.target.credits_to_return = 0;
  ++c.initiator.send_wrs;
  op.main_index = c.initiator.main_posted++;
  op.posted = true;
  if (op.message.capacity() <= InitiatorState::kSpareMessageBytes &&
      c.initiator.spare_bytes + op.message.capacity() <= InitiatorState::kSpareBytes) {
    op.message.clear();
    c.initiator.spare_bytes += op.message.capacity();
    c.initiator.spare_messages.push_back(std::move(op.message));
  }
  std::string().swap(op.message);
  c.initiator.unconfirmed.push_back(op.main_index);
  if (signaled) {
    c.initiator.quiet_since_signaled = 0;
  } else {
    ++c.initiator.quiet_since_signaled;
    c.initiator.quiet.push_back({op.main_index, op.send_slot, op.id});
    op.send_slot = -1;
    // No callback to hold back: done once posted (its failure fails the connection).
    MarkDone(c, op, rnic::WcStatus::kSuccess);
  }
  return true;
}

// Where a write goes: its path and, unloaded, its staging lane.
struct Route {
  Path path = Path::kOffload;
  int lane = -1;
};

// The route of write `op`, or nullopt when it must wait. The policy's choice, unless ordering
// overrides it: a write overlapping an in-flight write of the other path, or of another lane,
// must take that path and lane too (QPs are not ordered with each other); overlapping writes
// in flight on two of them, it waits. A full ring waits or falls back to offload, by policy.
std::optional<Route> ChoosePathAndLane(ConnectionState& c, const Op& op)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  const uint32_t len = op.local.length;
  const bool fits = len + kStagingHeaderSize <= c.remote.slot_bytes;
  int overlap_lane = -1;
  for (size_t k = 0; k < c.lanes.size(); ++k) {
    for (uint64_t id : c.lanes[k].inflight) {
      Op* prior = c.initiator.FindOp(id);
      if (prior == nullptr || !Overlaps(*prior, op.remote_addr, len)) continue;
      if (overlap_lane >= 0 && overlap_lane != static_cast<int>(k)) return std::nullopt;
      overlap_lane = static_cast<int>(k);
    }
  }
  const bool overlap = overlap_lane >= 0;
  bool overlap_offload = false;
  for (size_t k = 0; k < c.initiator.first_unposted && k < c.initiator.ops.size(); ++k) {
    const Op& prior = c.initiator.ops[k];
    if (prior.is_write && prior.posted && !prior.done && prior.path == Path::kOffload &&
        Overlaps(prior, op.remote_addr, len)) {
      overlap_offload = true;
    }
  }
  Route r{op.decision.path, overlap_lane};
  // Fault point: the path the policy did not choose (ordering across paths must hold anyway).
  if (!overlap && !overlap_offload && fits && !c.lanes.empty() &&
      UNLOADKV_BUGGIFY("engine: a write takes the other path")) {
    r.path = r.path == Path::kUnload ? Path::kOffload : Path::kUnload;
  }
  if (overlap && overlap_offload) return std::nullopt;
  if (overlap) {
    if (!fits) return std::nullopt;
    r.path = Path::kUnload;
  } else if (overlap_offload) {
    r.path = Path::kOffload;
  }
  // The lane: the overlapped one, else the least occupied, searching from a rotating start.
  if (r.path == Path::kUnload && !overlap) {
    uint64_t best = UINT64_MAX;
    const uint32_t n = static_cast<uint32_t>(c.lanes.size());
    for (uint32_t j = 0; j < n; ++j) {
      const uint32_t k = (c.initiator.next_lane + j) % n;
      const uint64_t used = c.lanes[k].next_seq - c.lanes[k].acked_seq;
      if (used < best) {
        best = used;
        r.lane = static_cast<int>(k);
      }
    }
  }
  if (r.path == Path::kUnload && !LaneHasRoom(c, c.lanes[r.lane])) {
    // Out of credits with writes in flight while the peer may still widen the window: more
    // come with their ack (a write sent offload now would pay the miss unloading avoids).
    const Lane& lane = c.lanes[r.lane];
    const bool growing =
        !lane.inflight.empty() && lane.limit - lane.acked_seq < c.remote.staging_slots;
    if (overlap || growing || c.policy->OnRingFull() == FullRingAction::kWait) {
      return std::nullopt;
    }
    r.path = Path::kOffload;
  }
  return r;
}

// Posts write `op` as an RDMA WRITE on the main QP.
absl::Status PostOffloaded(ConnectionState& c, Op& op) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  rnic::SendWorkRequest wr =
      rnic::MakeWrite(MakeWrId(WrKind::kOffloadWrite, c.id, static_cast<uint32_t>(op.id)), op.local,
                      op.remote_addr, op.rkey);
  // A lazy write may go unsignaled (no ACK for it on the soft RNIC), except every few, whose
  // latency the policy learns from and whose completion retires the quiet ones before it, and
  // those whose latency the policy asked for.
  wr.signaled = !op.lazy || op.decision.observe ||
                c.initiator.lazy_writes_since_signaled + 1 >= SignalEvery(c.options);
  if (absl::Status st = PostMain(c, wr); !st.ok()) return st;
  op.main_index = c.initiator.main_posted++;
  if (wr.signaled) {
    c.initiator.lazy_writes_since_signaled = 0;
  } else {
    ++c.initiator.lazy_writes_since_signaled;
    op.quiet = true;
    c.initiator.quiet.push_back({op.main_index, -1, op.id});
  }
  return absl::OkStatus();
}

// Posts write `op` as a SEND_WITH_IMM of header + payload on `lane_index`'s staging QP, into
// a buffer of the peer's staging pool (LaneHasRoom said it may).
absl::Status PostUnloaded(ConnectionState& c, Op& op, int lane_index)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  const uint32_t len = op.local.length;
  Lane& lane = c.lanes[lane_index];
  const uint64_t seq = lane.next_seq;
  // One header per credit the peer may grant (the acks keep at most staging_slots in flight).
  const uint64_t header =
      uint64_t(lane_index) * c.remote.staging_slots + seq % c.remote.staging_slots;
  // Asks for a larger window when a write waited for credits, and when this one takes the
  // last credit: a window that fills asks before it runs out, so a steady writer keeps one
  // larger than what it has in flight (the target lowers it again while half of it is unused).
  StagingHeader h{len, seq, op.remote_addr, op.rkey, lane.starved || seq + 1 >= lane.limit};
  EncodeStagingHeader(h, c.headers.data() + header * kStagingHeaderSize);
  rnic::SendWorkRequest wr;
  wr.wr_id = MakeWrId(WrKind::kUnloadWrite, c.id, static_cast<uint32_t>(op.id));
  wr.opcode = rnic::Opcode::kSendWithImm;
  wr.sg_list[0] = c.headers_mr->Sge(header * kStagingHeaderSize, kStagingHeaderSize);
  wr.sg_list[1] = op.local;
  wr.num_sge = len > 0 ? 2 : 1;
  wr.imm = kImmStaged;
  // Unsignaled: the engine's ack says more than the NIC's completion would (applied, not just
  // delivered), and retires the send-queue entry (see AckUnloaded). Errors still complete.
  wr.signaled = false;
  if (absl::Status st = lane.qp->PostSend(wr); !st.ok()) return st;
  op.lane = lane_index;
  op.unload_seq = seq;
  lane.starved = false;
  ++lane.next_seq;
  lane.inflight.push_back(op.id);
  c.initiator.next_lane = static_cast<uint32_t>(lane_index + 1) % c.lanes.size();
  if (c.options.metrics != nullptr) {
    uint64_t used = 0;
    for (const Lane& l : c.lanes) used += l.next_seq - l.acked_seq;
    c.options.metrics->OnRingOccupancy(static_cast<uint32_t>(used),
                                       c.remote.staging_slots * uint32_t(c.lanes.size()));
  }
  return absl::OkStatus();
}

// Posts `op` if it can go now: true posted, false must wait (queue depth, ring, credits,
// ordering). An error is a post the NIC refused: the connection cannot go on.
absl::StatusOr<bool> TryPost(ConnectionState& c, Op& op) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  if (c.initiator.send_wrs >= c.initiator.max_send_wrs) return false;
  if (!op.is_write) return PostMessage(c, op);
  if (!op.decided) {
    // Decided when it may go rather than when submitted: a backlogged connection's writes
    // would otherwise all be decided before the first of them completes (a shard's transfer
    // submits tens of thousands at once), and the policy could learn nothing for them.
    op.decision = c.policy->Decide(op.remote_addr, op.local.length,
                                   op.local.length + kStagingHeaderSize <= c.remote.slot_bytes);
    op.path = op.decision.path;
    op.decided = true;
    op.decided_at = c.engine->clock().Now();
  }
  const std::optional<Route> route = ChoosePathAndLane(c, op);
  if (!route) return false;
  const absl::Status st =
      route->path == Path::kOffload ? PostOffloaded(c, op) : PostUnloaded(c, op, route->lane);
  if (!st.ok()) return st;
  op.path = route->path;
  op.posted = true;
  op.posted_at = c.engine->clock().Now();
  ++c.initiator.send_wrs;
  return true;
}

}  // namespace

void PostReady(ConnectionState& c, Deferred& out) {
  // Post in order; the first op that cannot go holds back the ones behind it.
  while (!c.failed && c.initiator.first_unposted < c.initiator.ops.size()) {
    const absl::StatusOr<bool> posted = TryPost(c, c.initiator.ops[c.initiator.first_unposted]);
    if (!posted.ok()) {
      Log(LogLevel::kWarning, absl::StrCat("engine: connection ", c.id,
                                           ": posting failed: ", posted.status().message()));
      FailConnection(c, out, FailScope::kClose);
      break;
    }
    if (!*posted) break;
    ++c.initiator.first_unposted;
  }
}

// ---------------------------------------------------------------------------- Connection

void HoldPosts(ConnectionState& c) {
  MutexLock l(&c.mu);
  ++c.initiator.batch_depth;
}

void ReleasePosts(ConnectionState& c) {
  Deferred out;
  bool run = false;  // TakeCallbacks took them: run them after the lock
  {
    MutexLock l(&c.mu);
    if (--c.initiator.batch_depth == 0 && !c.initiator.batched.empty()) {
      // The batch leaves `batched` empty for the next one, both keeping their capacity.
      std::vector<rnic::SendWorkRequest>& wrs = c.initiator.batched_spare;
      wrs.swap(c.initiator.batched);
      if (c.failed || !c.qp->PostSend(wrs).ok()) {
        // The NIC took none of them, so none will complete through the QP: they fail here.
        const uint64_t first = c.initiator.main_posted - wrs.size();
        for (size_t k = 0; k < c.initiator.first_unposted && k < c.initiator.ops.size(); ++k) {
          Op& op = c.initiator.ops[k];
          const bool on_main = !op.is_write || op.path == Path::kOffload;
          if (op.posted && on_main && op.main_index >= first) {
            MarkDone(c, op, rnic::WcStatus::kFlushed);
          }
        }
        FailConnection(c, out, FailScope::kMainFailed);
        FinishInOrder(c, out);
      }
      wrs.clear();
    }
    run = TakeCallbacks(c, out);
  }
  if (run) RunTakenCallbacks(c, out);
}

Connection::Batch::~Batch() {
  if (state_ != nullptr) ReleasePosts(*state_);
}

Connection::Batch Connection::BeginBatch() {
  HoldPosts(*state_);
  return Batch(state_.get());
}

namespace {

// FailedPrecondition naming `what` unless the connection is connected and has not failed.
absl::Status CheckUsable(const ConnectionState& c, absl::string_view what)
    ABSL_SHARED_LOCKS_REQUIRED(c.mu) {
  if (c.connected && !c.failed) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(what, c.failed ? ": connection has failed" : ": connection is not connected"));
}

}  // namespace

absl::Status Connection::Write(const rnic::ScatterGatherEntry& local, uint64_t remote_addr,
                               uint32_t rkey, WriteCallback done, std::optional<Path>* posted_path,
                               const WriteOptions& options) {
  ConnectionState& c = *state_;
  Deferred out;
  bool run = false;  // TakeCallbacks took them: run them after the lock
  {
    MutexLock l(&c.mu);
    if (absl::Status st = CheckUsable(c, "Write"); !st.ok()) return st;
    if (local.length > c.engine->device()->limits().max_message_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("Write: ", local.length, " bytes over the limit"));
    }
    Op& op = c.initiator.ops.emplace_back();
    op.id = c.initiator.next_op_id++;
    op.is_write = true;
    op.local = local;
    op.remote_addr = remote_addr;
    op.rkey = rkey;
    op.write_done = std::move(done);
    op.lazy = options.lazy_completion;
    op.submitted = c.engine->clock().Now();
    if (c.options.checks != nullptr) {
      c.options.checks->WriteIssued(c.check_name, op.id, reinterpret_cast<const void*>(local.addr),
                                    local.length, remote_addr, rkey);
    }
    PostReady(c, out);
    op.waited = !op.posted;
    if (posted_path != nullptr) {
      *posted_path = op.posted ? std::optional<Path>(op.path) : std::nullopt;
    }
    run = TakeCallbacks(c, out);
  }
  if (run) RunTakenCallbacks(c, out);
  return absl::OkStatus();
}

absl::Status Connection::Send(absl::Span<const char> message, SendCallback done,
                              const SendOptions& options) {
  ConnectionState& c = *state_;
  Deferred out;
  bool run = false;  // TakeCallbacks took them: run them after the lock
  {
    MutexLock l(&c.mu);
    if (absl::Status st = CheckUsable(c, "Send"); !st.ok()) return st;
    uint32_t limit = std::min(c.options.max_message_bytes, c.remote.max_message_bytes);
    if (message.size() > limit) {
      return absl::InvalidArgumentError(
          absl::StrCat("Send: message of ", message.size(), " bytes, limit ", limit));
    }
    Op& op = c.initiator.ops.emplace_back();
    op.id = c.initiator.next_op_id++;
    op.is_write = false;
    if (!c.initiator.spare_messages.empty()) {
      op.message = std::move(c.initiator.spare_messages.back());
      c.initiator.spare_messages.pop_back();
      c.initiator.spare_bytes -= op.message.capacity();
    }
    op.message.assign(message.data(), message.size());
    op.invalidate_rkey = options.invalidate_rkey;
    ++c.initiator.queued_messages;
    op.send_done = std::move(done);
    if (c.options.checks != nullptr) {
      c.options.checks->MessageIssued(c.check_name, c.initiator.messages_issued, op.id);
    }
    ++c.initiator.messages_issued;
    PostReady(c, out);
    run = TakeCallbacks(c, out);
  }
  if (run) RunTakenCallbacks(c, out);
  return absl::OkStatus();
}

}  // namespace unloadkv::engine
