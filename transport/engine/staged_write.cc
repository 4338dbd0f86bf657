// The target side of unloading: a staged write is validated exactly as the NIC validates a
// write, copied into place, and acknowledged; a refusal is recorded and NAKed.
#include <algorithm>
#include <cstring>

#include "absl/base/attributes.h"
#include "absl/strings/str_cat.h"
#include "transport/base/buggify.h"
#include "transport/base/logging.h"
#include "transport/engine/engine_internal.h"

namespace unloadkv::engine {
namespace {

ValidationFailure FailureOf(rnic::AccessVerdict v) {
  switch (v) {
    case rnic::AccessVerdict::kUnknownKey:
      return ValidationFailure::kUnknownKey;
    case rnic::AccessVerdict::kNoPermission:
      return ValidationFailure::kNoPermission;
    case rnic::AccessVerdict::kWrongQp:
      return ValidationFailure::kWrongConnection;
    default:
      return ValidationFailure::kOutOfBounds;
  }
}

void Refuse(ConnectionState& c, Lane& lane, rnic::WcStatus status, ValidationFailure reason,
            EngineMetrics* metrics, absl::string_view detail) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  if (metrics != nullptr) metrics->OnValidationFailure(reason);
  Log(LogLevel::kWarning,
      absl::StrCat("engine: refused staged write ", lane.expected_seq, " of lane ",
                   &lane - c.lanes.data(), " (", ValidationFailureName(reason), "): ", detail));
  c.target.refusing = true;
  c.target.nak_status = status;
  lane.refused = true;
  lane.ack_pending = true;
}

}  // namespace

bool ValidateStagedWrite(ConnectionState& c, int lane_index, uint32_t buffer, uint32_t byte_len,
                         ValidationTable& table, EngineMetrics* metrics, StagedCopy* copy)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  Lane& lane = c.lanes[lane_index];
  if (c.target.refusing || c.failed) return false;  // after a refusal nothing more is applied
  const char* base = lane.pool->buffer(buffer);
  absl::StatusOr<StagingHeader> h = ParseStagingHeader(base, byte_len, c.local.slot_bytes);
  if (!h.ok()) {
    Refuse(c, lane, rnic::WcStatus::kRemoteInvalidRequest, ValidationFailure::kBadHeader, metrics,
           h.status().message());
    return false;
  }
  if (h->sequence != lane.expected_seq || h->sequence >= lane.limit_sent) {
    Refuse(c, lane, rnic::WcStatus::kRemoteInvalidRequest, ValidationFailure::kBadSequence, metrics,
           absl::StrCat("sequence ", h->sequence, ", expected ", lane.expected_seq,
                        ", staging credits up to ", lane.limit_sent));
    return false;
  }
  // Exactly the NIC's check, against the regions registered through this engine and the
  // windows bound on this connection; then the application's own (SetStagedWriteCheck).
  rnic::AccessVerdict verdict;
  {
    MutexLock l(&table.mu);
    verdict =
        table.regions.Check(h->rkey, h->remote_addr, h->length, rnic::kRemoteWrite, WindowOwner(c));
  }
  if (verdict == rnic::AccessVerdict::kOk &&
      AfterPeerInvalidation(c, h->rkey, lane_index, h->sequence)) {
    verdict = rnic::AccessVerdict::kUnknownKey;  // the NIC has ended the window by now
  }
  ValidationFailure failure = FailureOf(verdict);
  if (verdict == rnic::AccessVerdict::kOk && c.windows.check != nullptr) {
    verdict = c.windows.check->Check(h->rkey, h->remote_addr, h->length);
    failure = ValidationFailure::kNotGranted;
  }
  if (verdict != rnic::AccessVerdict::kOk) {
    Refuse(c, lane, rnic::WcStatus::kRemoteAccessError, failure, metrics,
           absl::StrCat("rkey 0x", absl::Hex(h->rkey), " addr 0x", absl::Hex(h->remote_addr),
                        " len ", h->length));
    return false;
  }
  copy->dst = reinterpret_cast<void*>(h->remote_addr);
  copy->src = base + kStagingHeaderSize;
  copy->length = h->length;
  ++lane.in_hand;
  // Calm: when the peer sent it, at least half its window was unused (credits it may not have
  // learned of yet count as used, so a busy peer never looks calm).
  const bool calm = 2 * (lane.limit_sent - h->sequence - 1) >= lane.level;
  AdjustStagingCredits(c, lane, h->wants_credits, calm);
  return true;
}

