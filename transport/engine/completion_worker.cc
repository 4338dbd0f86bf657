// The completion worker: polls a worker's CQ and dispatches each completion by kind to the
// initiator's bookkeeping (sends completed, acks received), the target's apply path (staged
// writes) or message delivery (in order behind the unloaded writes they follow).
#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "transport/base/logging.h"
#include "transport/engine/engine_internal.h"

namespace unloadkv::engine {
namespace {

// Adds credits the peer returned; more than it could owe fails the connection.
bool TakeCredits(ConnectionState& c, uint32_t credits, Deferred& out)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  if (credits > c.remote.message_slots - c.initiator.message_credits) {
    Log(LogLevel::kWarning,
        absl::StrCat("engine: peer returned ", credits, " credits; ", c.initiator.message_credits,
                     " of ", c.remote.message_slots, " held"));
    FailConnection(c, out, FailScope::kClose);  // a protocol violation
    return false;
  }
  c.initiator.message_credits += credits;
  return true;
}

// A protocol violation by the peer: logged, and the connection is closed.
void Violation(ConnectionState& c, Deferred& out, absl::string_view what)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  Log(LogLevel::kWarning, absl::StrCat("engine: ", what));
  FailConnection(c, out, FailScope::kClose);
}

// A signaled send of ours completed: an offloaded write, an unloaded write (only on error:
// they are unsignaled), or a message.
void OnSendCompleted(ConnectionState& c, const rnic::WorkCompletion& wc, Deferred& out)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  const bool ok = wc.status == rnic::WcStatus::kSuccess;
  const bool unloaded = KindOf(wc.wr_id) == WrKind::kUnloadWrite;
  --c.initiator.send_wrs;
  Op* op = c.initiator.FindOpByIndex(IndexOf(wc.wr_id));
  if (op != nullptr && !op->is_write && op->send_slot >= 0) {
    ReleaseSendSlot(c, op->send_slot);
    op->send_slot = -1;
  }
  if (ok && op != nullptr && !unloaded) RetireQuietBefore(c, op->main_index);
  if (!ok) {
    if (op != nullptr) MarkDone(c, *op, wc.status);
    FailConnection(c, out, unloaded ? FailScope::kStageFailed : FailScope::kMainFailed);
  } else if (op != nullptr && !unloaded) {
    MarkDone(c, *op, rnic::WcStatus::kSuccess);  // unloaded writes finish on their ack
  }
}

// An ack (or the NAK) we sent completed.
void OnAckSent(ConnectionState& c, const rnic::WorkCompletion& wc, Deferred& out)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  Lane& lane = c.lanes[(IndexOf(wc.wr_id) >> 16) % c.lanes.size()];
  --c.initiator.send_wrs;
  --lane.acks_in_flight;
  if (IndexOf(wc.wr_id) == lane.unsolicited_wr_index) lane.unsolicited_wr_index = UINT32_MAX;
  if (wc.status != rnic::WcStatus::kSuccess) {
    FailConnection(c, out, FailScope::kStageFailed);
  } else if (IndexOf(wc.wr_id) == lane.nak_wr_index) {
    // The refusal is delivered (not an earlier ack: that would flush the NAK); now fail, as RC
    // does.
    FailConnection(c, out, FailScope::kRefusalSent);
  }
}

// The peer's ack for our unloaded writes on `lane` arrived in staging pool buffer `buffer`
// (posted again here: the unit backing it stays where it was, with the lane's reserve or its
// ack units).
void OnAckReceived(ConnectionState& c, int lane_index, uint32_t buffer, uint32_t byte_len,
                   Deferred& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  Lane& lane = c.lanes[lane_index];
  absl::StatusOr<AckPayload> ack = ParseAck(lane.pool->buffer(buffer), byte_len);
  lane.pool->Recycle(buffer);
  if (!ack.ok()) return Violation(c, out, ack.status().message());
  if (ack->applied > lane.next_seq || ack->applied < lane.acked_seq) {
    return Violation(
        c, out,
        absl::StrCat("peer acknowledges ", ack->applied, " staged writes on lane ", lane_index,
                     " of ", lane.next_seq, " posted (", lane.acked_seq, " acknowledged before)"));
  }
  // A lower limit would take back credits already used; a larger window than the peer's
  // staging_slots would reuse a header still in flight.
  if (ack->limit < lane.limit || ack->limit - ack->applied > c.remote.staging_slots) {
    return Violation(c, out,
                     absl::StrCat("peer grants staged writes up to ", ack->limit, " on lane ",
                                  lane_index, " (", lane.limit, " before, ", ack->applied,
                                  " applied, at most ", c.remote.staging_slots, " in flight)"));
  }
  if (!TakeCredits(c, ack->credits, out)) return;
  lane.limit = ack->limit;
  AckUnloaded(c, lane_index, ack->applied, ack->status, out);
  if (lane.inflight.empty() && lane.ack_units > 0) {
    lane.pool->Release(lane.ack_units);  // no ack is due any more: their buffers stay posted
    lane.ack_units = 0;
  }
}

