// Completing ops: in order, with RC's error rules, from NIC completions, acks and the
// evidence that retires unsignaled WRs; failing a connection.
#include <algorithm>
#include <iterator>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "transport/base/logging.h"
#include "transport/engine/engine.h"
#include "transport/engine/engine_internal.h"

namespace unloadkv::engine {

Op* InitiatorState::FindOp(uint64_t id) {
  if (ops.empty() || id < ops.front().id) return nullptr;
  uint64_t i = id - ops.front().id;
  return i < ops.size() ? &ops[i] : nullptr;
}

Op* InitiatorState::FindOpByIndex(uint32_t low32) {
  if (ops.empty()) return nullptr;
  uint64_t first = ops.front().id;
  uint64_t id = first + static_cast<uint32_t>(low32 - static_cast<uint32_t>(first));
  return FindOp(id);
}

void MarkDone(ConnectionState& c, Op& op, rnic::WcStatus status) {
  if (op.done) return;
  op.done = true;
  op.status = status;
  if (!op.is_write) return;  // a message: nothing reads its times (absl::Now ~15 ns here)
  op.done_at = c.engine->clock().Now();
  if (!op.decided) return;  // the policy never saw it
  uint64_t before = c.policy->switches();
  Decision taken = op.decision;
  taken.path = op.path;  // the ordering and full-ring rules may have overridden the policy
  // A quiet write's completion time is when the engine learned of it, not its latency.
  if (op.posted && !op.quiet && status == rnic::WcStatus::kSuccess) {
    c.policy->Observe(taken, {op.done_at - op.posted_at, op.waited, op.posted_at - op.decided_at});
  } else {
    c.policy->Unobserved(taken);
  }
  if (c.options.metrics != nullptr && c.policy->switches() != before) {
    c.options.metrics->OnPolicySwitch();
  }
}

namespace {

// Invariants 1 and 3 in a simulation (EngineOptions::checks): a write reported complete is in
// place, unless a later write of this connection (still in c.initiator.ops) may have overwritten
// it; a write reported refused went where the NIC refuses too.
void CheckFinishedWrite(ConnectionState& c, const Op& op) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  InvariantChecks& checks = *c.options.checks;
  const char* path = op.path == Path::kUnload ? "unloaded" : "offloaded";
  if (op.status == rnic::WcStatus::kRemoteAccessError) {
    if (!checks.WriteRefused(op.local.length, op.remote_addr, op.rkey, c.remote.qp.qp_num)) {
      Log(LogLevel::kError,
          absl::StrCat("engine: connection ", c.id, " (", c.check_name, " to ", c.peer_check_name,
                       "): an ", path, " write of ", op.local.length, " bytes (op ", op.id,
                       ") was refused but its destination accepts writes (address ",
                       absl::Hex(op.remote_addr), ", key ", absl::Hex(op.rkey), ")"));
    }
    return;
  }
  if (op.status != rnic::WcStatus::kSuccess || c.reported_failure) return;
  const uint64_t begin = op.remote_addr, end = op.remote_addr + op.local.length;
  for (const Op& later : c.initiator.ops) {
    if (later.is_write && later.remote_addr < end &&
        begin < later.remote_addr + later.local.length) {
      return;
    }
  }
  if (!checks.WriteCompleted(c.check_name, op.id, reinterpret_cast<const void*>(op.local.addr),
                             op.local.length, op.remote_addr, op.rkey)) {
    Log(LogLevel::kError,
        absl::StrCat("engine: connection ", c.id, " (", c.check_name, " to ", c.peer_check_name,
                     "): an ", path, " write of ", op.local.length, " bytes (op ", op.id,
                     ") completed but its destination does not hold them (address ",
                     absl::Hex(op.remote_addr), ", key ", absl::Hex(op.rkey), ")"));
  }
}

}  // namespace

void FinishInOrder(ConnectionState& c, Deferred& out) {
  while (!c.initiator.ops.empty() && c.initiator.ops.front().done) {
    Op op = std::move(c.initiator.ops.front());
    c.initiator.ops.pop_front();
    if (op.is_write && c.options.checks != nullptr) {
      CheckFinishedWrite(c, op);
      c.options.checks->WriteFinished(c.check_name, op.id);
    }
    if (c.initiator.first_unposted > 0) --c.initiator.first_unposted;
    // A message done without its completion (the connection failed): the NIC may hold its
    // slot until the QP is gone, which is when the slot goes back (~ConnectionState).
    if (op.send_slot >= 0)
      c.initiator.orphan_send_slots.push_back(static_cast<uint32_t>(op.send_slot));
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
      if (op.write_done) out.Write(std::move(op.write_done), r);
    } else if (op.send_done) {
      out.Send(std::move(op.send_done), op.status);
    }
  }
}

