// The target side of unloading: a staged write is validated exactly as the NIC validates a
// write, copied into place, and acknowledged; a refusal is recorded and NAKed.
#include <cstring>

#include "absl/base/attributes.h"
#include "absl/strings/str_cat.h"
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
  c.refusing = true;
  c.nak_status = status;
  lane.refused = true;
  lane.ack_pending = true;
}

}  // namespace

bool ValidateStagedWrite(ConnectionState& c, int lane_index, uint32_t slot, uint32_t byte_len,
                         ValidationTable& table, EngineMetrics* metrics, StagedCopy* copy)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  Lane& lane = c.lanes[lane_index];
  if (c.refusing || c.failed) return false;  // after a refusal nothing more is applied
  if (slot >= c.local.ring_slots) {
    Refuse(c, lane, rnic::WcStatus::kRemoteInvalidRequest, ValidationFailure::kBadHeader, metrics,
           absl::StrCat("slot ", slot, " of ", c.local.ring_slots));
    return false;
  }
  const char* base =
      c.ring->data() + (size_t(lane_index) * c.local.ring_slots + slot) * c.local.slot_bytes;
  absl::StatusOr<StagingHeader> h = ParseStagingHeader(base, byte_len, c.local.slot_bytes);
  if (!h.ok()) {
    Refuse(c, lane, rnic::WcStatus::kRemoteInvalidRequest, ValidationFailure::kBadHeader, metrics,
           h.status().message());
    return false;
  }
  if (h->sequence != lane.expected_seq || slot != h->sequence % c.local.ring_slots) {
    Refuse(c, lane, rnic::WcStatus::kRemoteInvalidRequest, ValidationFailure::kBadSequence, metrics,
           absl::StrCat("sequence ", h->sequence, " in slot ", slot));
    return false;
  }
  // Exactly the NIC's check, against the regions registered through this engine.
  rnic::AccessVerdict verdict;
  {
    MutexLock l(&table.mu);
    verdict = table.regions.Check(h->rkey, h->remote_addr, h->length, rnic::kRemoteWrite);
  }
  if (verdict != rnic::AccessVerdict::kOk) {
    Refuse(c, lane, rnic::WcStatus::kRemoteAccessError, FailureOf(verdict), metrics,
           absl::StrCat("rkey 0x", absl::Hex(h->rkey), " addr 0x", absl::Hex(h->remote_addr),
                        " len ", h->length));
    return false;
  }
  copy->dst = reinterpret_cast<void*>(h->remote_addr);
  copy->src = base + kStagingHeaderSize;
  copy->length = h->length;
  return true;
}

// The placement copy, out of line so that the TSan suppression for placement copies (memory
// the peer reads after a network completion, transport/base/tsan_suppressions.cc) names it.
ABSL_ATTRIBUTE_NOINLINE void CopyStagedWrite(const StagedCopy& copy) {
  if (copy.length > 0) std::memcpy(copy.dst, copy.src, copy.length);
}

void CommitStagedWrite(ConnectionState& c, Lane& lane, uint32_t length, EngineMetrics* metrics)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  ++lane.expected_seq;
  lane.ack_pending = true;
  if (metrics != nullptr) metrics->OnStagedWriteApplied(length);
}

absl::Status Repost(ConnectionState& c, uint32_t i) {
  return c.lanes[LaneOfRecv(c, i)].qp->PostRecv(rnic::MakeRecv(
      MakeWrId(WrKind::kRecv, c.id, i), c.stage_recv_mr->Sge(size_t{i} * kAckBytes, kAckBytes)));
}

void SendAckIfDue(ConnectionState& c, Lane& lane) {
  if (!lane.ack_pending || c.failed || c.nak_sent || !c.connected) return;
  if (lane.acks_in_flight >= kAckSlots) return;  // retried when an ack completes
  const uint32_t lane_index = static_cast<uint32_t>(&lane - c.lanes.data());
  const uint32_t slot = lane.next_ack_slot++ % kAckSlots;
  const size_t offset = (size_t{lane_index} * kAckSlots + slot) * kAckBytes;
  char* p = c.acks.data() + offset;
  EncodeAck({lane.expected_seq, lane.refused ? c.nak_status : rnic::WcStatus::kSuccess,
             c.credits_to_return},
            p);
  rnic::SendWorkRequest wr =
      rnic::MakeSendWithImm(MakeWrId(WrKind::kAck, c.id, lane_index << 16 | slot),
                            c.acks_mr->Sge(offset, kAckBytes), kImmAck);
  if (!lane.qp->PostSend(wr).ok()) return;
  ++lane.acks_in_flight;
  ++c.send_wrs;  // retired by the ack's completion (WrKind::kAck)
  c.granted += c.credits_to_return;
  c.credits_to_return = 0;
  lane.ack_pending = false;
  if (lane.refused) {
    c.nak_sent = true;
    lane.nak_wr_index = IndexOf(wr.wr_id);
  }
}

}  // namespace unloadkv::engine