// The credits this connection aims to hand out, after a message arrived: twice as many when
// the peer sent it with its last credit and more messages waiting (up to message_slots), one
// fewer after a level's worth of messages in a row sent without waiting (down to
// min_message_credits), so that a steady peer rarely runs out again. Borrows from the pool up
// to that level, as far as the pool lends; the credits go back with the next message or ack.
void AdjustCredits(ConnectionState& c, bool wanted) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  const uint32_t floor = c.options.min_message_credits;
  if (Backlogged(c)) return;  // the peer takes no answers: it is lent nothing more
  if (wanted) {
    c.target.credit_level = std::min(c.options.message_slots, 2 * c.target.credit_level);
    c.target.calm_messages = 0;
  } else if (c.target.credit_level > floor && ++c.target.calm_messages >= c.target.credit_level) {
    --c.target.credit_level;
    c.target.calm_messages = 0;
  }
  while (floor + c.target.borrowed < c.target.credit_level && c.pool->Borrow()) {
    ++c.target.borrowed;
    ++c.target.credits_to_return;
  }
}

// A message arrived in pool buffer `buffer`. Its header says how many of our messages the
// peer had received when it sent it, and how many unloaded writes of each lane it posted
// before it, which must be applied first: it is held until they are. A message that is not
// delivered gives its buffer straight back.
void OnMessageReceived(ConnectionState& c, uint32_t buffer, uint32_t byte_len, uint32_t invalidated,
                       Deferred& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  if (c.target.granted == 0) {
    c.pool->Recycle(buffer);
    return Violation(c, out,
                     absl::StrCat("connection ", c.id, ": peer sent a message without a credit"));
  }
  absl::StatusOr<MessageHeader> header =
      ParseMessageHeader(c.pool->buffer(buffer), byte_len, static_cast<int>(c.lanes.size()));
  if (!header.ok()) {
    c.pool->Recycle(buffer);
    return Violation(c, out, header.status().message());
  }
  const uint64_t seen = header->messages_seen;
  ++c.target.messages_received;
  if (!TakeCredits(c, header->credits_returned, out)) return c.pool->Recycle(buffer);
  const uint64_t posted = c.initiator.messages_confirmed + c.initiator.unconfirmed.size();
  if (seen > posted) {
    c.pool->Recycle(buffer);
    return Violation(c, out, absl::StrCat("peer claims ", seen, " messages received of ", posted));
  }
  if (seen > c.initiator.messages_confirmed) {
    // Everything on the main QP up to and including our seen-th message is done.
    RetireQuietBefore(c, c.initiator.unconfirmed[seen - c.initiator.messages_confirmed - 1] + 1);
  }
  // After a refused staged write nothing later is delivered (RC would have failed).
  if (c.target.refusing) return c.pool->Recycle(buffer);
  --c.target.granted;
  ++c.target.in_hand;
  AdjustCredits(c, header->wants_credits);
  TargetState::Held h{buffer, byte_len - c.message_header_bytes, {}};
  for (size_t k = 0; k < c.lanes.size(); ++k) h.need[k] = header->lane_writes[k];
  h.invalidated = invalidated;
  if (invalidated != 0) OnPeerInvalidation(c, invalidated, h.need);
  c.target.held.push_back(h);
}

