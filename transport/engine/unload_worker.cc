// Completion processing of the write engine: the unload worker (validate, copy, acknowledge
// staged writes), message delivery, and the initiator's handling of completions and acks.
#include <algorithm>
#include <cstring>

#include "absl/base/attributes.h"
#include "absl/strings/str_cat.h"
#include "transport/base/little_endian.h"
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

// Adds credits the peer returned; more than it could owe fails the connection.
bool TakeCredits(ConnectionState& c, uint32_t credits, Deferred& out)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  if (credits > c.remote.message_slots - c.message_credits) {
    Log(LogLevel::kWarning,
        absl::StrCat("engine: peer returned ", credits, " credits; ", c.message_credits, " of ",
                     c.remote.message_slots, " held"));
    FailConnection(c, out, FailScope::kClose);  // a protocol violation
    return false;
  }
  c.message_credits += credits;
  return true;
}

// A validated staged write, copied outside the connection's lock.
struct StagedCopy {
  void* dst = nullptr;
  const char* src = nullptr;
  uint32_t length = 0;
};

// Validates the staged write that arrived in `slot` of lane `lane_index` exactly as the NIC
// would validate the write; on success fills `copy` (the caller copies, then calls
// CommitStagedWrite), on failure records the refusal.
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

// Clears Worker::polling when the poll ends.
class PollingGuard {
 public:
  explicit PollingGuard(std::atomic<bool>* flag) : flag_(flag) {}
  ~PollingGuard() { flag_->store(false, std::memory_order_release); }

 private:
  std::atomic<bool>* flag_;
};

}  // namespace

int LaneOfRecv(const ConnectionState& c, uint32_t i) {
  if (i < c.options.message_slots) return -1;
  return static_cast<int>((i - c.options.message_slots) / c.stage_recvs_per_lane);
}

void Repost(ConnectionState& c, uint32_t i) {
  const uint64_t id = MakeWrId(WrKind::kRecv, c.id, i);
  const int lane = LaneOfRecv(c, i);
  if (lane < 0) {
    (void)c.qp->PostRecv(
        rnic::MakeRecv(id, c.recv_mr->Sge(size_t{i} * c.slot_stride, c.slot_stride)));
  } else {
    const size_t k = i - c.options.message_slots;
    (void)c.lanes[lane].qp->PostRecv(
        rnic::MakeRecv(id, c.stage_recv_mr->Sge(k * kAckBytes, kAckBytes)));
  }
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
  c.credits_to_return = 0;
  lane.ack_pending = false;
  if (lane.refused) {
    c.nak_sent = true;
    lane.nak_wr_index = IndexOf(wr.wr_id);
  }
}