void FailConnection(ConnectionState& c, Deferred& out, FailScope scope) {
  if (scope == FailScope::kMainFailed || scope == FailScope::kClose) c.qp->SetError();
  FailWindows(c, out);  // the device unbinds them with the QP; the table forgets them
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
  for (size_t k = c.initiator.first_unposted; k < c.initiator.ops.size(); ++k) {
    MarkDone(c, c.initiator.ops[k], rnic::WcStatus::kFlushed);
  }
  for (Lane& lane : c.lanes) {
    for (uint64_t id : lane.inflight) {
      if (Op* op = c.initiator.FindOp(id); op != nullptr)
        MarkDone(c, *op, rnic::WcStatus::kFlushed);
    }
    lane.inflight.clear();
  }
  FinishInOrder(c, out);
}

void AckUnloaded(ConnectionState& c, int lane_index, uint64_t applied, rnic::WcStatus status,
                 Deferred& out) {
  Lane& lane = c.lanes[lane_index];
  while (!lane.inflight.empty()) {
    Op* op = c.initiator.FindOp(lane.inflight.front());
    if (op == nullptr) {
      lane.inflight.pop_front();
      continue;
    }
    if (op->unload_seq >= applied) break;
    MarkDone(c, *op, rnic::WcStatus::kSuccess);
    lane.inflight.pop_front();
    --c.initiator.send_wrs;  // its unsignaled WRITE_WITH_IMM is certainly retired by now
  }
  lane.acked_seq = std::max(lane.acked_seq, applied);
  if (status != rnic::WcStatus::kSuccess) {
    if (!lane.inflight.empty()) {
      Op* op = c.initiator.FindOp(lane.inflight.front());
      if (op != nullptr) MarkDone(c, *op, status);
    }
    FinishInOrder(c, out);
    FailConnection(c, out, FailScope::kStageFailed);
  }
}

uint32_t SendReserve(const EngineOptions& o) {
  return std::max(o.min_message_credits, SignalEvery(o));
}

void ReleaseSendSlot(ConnectionState& c, int slot) {
  if (c.initiator.send_borrowed > 0) {
    c.send_pool->Return(static_cast<uint32_t>(slot));
    --c.initiator.send_borrowed;
  } else {
    c.initiator.free_send_slots.push_back(slot);
  }
}

void RetireQuietBefore(ConnectionState& c, uint64_t main_index) {
  // Lent slots go back to the pool together, not one acquisition of its lock each.
  uint32_t lent[64];
  size_t lent_count = 0;
  while (!c.initiator.quiet.empty() && c.initiator.quiet.front().main_index < main_index) {
    const InitiatorState::Quiet q = c.initiator.quiet.front();
    c.initiator.quiet.pop_front();
    --c.initiator.send_wrs;
    if (q.send_slot >= 0 && c.initiator.send_borrowed > 0) {  // ReleaseSendSlot, batched
      --c.initiator.send_borrowed;
      lent[lent_count++] = static_cast<uint32_t>(q.send_slot);
      if (lent_count == std::size(lent)) {
        c.send_pool->Return(absl::MakeConstSpan(lent, lent_count));
        lent_count = 0;
      }
    } else if (q.send_slot >= 0) {
      ReleaseSendSlot(c, q.send_slot);
    } else if (Op* op = c.initiator.FindOp(q.op_id); op != nullptr) {
      MarkDone(c, *op, rnic::WcStatus::kSuccess);
    }
  }
  c.send_pool->Return(absl::MakeConstSpan(lent, lent_count));
  while (!c.initiator.unconfirmed.empty() && c.initiator.unconfirmed.front() < main_index) {
    c.initiator.unconfirmed.pop_front();
    ++c.initiator.messages_confirmed;
  }
}

void QueueCallbacks(ConnectionState& c, Deferred& out) { c.callbacks.ready.Append(out); }

bool TakeCallbacks(ConnectionState& c, Deferred& out) {
  c.callbacks.ready.Append(out);
  if (c.callbacks.running || c.callbacks.ready.empty()) return false;
  c.callbacks.running = true;
  c.callbacks.thread = std::this_thread::get_id();
  out.swap(c.callbacks.ready);
  return true;
}

void RunTakenCallbacks(ConnectionState& c, Deferred& batch) {
  const std::shared_ptr<ConnectionState> keep = c.self.lock();  // a callback may drop `c`
  while (true) {
    batch.Run([&c](const MessageHandler& handler, absl::Span<const TargetState::Held> messages) {
      DeliverMessages(c, handler, messages);
    });
    // Whether more came meanwhile, and if none the end of this run, under one acquisition: a
    // callback queued after it finds none running and runs itself.
    MutexLock l(&c.mu);
    if (c.callbacks.ready.empty()) {
      c.callbacks.running = false;
      return;
    }
    batch.swap(c.callbacks.ready);
  }
}

void RunCallbacks(ConnectionState& c, bool wait) {
  Deferred batch;
  while (true) {
    {
      MutexLock l(&c.mu);
      if (TakeCallbacks(c, batch)) break;
      if (!c.callbacks.running) return;  // none due
      if (!wait || c.callbacks.thread == std::this_thread::get_id()) return;
    }
    absl::SleepFor(absl::Microseconds(50));  // another thread runs them; `wait` wants them run
  }
  RunTakenCallbacks(c, batch);
}

}  // namespace unloadkv::engine