// A receive from the worker's message pool completed on this connection's main QP.
void OnPoolReceive(ConnectionState& c, const rnic::WorkCompletion& wc, Deferred& out)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  const uint32_t buffer = IndexOf(wc.wr_id);
  if (wc.status != rnic::WcStatus::kSuccess) {
    c.pool->Recycle(buffer);
    return FailConnection(c, out, FailScope::kMainFailed);
  }
  // A message has kImmMessage, or invalidates one of our windows (SendOptions).
  const bool invalidating = wc.opcode == rnic::WcOpcode::kRecv && wc.has_invalidate && !wc.has_imm;
  if (!invalidating &&
      (wc.opcode != rnic::WcOpcode::kRecv || !wc.has_imm || wc.imm != kImmMessage)) {
    c.pool->Recycle(buffer);
    return Violation(c, out, absl::StrCat("unexpected receive ", wc.DebugString()));
  }
  OnMessageReceived(c, buffer, wc.byte_len, invalidating ? wc.invalidated_rkey : 0, out);
}

// The lane of `c` whose staging QP is `qp_num`, or -1.
int LaneOfQp(const ConnectionState& c, uint32_t qp_num) {
  for (size_t k = 0; k < c.lanes.size(); ++k) {
    if (c.lanes[k].qp->qp_num() == qp_num) return static_cast<int>(k);
  }
  return -1;
}

// A staging QP's receive from its worker's staging pool completed: a staged write (validated
// and copied by the caller, `staged_valid`) or an ack.
void OnStageReceive(ConnectionState& c, const rnic::WorkCompletion& wc, int lane, bool staged_valid,
                    uint32_t staged_length, EngineMetrics* metrics, Deferred& out)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  const uint32_t buffer = IndexOf(wc.wr_id);
  if (staged_valid) return CommitStagedWrite(c, c.lanes[lane], buffer, staged_length, metrics);
  if (wc.status != rnic::WcStatus::kSuccess) {
    c.lanes[lane].pool->Recycle(buffer);
    return FailConnection(c, out, FailScope::kStageFailed);
  }
  if (wc.opcode == rnic::WcOpcode::kRecv && wc.has_imm && wc.imm == kImmStaged) {
    c.lanes[lane].pool->Recycle(buffer);  // refused, or after a refusal: nothing applied
  } else if (wc.opcode == rnic::WcOpcode::kRecv && wc.has_imm && wc.imm == kImmAck) {
    OnAckReceived(c, lane, buffer, wc.byte_len, out);
  } else {
    c.lanes[lane].pool->Recycle(buffer);
    Violation(c, out, absl::StrCat("unexpected receive ", wc.DebugString()));
  }
}

// Moves the held messages whose preceding unloaded writes are now applied, in order, to
// c.target.deliverable (cleared first); returns how many.
size_t TakeDeliverable(ConnectionState& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  std::vector<TargetState::Held>& deliver = c.target.deliverable;
  deliver.clear();
  while (!c.target.held.empty() && !c.target.refusing) {
    bool applied = true;
    for (size_t k = 0; k < c.lanes.size(); ++k) {
      applied &= static_cast<int32_t>(static_cast<uint32_t>(c.lanes[k].expected_seq) -
                                      c.target.held.front().need[k]) >= 0;
    }
    if (!applied) break;
    if (c.target.held.front().invalidated != 0) {
      OnPeerInvalidationDelivered(c, c.target.held.front().invalidated);
    }
    deliver.push_back(c.target.held.front());
    deliver.back().number = c.target.messages_taken++;
    c.target.held.pop_front();
  }
  return deliver.size();
}

// A delivered message's pool buffer comes back: to be posted again for a credit to hand back
// (true: the caller posts it, ReleaseBuffers), or, when the connection holds more than its
// credit level, returned to the pool with the unit it borrowed.
bool ReleaseBuffer(ConnectionState& c, uint32_t buffer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  --c.target.in_hand;
  if (!c.failed && c.target.borrowed > 0 &&
      c.target.granted + c.target.credits_to_return + c.target.withheld + c.target.in_hand >=
          c.target.credit_level) {
    c.pool->Return(buffer);
    --c.target.borrowed;
    return false;
  }
  // A failed connection's stays posted until it leaves the pool.
  ++(Backlogged(c) && !c.failed ? c.target.withheld : c.target.credits_to_return);
  return true;
}

