// The responder side of the soft RNIC: requests checked exactly as a NIC checks them (WRITE,
// WRITE_WITH_IMM, SEND, READ), refusals, RNR NAKs, and ACK pacing. Runs with Nic::mu_ held.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "transport/base/logging.h"
#include "transport/rnic/request_checks.h"
#include "transport/soft/datapath_util.h"
#include "transport/soft/nic.h"

namespace unloadkv::soft {

QpCore* Nic::QpFor(Stream* s, const FrameHeader& h) {
  auto it = qps_.find(h.qp);
  if (it == qps_.end()) return nullptr;
  QpCore* qp = it->second.get();
  if (qp->stream != s || qp->state != rnic::QpState::kReadyToSend || qp->peer_qp != h.src_qp) {
    return nullptr;
  }
  return qp;
}

PayloadPlan Nic::Refuse(QpCore* qp, const FrameHeader& h, rnic::WcStatus status,
                        absl::string_view reason) {
  if (qp->ack_pending) SendAck(qp);
  EnqueueControl(qp, FrameType::kNak, h.psn, static_cast<uint32_t>(status));
  FailQp(
      qp, rnic::WcStatus::kFlushed,
      absl::StrCat("refused request psn ", h.psn, " (", rnic::WcStatusName(status), "): ", reason),
      /*tell_peer=*/false);  // the NAK does
  return Discard();
}

PayloadPlan Nic::OnRequestHeader(Stream* s, const FrameHeader& h) {
  QpCore* qp = QpFor(s, h);
  // Requests flow only once both ends are connected (the CONNECT_ACK): one for a QP that is
  // not (any more) is dropped.
  if (qp == nullptr || !qp->established) return Discard();
  if (qp->rnr_dropping) {
    if (h.psn != qp->expected_psn) return Discard();  // sent before the requester saw the NAK
    qp->rnr_dropping = false;
  }
  if (h.psn != qp->expected_psn) {
    FailQp(qp, rnic::WcStatus::kRetryExceeded,
           absl::StrCat("request psn ", h.psn, ", expected ", qp->expected_psn));
    return Discard();
  }
  switch (h.type) {
    case FrameType::kWrite:
    case FrameType::kWriteWithImm:
      return OnWriteHeader(s, qp, h);
    case FrameType::kSend:
    case FrameType::kSendWithImm:
    case FrameType::kSendWithInvalidate:
      return OnSendHeader(s, qp, h);
    case FrameType::kReadRequest: {
      rnic::AccessVerdict v = domain_->WithRegions([&](const rnic::RegionTable& r) {
        return r.Check(h.rkey, h.remote_addr, h.aux, rnic::kRemoteRead, qp->qp_num);
      });
      if (v != rnic::AccessVerdict::kOk) {
        return Refuse(
            qp, h, rnic::WcStatus::kRemoteAccessError,
            absl::StrCat("READ rkey 0x", absl::Hex(h.rkey), " addr 0x", absl::Hex(h.remote_addr),
                         " len ", h.aux, ": ", rnic::AccessVerdictName(v)));
      }
      s->current = qp;
      return PlaceNothing();
    }
    default:
      return Discard();
  }
}

PayloadPlan Nic::NotReady(QpCore* qp, const FrameHeader& h) {
  // RNR: NAK the request (acknowledging everything before it) and drop the rest until it
  // comes again.
  if (qp->ack_pending) SendAck(qp);
  EnqueueControl(qp, FrameType::kRnrNak, h.psn);
  qp->rnr_dropping = true;
  return Discard();
}

PayloadPlan Nic::OnWriteHeader(Stream* s, QpCore* qp, const FrameHeader& h) {
  rnic::AccessVerdict v = domain_->WithRegions([&](const rnic::RegionTable& r) {
    return r.Check(h.rkey, h.remote_addr, h.payload_len, rnic::kRemoteWrite, qp->qp_num);
  });
  if (v != rnic::AccessVerdict::kOk) {
    return Refuse(
        qp, h, rnic::WcStatus::kRemoteAccessError,
        absl::StrCat("WRITE rkey 0x", absl::Hex(h.rkey), " addr 0x", absl::Hex(h.remote_addr),
                     " len ", h.payload_len, ": ", rnic::AccessVerdictName(v)));
  }
  if (h.type == FrameType::kWriteWithImm && ReceiveFor(qp) == nullptr) return NotReady(qp, h);
  s->current = qp;
  if (h.payload_len > 0) {
    qp->placing_key = h.rkey;
    qp->placing_psn = h.psn;
  }
  return PlaceAt(h.remote_addr, h.payload_len);
}

PayloadPlan Nic::OnSendHeader(Stream* s, QpCore* qp, const FrameHeader& h) {
  if (h.type == FrameType::kSendWithInvalidate) {
    if (!domain_->IsBoundTo(h.rkey, qp->qp_num)) {
      return Refuse(qp, h, rnic::WcStatus::kRemoteAccessError,
                    absl::StrCat("SEND_WITH_INVALIDATE of key 0x", absl::Hex(h.rkey),
                                 ", which names no window bound to this QP"));
    }
  }
  const rnic::RecvWorkRequest* r = ReceiveFor(qp);
  if (r == nullptr) return NotReady(qp, h);
  if (h.payload_len > r->TotalLength()) {
    const uint64_t room = r->TotalLength();
    rnic::WorkCompletion wc;
    wc.wr_id = ConsumeReceive(qp).wr_id;
    wc.status = rnic::WcStatus::kLocalLengthError;
    wc.opcode = rnic::WcOpcode::kRecv;
    wc.qp_num = qp->qp_num;
    Deliver(qp->recv_cq, wc);
    return Refuse(qp, h, rnic::WcStatus::kRemoteInvalidRequest,
                  absl::StrCat("SEND of ", h.payload_len, " bytes into a ", room, "-byte receive"));
  }
  // Accepted: the window is invalid from here on, before the receive completes.
  if (h.type == FrameType::kSendWithInvalidate) domain_->Invalidate(h.rkey, qp->qp_num);
  s->current = qp;
  return PlaceInto(*r, h.payload_len);
}

void Nic::OnRequestDone(QpCore* qp, const FrameHeader& h) {
  ++qp->expected_psn;
  qp->placing_key = 0;
  switch (h.type) {
    case FrameType::kWrite:
      break;
    case FrameType::kWriteWithImm:
    case FrameType::kSend:
    case FrameType::kSendWithImm:
    case FrameType::kSendWithInvalidate: {
      rnic::WorkCompletion wc;
      wc.wr_id = ConsumeReceive(qp).wr_id;
      wc.opcode = h.type == FrameType::kWriteWithImm ? rnic::WcOpcode::kRecvRdmaWithImm
                                                     : rnic::WcOpcode::kRecv;
      wc.byte_len = h.payload_len;
      wc.has_imm = h.type == FrameType::kWriteWithImm || h.type == FrameType::kSendWithImm;
      wc.imm = wc.has_imm ? h.imm : 0;
      wc.has_invalidate = h.type == FrameType::kSendWithInvalidate;
      wc.invalidated_rkey = wc.has_invalidate ? h.rkey : 0;
      wc.qp_num = qp->qp_num;
      Deliver(qp->recv_cq, wc);
      break;
    }
    case FrameType::kReadRequest: {
      // The response acknowledges every earlier request implicitly.
      FrameHeader resp;
      resp.type = FrameType::kReadResponse;
      resp.psn = h.psn;
      resp.payload_len = h.aux;
      resp.qp = qp->peer_qp;
      resp.src_qp = qp->qp_num;
      Enqueue(qp->stream, resp, reinterpret_cast<const char*>(h.remote_addr), h.aux,
              /*copy=*/true);
      qp->ack_pending = false;  // the response acknowledges everything before it
      qp->ack_now = false;
      qp->ack_deadline = absl::InfiniteFuture();
      return;
    }
    default:
      return;
  }
  qp->ack_pending = true;
  if (h.aux & kAckRequested) qp->ack_now = true;
  if (!qp->in_ack_touched) {
    qp->in_ack_touched = true;
    ack_touched_.push_back(qp);
  }
}

void Nic::AckTouched() {
  for (QpCore* qp : ack_touched_) {
    qp->in_ack_touched = false;
    if (qp->ack_pending && qp->stream != nullptr) AckOrDelay(qp);
  }
  ack_touched_.clear();
}

void Nic::AckOrDelay(QpCore* qp) {
  if (qp->ack_now) {
    if (!defer_acks_) {
      // Within the Progress that read the request: a caller-driven owner may not progress
      // the device again before its peer needs this ACK.
      SendAck(qp);
    } else if (!qp->in_ack_soon) {
      // The answer to the request, posted before the owner's FlushDeferred, carries it.
      qp->in_ack_soon = true;
      ack_soon_.push_back(qp);
      acks_owed_.store(true, std::memory_order_release);
      // Held until the owner waits: an owner that only busy-polls gets it out at the delayed
      // ACK's deadline, as the timer of any Progress.
      if (hold_acks_until_wait_ && qp->ack_deadline == absl::InfiniteFuture()) {
        qp->ack_deadline = absl::Now() + kDelayedAck;
        ArmTimerFor(qp->ack_deadline);
      }
    }
  } else if (qp->ack_deadline == absl::InfiniteFuture()) {
    qp->ack_deadline = absl::Now() + kDelayedAck;
    ArmTimerFor(qp->ack_deadline);
  }
}

void Nic::SendOwedAcks() {
  for (QpCore* qp : ack_soon_) {
    qp->in_ack_soon = false;
    if (qp->stream != nullptr && qp->ack_now) SendAck(qp);
  }
  ack_soon_.clear();
  acks_owed_.store(false, std::memory_order_release);
}

void Nic::FlushDeferred() {
  if (hold_acks_until_wait_ || !acks_owed_.load(std::memory_order_acquire)) return;
  MutexLock l(&mu_);
  SendOwedAcks();
  FlushDirty();
}

const rnic::RecvWorkRequest* Nic::ReceiveFor(QpCore* qp) {
  if (qp->srq == nullptr) return qp->recvs.empty() ? nullptr : &qp->recvs.front();
  if (!qp->taken.has_value()) {
    if (qp->srq->state.empty()) return nullptr;
    qp->taken = qp->srq->state.Take();
  }
  return &*qp->taken;
}

rnic::RecvWorkRequest Nic::ConsumeReceive(QpCore* qp) {
  rnic::RecvWorkRequest r;
  if (qp->srq == nullptr) {
    r = qp->recvs.front();
    qp->recvs.pop_front();
  } else {
    r = *qp->taken;
    qp->taken.reset();
  }
  return r;
}

void Nic::SendAck(QpCore* qp) {
  EnqueueControl(qp, FrameType::kAck, qp->expected_psn - 1);
  qp->ack_pending = false;
  qp->ack_now = false;
  qp->ack_deadline = absl::InfiniteFuture();
}

}  // namespace unloadkv::soft
