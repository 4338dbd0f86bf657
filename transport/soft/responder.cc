// The responder side of the soft RNIC: HELLO, requests checked exactly as a NIC checks them
// (WRITE, WRITE_WITH_IMM, SEND, READ), refusals, and ACK pacing. Runs with Nic::mu_ held.
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

PayloadPlan Nic::OnHello(Stream* s, const FrameHeader& h) {
  if (h.type != FrameType::kHello) {
    peer_log_.Log(LogLevel::kWarning, "soft: inbound stream did not start with HELLO; closing it");
    return Close();
  }
  auto it = qps_.find(h.rkey);
  if (it == qps_.end() || it->second->state == rnic::QpState::kError ||
      it->second->stream != nullptr || it->second->dials) {
    peer_log_.Log(LogLevel::kWarning,
                  absl::StrCat("soft: HELLO for QP ", h.rkey,
                               " which does not exist, is taken, or dials its peer itself"));
    return Close();
  }
  QpCore* qp = it->second.get();
  const bool connected = qp->state == rnic::QpState::kReadyToSend;
  if (connected && (qp->remote.qp_num != h.aux || qp->remote.psn != h.psn)) {
    peer_log_.Log(
        LogLevel::kWarning,
        absl::StrCat("soft: HELLO from QP ", h.aux, " (psn ", h.psn, ") but QP ", qp->qp_num,
                     " is connected to QP ", qp->remote.qp_num, " (psn ", qp->remote.psn, ")"));
    return Close();
  }
  s->qp = qp;
  s->handshake_deadline = absl::InfiniteFuture();
  s->expected_psn = h.psn;
  qp->stream = s;
  qp->hello_src_qp = h.aux;
  if (connected) StartAccepted(qp);
  return PlaceNothing();
}

PayloadPlan Nic::Refuse(Stream* s, const FrameHeader& h, rnic::WcStatus status,
                        absl::string_view reason) {
  FrameHeader nak;
  nak.type = FrameType::kNak;
  nak.psn = h.psn;
  nak.aux = static_cast<uint32_t>(status);
  if (s->ack_pending) SendAck(s);
  Enqueue(s, nak, nullptr, 0, false);
  QpCore* qp = s->qp;
  if (qp != nullptr) {
    FailQp(qp, rnic::WcStatus::kFlushed,
           absl::StrCat("refused request psn ", h.psn, " (", rnic::WcStatusName(status),
                        "): ", reason));
  }
  return Close();
}

PayloadPlan Nic::OnRequestHeader(Stream* s, const FrameHeader& h) {
  QpCore* qp = s->qp;
  if (qp->state == rnic::QpState::kReset) return Stall();  // peer was quicker than Connect
  if (qp->state == rnic::QpState::kError) return Close();
  if (h.psn != s->expected_psn) {
    KillStream(s, rnic::WcStatus::kRetryExceeded,
               absl::StrCat("request psn ", h.psn, ", expected ", s->expected_psn));
    return Close();
  }
  switch (h.type) {
    case FrameType::kWrite:
    case FrameType::kWriteWithImm: {
      rnic::AccessVerdict v =
          regions_.Check(h.rkey, h.remote_addr, h.payload_len, rnic::kRemoteWrite);
      if (v != rnic::AccessVerdict::kOk) {
        return Refuse(
            s, h, rnic::WcStatus::kRemoteAccessError,
            absl::StrCat("WRITE rkey 0x", absl::Hex(h.rkey), " addr 0x", absl::Hex(h.remote_addr),
                         " len ", h.payload_len, ": ", rnic::AccessVerdictName(v)));
      }
      if (h.type == FrameType::kWriteWithImm && ReceiveFor(qp) == nullptr) return Stall();
      return PlaceAt(h.remote_addr, h.payload_len);
    }
    case FrameType::kSend:
    case FrameType::kSendWithImm: {
      const rnic::RecvWorkRequest* r = ReceiveFor(qp);
      if (r == nullptr) return Stall();
      if (h.payload_len > r->TotalLength()) {
        const uint64_t room = r->TotalLength();
        rnic::WorkCompletion wc;
        wc.wr_id = ConsumeReceive(qp).wr_id;
        wc.status = rnic::WcStatus::kLocalLengthError;
        wc.opcode = rnic::WcOpcode::kRecv;
        wc.qp_num = qp->qp_num;
        Deliver(*qp->recv_cq, wc);
        return Refuse(
            s, h, rnic::WcStatus::kRemoteInvalidRequest,
            absl::StrCat("SEND of ", h.payload_len, " bytes into a ", room, "-byte receive"));
      }
      return PlaceInto(*r, h.payload_len);
    }
    case FrameType::kReadRequest: {
      rnic::AccessVerdict v = regions_.Check(h.rkey, h.remote_addr, h.aux, rnic::kRemoteRead);
      if (v != rnic::AccessVerdict::kOk) {
        return Refuse(
            s, h, rnic::WcStatus::kRemoteAccessError,
            absl::StrCat("READ rkey 0x", absl::Hex(h.rkey), " addr 0x", absl::Hex(h.remote_addr),
                         " len ", h.aux, ": ", rnic::AccessVerdictName(v)));
      }
      return PlaceNothing();
    }
    default:
      return Close();
  }
}