// Posts the buffers of `deliver` that ReleaseBuffer kept with one ReceivePool::Renew (one
// post per 32 of them, not one per message).
void ReleaseBuffers(ConnectionState& c, absl::Span<const TargetState::Held> deliver, Deferred& out)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  std::vector<uint32_t>& renew = c.target.renew;
  renew.clear();
  for (const TargetState::Held& m : deliver) {
    if (ReleaseBuffer(c, m.buffer)) renew.push_back(m.buffer);
  }
  if (absl::Status st = c.pool->Renew(renew); !st.ok()) {
    Log(LogLevel::kWarning, absl::StrCat("engine: connection ", c.id,
                                         ": reposting message buffers failed: ", st.message()));
    FailConnection(c, out, FailScope::kClose);
  }
}

}  // namespace

// Runs as a queued callback (RunCallbacks), so messages reach the handler in order and never
// overlap; each buffer is reposted (its credit returned) after.
void DeliverMessages(ConnectionState& c, const MessageHandler& handler,
                     absl::Span<const TargetState::Held> deliver) {
  for (const TargetState::Held& m : deliver) {
    // Written at Connect, before any message can arrive.
    if (c.options.checks != nullptr &&
        !c.options.checks->MessageDelivered(c.peer_check_name, m.number)) {
      Log(LogLevel::kError,
          absl::StrCat("engine: connection ", c.id, " (", c.peer_check_name, " to ", c.check_name,
                       "): message ", m.number,
                       " reached the handler before a write its peer issued ahead of it was "
                       "visible"));
    }
    if (handler) {
      handler(absl::MakeConstSpan(c.pool->buffer(m.buffer) + c.message_header_bytes, m.length));
    }
  }
  Deferred out;
  bool run = false;  // TakeCallbacks took them: run them after the lock
  {
    MutexLock l(&c.mu);
    ReleaseBuffers(c, deliver, out);
    if (c.failed) return;
    // Credits alone go back once the peer holds under half its level (it sends with the rest
    // meanwhile); until then a message or an ack due for unloaded writes carries them. One ack
    // per message would double the packets of a request/response exchange.
    if (c.target.credits_to_return > 0 && 2 * c.target.granted < c.target.credit_level) {
      // Sent now: this may run on any thread after lane 0's worker ended its poll (callbacks
      // run on whichever thread got to them first), and a pending ack waits for that worker's
      // next completion of this connection, which may never come: a peer out of credits sends
      // nothing more. (The other rounds of SendAckIfDue are its poll's.)
      c.lanes[0].ack_pending = true;
      SendAckIfDue(c, c.lanes[0]);
    }
    run = TakeCallbacks(c, out);
  }
  if (run) RunTakenCallbacks(c, out);  // never inside a callback: its runner runs these
}

namespace {

// Whether `wc` is a staged write's receive: validated and copied apart (HandleCompletions).
bool IsStagedWrite(const ConnectionState& c, const rnic::WorkCompletion& wc) {
  return KindOf(wc.wr_id) == WrKind::kStagePoolRecv && wc.status == rnic::WcStatus::kSuccess &&
         wc.opcode == rnic::WcOpcode::kRecv && wc.has_imm && wc.imm == kImmStaged &&
         LaneOfQp(c, wc.qp_num) >= 0;
}

// Handles completion `wc` of `c`, a staged write's already validated (`staged_valid`) and
// copied (`staged_length` bytes): what it finished goes to `out`, in order.
void HandleLocked(ConnectionState& c, const rnic::WorkCompletion& wc, bool staged_valid,
                  uint32_t staged_length, EngineMetrics* metrics, Deferred& out)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  const bool ok = wc.status == rnic::WcStatus::kSuccess;
  switch (KindOf(wc.wr_id)) {
    case WrKind::kQuietMessage:
      // Unsignaled: completes only with an error (its op finished when it was posted).
      if (!ok) FailConnection(c, out, FailScope::kMainFailed);
      break;
    case WrKind::kOffloadWrite:
    case WrKind::kUnloadWrite:
    case WrKind::kMessage:
      OnSendCompleted(c, wc, out);
      break;
    case WrKind::kAck:
      OnAckSent(c, wc, out);
      break;
    case WrKind::kStagePoolRecv: {
      const int stage_lane = LaneOfQp(c, wc.qp_num);
      if (stage_lane < 0) {  // not one of its staging QPs: cannot happen, the map says so
        Log(LogLevel::kError, absl::StrCat("engine: staging receive on QP ", wc.qp_num,
                                           " of connection ", c.id, " matches no lane"));
        break;
      }
      OnStageReceive(c, wc, stage_lane, staged_valid, staged_length, metrics, out);
      if (!c.windows.ops.empty()) FinishWindowOps(c, out);  // an invalidation may wait
      break;
    }
    case WrKind::kPoolRecv:
      OnPoolReceive(c, wc, out);
      break;
    case WrKind::kWindow:
      OnWindowCompleted(c, wc, out);
      break;
  }
  const size_t deliverable = TakeDeliverable(c);
  PostReady(c, out);
  FinishInOrder(c, out);
  // Messages after the callbacks of the ops this completion finished, as always.
  for (size_t k = 0; k < deliverable; ++k) out.Deliver(c.handler, c.target.deliverable[k]);
}