int Engine::Worker::PollOnce(ValidationTable& table, EngineMetrics* metrics) {
  if (polling.exchange(true, std::memory_order_acquire)) return 0;  // another thread drives it
  PollingGuard guard(&polling);
  rnic::WorkCompletion wcs[32];
  int n = cq->Poll(absl::MakeSpan(wcs));
  if (n <= 0) return 0;
  std::vector<std::shared_ptr<ConnectionState>> touched;
  for (int i = 0; i < n; ++i) {
    const rnic::WorkCompletion& wc = wcs[i];
    std::shared_ptr<ConnectionState> cp;
    {
      MutexLock l(&mu);
      auto it = conns.find(ConnOf(wc.wr_id));
      if (it == conns.end()) continue;  // connection already closed
      cp = it->second;
    }
    ConnectionState& c = *cp;
    Deferred out;
    MessageHandler handler;
    std::vector<ConnectionState::Held> deliver;  // messages now in order to hand over
    const bool ok = wc.status == rnic::WcStatus::kSuccess;
    // A staged write is validated under the connection's lock and copied outside it, so that
    // lanes on other workers proceed meanwhile; only this thread handles this lane.
    const int staged_lane =
        KindOf(wc.wr_id) == WrKind::kRecv && ok && wc.opcode == rnic::WcOpcode::kRecvRdmaWithImm
            ? LaneOfRecv(c, IndexOf(wc.wr_id))
            : -1;
    bool staged_valid = false;
    StagedCopy copy;
    if (staged_lane >= 0) {
      {
        MutexLock l(&c.mu);
        staged_valid =
            ValidateStagedWrite(c, staged_lane, wc.imm, wc.byte_len, table, metrics, &copy);
      }
      if (staged_valid) CopyStagedWrite(copy);
    }
    uint32_t recv_index = 0;
    {
      MutexLock l(&c.mu);
      switch (KindOf(wc.wr_id)) {
        case WrKind::kQuietMessage:
          // Unsignaled: completes only with an error (its op finished when it was posted).
          if (!ok) FailConnection(c, out, FailScope::kMainFailed);
          break;
        case WrKind::kOffloadWrite:
        case WrKind::kUnloadWrite:
        case WrKind::kMessage: {
          --c.send_wrs;
          Op* op = c.FindOpByIndex(IndexOf(wc.wr_id));
          if (op != nullptr && !op->is_write && op->send_slot >= 0) {
            c.free_send_slots.push_back(op->send_slot);
            op->send_slot = -1;
          }
          if (ok && op != nullptr && KindOf(wc.wr_id) != WrKind::kUnloadWrite) {
            RetireQuietBefore(c, op->main_index);
          }
          if (!ok) {
            if (op != nullptr) MarkDone(c, *op, wc.status);
            FailConnection(c, out,
                           KindOf(wc.wr_id) == WrKind::kUnloadWrite ? FailScope::kStageFailed
                                                                    : FailScope::kMainFailed);
          } else if (op != nullptr && KindOf(wc.wr_id) != WrKind::kUnloadWrite) {
            MarkDone(c, *op, rnic::WcStatus::kSuccess);  // unloaded writes finish on their ack
          }
          break;
        }
        case WrKind::kAck: {
          Lane& lane = c.lanes[(IndexOf(wc.wr_id) >> 16) % c.lanes.size()];
          --c.send_wrs;
          --lane.acks_in_flight;
          if (!ok) {
            FailConnection(c, out, FailScope::kStageFailed);
          } else if (IndexOf(wc.wr_id) == lane.nak_wr_index) {
            // The refusal is delivered (not an earlier ack: that would flush the NAK); now
            // fail, as RC does.
            FailConnection(c, out, FailScope::kRefusalSent);
          }
          break;
        }
        case WrKind::kRecv: {
          recv_index = IndexOf(wc.wr_id);
          const int lane = LaneOfRecv(c, recv_index);
          if (!ok) {
            FailConnection(c, out, lane < 0 ? FailScope::kMainFailed : FailScope::kStageFailed);
            break;
          }
          const char* buf = lane < 0 ? c.recv_buffers.data() + size_t{recv_index} * c.slot_stride
                                     : c.stage_recv_buffers.data() +
                                           size_t{recv_index - c.options.message_slots} * kAckBytes;
          if (staged_lane >= 0) {
            if (staged_valid) CommitStagedWrite(c, c.lanes[staged_lane], copy.length, metrics);
            Repost(c, recv_index);
          } else if (wc.opcode == rnic::WcOpcode::kRecv && wc.has_imm && wc.imm == kImmAck &&
                     lane >= 0) {
            absl::StatusOr<AckPayload> ack = ParseAck(buf, wc.byte_len);
            if (!ack.ok()) {
              Log(LogLevel::kWarning, absl::StrCat("engine: ", ack.status().message()));
              FailConnection(c, out, FailScope::kClose);  // a protocol violation
              break;
            }
            const uint64_t applied = ack->applied;
            Repost(c, recv_index);
            if (applied > c.lanes[lane].next_seq) {
              Log(LogLevel::kWarning,
                  absl::StrCat("engine: peer acknowledges ", applied, " staged writes on lane ",
                               lane, " of ", c.lanes[lane].next_seq, " posted"));
              FailConnection(c, out, FailScope::kClose);  // a protocol violation
              break;
            }
            if (!TakeCredits(c, ack->credits, out)) break;
            AckUnloaded(c, lane, applied, ack->status, out);
          } else if (wc.opcode == rnic::WcOpcode::kRecv && wc.has_imm && wc.imm == kImmMessage &&
                     lane < 0) {
            absl::StatusOr<MessageHeader> header =
                ParseMessageHeader(buf, wc.byte_len, static_cast<int>(c.lanes.size()));
            if (!header.ok()) {
              Log(LogLevel::kWarning, absl::StrCat("engine: ", header.status().message()));
              FailConnection(c, out, FailScope::kClose);  // a protocol violation
              break;
            }
            // A message. Its header says how many of our messages the peer had received when it
            // sent it, and how many unloaded writes of each lane it posted before it, which must
            // be applied first.
            const uint64_t seen = header->messages_seen;
            ++c.messages_received;
            if (!TakeCredits(c, header->credits_returned, out)) break;
            const uint64_t posted = c.messages_confirmed + c.unconfirmed.size();
            if (seen > posted) {
              Log(LogLevel::kWarning,
                  absl::StrCat("engine: peer claims ", seen, " messages received of ", posted));
              FailConnection(c, out, FailScope::kClose);  // a protocol violation
              break;
            }
            if (seen > c.messages_confirmed) {
              // Everything on the main QP up to and including our seen-th message is done.
              RetireQuietBefore(c, c.unconfirmed[seen - c.messages_confirmed - 1] + 1);
            }
            // After a refused staged write nothing later is delivered (RC would have failed).
            if (!c.refusing) {
              ConnectionState::Held h{recv_index, wc.byte_len - c.message_header_bytes, {}};
              for (size_t k = 0; k < c.lanes.size(); ++k) h.need[k] = header->lane_writes[k];
              c.held.push_back(h);
            }
          } else {
            Log(LogLevel::kWarning, absl::StrCat("engine: unexpected receive ", wc.DebugString()));
            FailConnection(c, out, FailScope::kClose);  // a protocol violation
          }
          break;
        }
      }
      // Hand over held messages whose preceding unloaded writes are now applied.
      while (!c.held.empty() && !c.refusing) {
        bool applied = true;
        for (size_t k = 0; k < c.lanes.size(); ++k) {
          applied &= static_cast<int32_t>(static_cast<uint32_t>(c.lanes[k].expected_seq) -
                                          c.held.front().need[k]) >= 0;
        }
        if (!applied) break;
        deliver.push_back(c.held.front());
        c.held.pop_front();
      }
      if (!deliver.empty()) handler = c.handler;
      PostReady(c, out);
      FinishInOrder(c, out);
    }
    for (auto& f : out) f();
    if (!deliver.empty()) {
      // Delivered outside the lock; each buffer is reposted (its credit returned) after.
      for (const ConnectionState::Held& m : deliver) {
        if (handler) {
          handler(absl::MakeConstSpan(
              c.recv_buffers.data() + size_t{m.buffer} * c.slot_stride + c.message_header_bytes,
              m.length));
        }
      }
      MutexLock l(&c.mu);
      if (!c.failed) {
        for (const ConnectionState::Held& m : deliver) Repost(c, m.buffer);
        c.credits_to_return += static_cast<uint32_t>(deliver.size());
        // Credits alone go back in batches of half the window (the peer keeps the other half
        // to send with meanwhile); an ack due for unloaded writes carries them earlier. One
        // ack per message would double the packets of a request/response exchange.
        if (c.credits_to_return >= std::max<uint32_t>(1, c.options.message_slots / 2)) {
          c.lanes[0].ack_pending = true;  // lane 0 shares this worker with the main QP
        }
      }
    }
    if (std::find(touched.begin(), touched.end(), cp) == touched.end()) touched.push_back(cp);
  }
  // One ack per lane per batch covers every staged write applied in it.
  for (const std::shared_ptr<ConnectionState>& cp : touched) {
    MutexLock l(&cp->mu);
    for (Lane& lane : cp->lanes) {
      if (lane.worker == index) SendAckIfDue(*cp, lane);
    }
  }
  return n;
}

}  // namespace unloadkv::engine