void AdjustStagingCredits(ConnectionState& c, Lane& lane, bool wanted, bool calm) {
  const uint32_t floor = c.options.min_staging_credits;
  if (wanted) {
    lane.level = std::min(c.options.staging_slots, 2 * lane.level);
    lane.calm = 0;
  } else if (calm && lane.level > floor && ++lane.calm >= 4 * lane.level) {
    --lane.level;
    lane.calm = 0;
  }
  // Fault point: the pool lends nothing (as when other lanes hold it all): the peer runs out
  // of credits and waits or offloads.
  if (UNLOADKV_BUGGIFY("engine: the staging pool lends nothing")) return;
  while (lane.units < lane.level && lane.pool->Borrow()) {
    ++lane.units;
    ++lane.borrowed;
  }
}

// The placement copy, out of line so that the TSan suppression for placement copies (memory
// the peer reads after a network completion, transport/base/tsan_suppressions.cc) names it.
ABSL_ATTRIBUTE_NOINLINE void CopyStagedWrite(const StagedCopy& copy) {
  if (copy.length > 0) std::memcpy(copy.dst, copy.src, copy.length);
}

void CommitStagedWrite(ConnectionState& c, Lane& lane, uint32_t buffer, uint32_t length,
                       EngineMetrics* metrics) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  ++lane.expected_seq;
  lane.ack_pending = true;
  --lane.in_hand;
  if (metrics != nullptr) metrics->OnStagedWriteApplied(length);
  // Returned when the lane holds more than its level and the credits already granted stay
  // backed without it; otherwise posted again, backing the next credit.
  const uint64_t owed = lane.limit_sent - lane.expected_seq;
  if (!c.failed && lane.borrowed > 0 && lane.units > lane.level &&
      lane.units - 1 - lane.in_hand >= owed) {
    lane.pool->Return(buffer);
    --lane.borrowed;
    --lane.units;
    return;
  }
  lane.pool->Recycle(buffer);
}

bool LaneHasRoom(ConnectionState& c, Lane& lane) {
  bool room = lane.next_seq < lane.limit;
  if (room && lane.inflight.size() >= lane.ack_units) {
    room = lane.pool->Borrow();
    if (room) ++lane.ack_units;
  }
  if (!room) lane.starved = true;
  return room;
}

void SendAckIfDue(ConnectionState& c, Lane& lane) {
  if (!lane.ack_pending || c.failed || c.target.nak_sent || !c.connected) return;
  if (lane.acks_in_flight >= kAckSlots) return;  // retried when an ack completes
  // One that acknowledges nothing new waits for the previous such one to complete.
  const bool unsolicited = lane.expected_seq == lane.applied_sent && !lane.refused;
  if (unsolicited && lane.unsolicited_wr_index != UINT32_MAX) return;
  const uint32_t lane_index = static_cast<uint32_t>(&lane - c.lanes.data());
  const uint32_t slot = lane.next_ack_slot++ % kAckSlots;
  const size_t offset = (size_t{lane_index} * kAckSlots + slot) * kAckBytes;
  char* p = c.acks.data() + offset;
  const uint64_t limit = std::max(lane.limit_sent, lane.expected_seq + lane.units - lane.in_hand);
  EncodeAck(
      {lane.expected_seq, limit, lane.refused ? c.target.nak_status : rnic::WcStatus::kSuccess,
       c.target.credits_to_return},
      p);
  rnic::SendWorkRequest wr =
      rnic::MakeSendWithImm(MakeWrId(WrKind::kAck, c.id, lane_index << 16 | slot),
                            c.acks_mr->Sge(offset, kAckBytes), kImmAck);
  if (!lane.qp->PostSend(wr).ok()) return;
  ++lane.acks_in_flight;
  ++c.initiator.send_wrs;  // retired by the ack's completion (WrKind::kAck)
  lane.limit_sent = limit;
  lane.applied_sent = lane.expected_seq;
  if (unsolicited) lane.unsolicited_wr_index = IndexOf(wr.wr_id);
  c.target.granted += c.target.credits_to_return;
  c.target.credits_to_return = 0;
  lane.ack_pending = false;
  if (lane.refused) {
    c.target.nak_sent = true;
    lane.nak_wr_index = IndexOf(wr.wr_id);
  }
}

}  // namespace unloadkv::engine