// Handles consecutive completions of connection `cp` under one acquisition of its lock, then
// runs what they finished, in order (their callbacks, then the messages they delivered, one
// completion's after another's). A staged write comes alone: it is validated under the lock
// and copied outside it, so that lanes on other workers proceed meanwhile; only this thread
// handles its lane.
void HandleCompletions(const std::shared_ptr<ConnectionState>& cp,
                       absl::Span<const rnic::WorkCompletion> wcs, ValidationTable& table,
                       EngineMetrics* metrics) {
  ConnectionState& c = *cp;
  const bool staged = wcs.size() == 1 && IsStagedWrite(c, wcs[0]);
  bool staged_valid = false;
  StagedCopy copy;
  if (staged) {
    {
      MutexLock l(&c.mu);
      staged_valid = ValidateStagedWrite(c, LaneOfQp(c, wcs[0].qp_num), IndexOf(wcs[0].wr_id),
                                         wcs[0].byte_len, table, metrics, &copy);
      if (staged_valid) ++c.copying;
    }
    if (staged_valid) CopyStagedWrite(copy);
  }
  Deferred out;
  bool run = false;  // TakeCallbacks took them: run them after the lock
  {
    MutexLock l(&c.mu);
    if (staged_valid) --c.copying;
    for (const rnic::WorkCompletion& wc : wcs) {
      HandleLocked(c, wc, staged_valid, copy.length, metrics, out);
    }
    run = TakeCallbacks(c, out);
  }
  if (run) RunTakenCallbacks(c, out);
}

// Clears Worker::polling when the poll ends.
class PollingGuard {
 public:
  explicit PollingGuard(std::atomic<bool>* flag) : flag_(flag) {}
  ~PollingGuard() { flag_->store(false, std::memory_order_release); }

 private:
  std::atomic<bool>* flag_;
};

}  // namespace

int Engine::Worker::PollOnce(ValidationTable& table, EngineMetrics* metrics) {
  if (polling.exchange(true, std::memory_order_acquire)) return 0;  // another thread drives it
  PollingGuard guard(&polling);
  touched.clear();
  // Rounds of up to kPollBatch completions while the CQ still has a full round, all in one
  // batch: what the callbacks post goes out once the CQ is drained, so a read that brought a
  // pipeline of requests is answered in one send, not one per round (soft, kvserver under 64
  // GETs in flight: 1.0-1.4 sendmsg per recv with one round a batch).
  int total = 0;
  for (int round = 0; round < kMaxPollRounds; ++round) {
    const int n = PollRound(table, metrics);
    total += n;
    if (n < kPollBatch) break;
  }
  if (total == 0) {
    SweepFailedQps(clock->Now());
    return 0;
  }
  // One ack per lane per batch covers every staged write applied in it.
  for (const std::shared_ptr<ConnectionState>& cp : touched) {
    MutexLock l(&cp->mu);
    for (Lane& lane : cp->lanes) {
      if (lane.worker == index) SendAckIfDue(*cp, lane);
    }
  }
  for (const std::shared_ptr<ConnectionState>& cp : touched) ReleasePosts(*cp);
  touched.clear();  // a closed connection's state goes now, not at the next poll
  SweepFailedQps(clock->Now());
  return total;
}