void Nic::OnRequestDone(Stream* s, const FrameHeader& h) {
  QpCore* qp = s->qp;
  ++s->expected_psn;
  switch (h.type) {
    case FrameType::kWrite:
      break;
    case FrameType::kWriteWithImm:
    case FrameType::kSend:
    case FrameType::kSendWithImm: {
      rnic::WorkCompletion wc;
      wc.wr_id = ConsumeReceive(qp).wr_id;
      wc.opcode = h.type == FrameType::kWriteWithImm ? rnic::WcOpcode::kRecvRdmaWithImm
                                                     : rnic::WcOpcode::kRecv;
      wc.byte_len = h.payload_len;
      wc.has_imm = h.type != FrameType::kSend;
      wc.imm = wc.has_imm ? h.imm : 0;
      wc.qp_num = qp->qp_num;
      Deliver(*qp->recv_cq, wc);
      break;
    }
    case FrameType::kReadRequest: {
      // The response acknowledges every earlier request implicitly.
      FrameHeader resp;
      resp.type = FrameType::kReadResponse;
      resp.psn = h.psn;
      resp.payload_len = h.aux;
      Enqueue(s, resp, reinterpret_cast<const char*>(h.remote_addr), h.aux, /*copy=*/true);
      return;
    }
    default:
      return;
  }
  s->ack_pending = true;
  if (h.aux & kAckRequested) s->ack_now = true;
}

void Nic::AckOrDelay(Stream* s) {
  if (s->ack_now) {
    if (!defer_acks_) {
      // Within the Progress that read the request: a caller-driven owner may not progress
      // the device again before its peer needs this ACK.
      SendAck(s);
    } else if (!s->in_ack_soon) {
      // The answer to the request, posted before the owner's FlushDeferred, carries it.
      s->in_ack_soon = true;
      ack_soon_.push_back(s);
      acks_owed_.store(true, std::memory_order_release);
    }
  } else if (s->ack_deadline == absl::InfiniteFuture()) {
    s->ack_deadline = absl::Now() + kDelayedAck;
    ArmTimerFor(s->ack_deadline);
  }
}

void Nic::SendOwedAcks() {
  for (Stream* s : ack_soon_) {
    s->in_ack_soon = false;
    if (!s->dead && s->ack_now) SendAck(s);
  }
  ack_soon_.clear();
  acks_owed_.store(false, std::memory_order_release);
}

void Nic::FlushDeferred() {
  if (!acks_owed_.load(std::memory_order_acquire)) return;
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

void Nic::SendAck(Stream* s) {
  FrameHeader ack;
  ack.type = FrameType::kAck;
  ack.psn = s->expected_psn - 1;
  Enqueue(s, ack, nullptr, 0, false);
  s->ack_pending = false;
  s->ack_now = false;
  s->ack_deadline = absl::InfiniteFuture();
}

}  // namespace unloadkv::soft