int Engine::Worker::PollRound(ValidationTable& table, EngineMetrics* metrics) {
  rnic::WorkCompletion wcs[kPollBatch];
  const int n = cq->Poll(absl::MakeSpan(wcs));
  if (n <= 0) return 0;
  // Every completion's connection, found under one acquisition of mu for the whole round (one
  // per completion before): as if each was looked up at the round's start, which a close by
  // another thread may follow at any point anyway.
  std::shared_ptr<ConnectionState> batch[kPollBatch];
  {
    MutexLock l(&mu);
    for (int i = 0; i < n; ++i) {
      uint32_t id = ConnOf(wcs[i].wr_id);
      if (KindOf(wcs[i].wr_id) == WrKind::kPoolRecv) {
        auto q = main_qps.find(wcs[i].qp_num);
        id = q == main_qps.end() ? UINT32_MAX : q->second;
      } else if (KindOf(wcs[i].wr_id) == WrKind::kStagePoolRecv) {
        auto q = stage_qps.find(wcs[i].qp_num);
        id = q == stage_qps.end() ? UINT32_MAX : q->second;
      }
      if (i > 0 && batch[i - 1] != nullptr && batch[i - 1]->id == id) {
        batch[i] = batch[i - 1];
        continue;
      }
      auto it = conns.find(id);
      if (it != conns.end()) batch[i] = it->second;
    }
  }
  for (int i = 0; i < n; ++i) {
    std::shared_ptr<ConnectionState> cp = std::move(batch[i]);
    if (cp == nullptr) {  // connection already closed: a receive for it gives its buffer back
      if (KindOf(wcs[i].wr_id) == WrKind::kPoolRecv) pool->Recycle(IndexOf(wcs[i].wr_id));
      if (KindOf(wcs[i].wr_id) == WrKind::kStagePoolRecv) {
        stage_pool->Recycle(IndexOf(wcs[i].wr_id));
      }
      continue;
    }
    if (std::find(touched.begin(), touched.end(), cp) == touched.end()) {
      // What the callbacks of this batch post on the connection (answers to the requests in
      // it, credit returns) goes out in one doorbell when the batch is done, not one each.
      HoldPosts(*cp);
      touched.push_back(cp);
    }
    // The run of this connection's completions that follows, up to a staged write.
    int end = i + 1;
    if (!IsStagedWrite(*cp, wcs[i])) {
      while (end < n && batch[end] == cp && !IsStagedWrite(*cp, wcs[end])) ++end;
    }
    HandleCompletions(cp, absl::MakeConstSpan(wcs + i, end - i), table, metrics);
    for (int k = i + 1; k < end; ++k) batch[k] = nullptr;  // handled with the run
    i = end - 1;
  }
  return n;
}

void Engine::Worker::SweepFailedQps(absl::Time now) {
  if (now < next_sweep) return;
  next_sweep = now + kQpSweepInterval;
  std::vector<std::shared_ptr<ConnectionState>> all;
  {
    MutexLock l(&mu);
    all.reserve(conns.size());
    for (const auto& [id, cp] : conns) all.push_back(cp);
  }
  // In connection order, not the hash map's (which differs from process to process): what a
  // simulation replays must not depend on it.
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a->id < b->id; });
  for (const std::shared_ptr<ConnectionState>& cp : all) {
    ConnectionState& c = *cp;
    Deferred out;
    bool run = false;  // TakeCallbacks took them: run them after the lock
    {
      MutexLock l(&c.mu);
      if (c.failed || !c.connected) continue;
      bool main_error = c.worker == index && c.qp->state() == rnic::QpState::kError;
      bool lane_error = false;
      for (const Lane& lane : c.lanes) {
        lane_error |= lane.worker == index && lane.qp->state() == rnic::QpState::kError;
      }
      // Seen in error by two sweeps of this worker (the error state is final): the failed
      // QP's own completions (a refusal with its precise status, flushed work) were polled
      // in between on this worker's CQ and took the usual path.
      if (!main_error && !lane_error) continue;
      const uint64_t mine = uint64_t{1} << index;
      if ((c.error_swept & mine) == 0) {
        c.error_swept |= mine;
        continue;
      }
      FailConnection(c, out, main_error ? FailScope::kMainFailed : FailScope::kStageFailed);
      Log(LogLevel::kInfo, absl::StrCat("engine: connection ", c.id, ": a QP failed (peer gone)"));
      FinishInOrder(c, out);
      run = TakeCallbacks(c, out);
    }
    if (run) RunTakenCallbacks(c, out);
  }
}

}  // namespace unloadkv::engine
