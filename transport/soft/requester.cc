// The requester side of the soft RNIC: posting sends and receives, the responses (ACK, NAK,
// READ data) that complete them, and resending after an RNR NAK. Runs with Nic::mu_ held.
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

absl::Status Nic::PostSend(QpCore* qp, absl::Span<const rnic::SendWorkRequest> wrs) {
  MutexLock l(&mu_);
  if (qp->state == rnic::QpState::kReset) {
    return absl::FailedPreconditionError(
        absl::StrCat("PostSend: queue pair ", qp->qp_num, " is not connected"));
  }
  for (size_t i = 0; i < wrs.size(); ++i) {
    const rnic::SendWorkRequest& wr = wrs[i];
    if (absl::Status st = rnic::CheckSendRequest(wr, limits_, i); !st.ok()) {
      FlushDirty();
      return st;
    }
    if (qp->outstanding.size() >= qp->config.max_send_wr) {
      FlushDirty();
      return absl::ResourceExhaustedError(
          absl::StrCat("PostSend: send queue full (", qp->config.max_send_wr, " outstanding)"));
    }
    Outstanding o;
    o.wr = wr;
    if (qp->state == rnic::QpState::kError) {
      CompleteSend(qp, o, rnic::WcStatus::kFlushed);
      continue;
    }
    if (!domain_->WithRegions(
            [&](const rnic::RegionTable& r) { return rnic::LocalBuffersValid(r, wr); })) {
      o.local_error = rnic::WcStatus::kLocalProtectionError;
    }
    if (o.local_error != rnic::WcStatus::kSuccess || qp->poisoned) {
      if (qp->outstanding.empty()) {
        CompleteSend(qp, o, o.local_error);
        FailQp(qp, rnic::WcStatus::kFlushed, "local protection error in a send request");
        continue;
      }
      qp->poisoned = true;
      qp->outstanding.push_back(o);
      continue;
    }
    if (wr.opcode == rnic::Opcode::kBindWindow || wr.opcode == rnic::Opcode::kLocalInvalidate) {
      PostLocalOp(qp, o);
      continue;
    }
    o.psn = qp->next_psn++;
    if (wr.opcode != rnic::Opcode::kRead &&
        (wr.signaled || o.psn - qp->last_ack_request_psn >= kAckRequestInterval ||
         qp->outstanding.size() + 1 >= qp->config.max_send_wr / 2)) {
      o.ack_requested = true;
      qp->last_ack_request_psn = o.psn;
    }
    // Nothing leaves before the handshake completes (SendOutstanding sends it then), nor
    // while an RNR NAK holds the QP back (the retry sends it).
    if (qp->established && !qp->rnr_wait) EnqueueRequest(qp, o);
    qp->outstanding.push_back(o);
  }
  FlushDirty();
  return absl::OkStatus();
}

void Nic::EnqueueRequest(QpCore* qp, const Outstanding& o) {
  // An ACK this end owes the peer (a delayed one) rides in front of the request, in the same
  // packet, instead of waiting for its timer.
  if (qp->ack_pending) SendAck(qp);
  const rnic::SendWorkRequest& wr = o.wr;
  FrameHeader h;
  h.type = FrameTypeOf(wr.opcode);
  h.psn = o.psn;
  h.imm = wr.imm;
  h.remote_addr = wr.remote_addr;
  h.rkey = wr.opcode == rnic::Opcode::kSendWithInvalidate ? wr.invalidate_rkey : wr.rkey;
  h.qp = qp->peer_qp;
  h.src_qp = qp->qp_num;
  if (wr.opcode == rnic::Opcode::kRead) {
    h.aux = static_cast<uint32_t>(wr.TotalLength());
  } else {
    h.payload_len = static_cast<uint32_t>(wr.TotalLength());
    if (o.ack_requested) h.aux = kAckRequested;
  }
  EnqueueGather(qp->stream, h, wr, qp);
}

void Nic::SendOutstanding(QpCore* qp) {
  for (const Outstanding& o : qp->outstanding) {
    // A request that failed its local check is never sent, nor anything posted after it (the
    // QP is poisoned: those wait to be flushed), as PostSend does.
    if (o.local_error != rnic::WcStatus::kSuccess) break;
    EnqueueRequest(qp, o);
  }
}

void Nic::OnRnrNak(QpCore* qp, const FrameHeader& h) {
  CompleteAckedThrough(qp, h.psn, /*inclusive=*/false);
  if (qp->state == rnic::QpState::kError) return;
  if (qp->outstanding.empty() || qp->outstanding.front().psn != h.psn || qp->rnr_wait) {
    FailQp(qp, rnic::WcStatus::kRetryExceeded,
           absl::StrCat("RNR NAK for psn ", h.psn, ", which is not the oldest outstanding"));
    return;
  }
  const absl::Time now = absl::Now();
  if (!qp->rnr_seen || qp->rnr_psn != h.psn) {
    qp->rnr_seen = true;
    qp->rnr_psn = h.psn;
    qp->rnr_since = now;
    qp->rnr_backoff = kRnrFirstRetry;
  } else {
    qp->rnr_backoff = std::min(qp->rnr_backoff * 2, kRnrMaxRetry);
  }
  // The responder drops every later request until this one comes again: the frames not sent
  // yet need not go.
  PurgeRequests(qp->stream, qp);
  qp->rnr_wait = true;
  qp->rnr_retry_at = now + qp->rnr_backoff;
  if (qp->config.rnr_timeout != absl::InfiniteDuration()) {
    qp->rnr_retry_at = std::min(qp->rnr_retry_at, qp->rnr_since + qp->config.rnr_timeout);
  }
  ArmTimerFor(qp->rnr_retry_at);
}

absl::Status Nic::PostRecv(QpCore* qp, absl::Span<const rnic::RecvWorkRequest> wrs) {
  if (qp->srq != nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("PostRecv: queue pair ", qp->qp_num, " takes its receives from an SRQ"));
  }
  MutexLock l(&mu_);
  for (size_t i = 0; i < wrs.size(); ++i) {
    const rnic::RecvWorkRequest& wr = wrs[i];
    if (absl::Status st = rnic::CheckRecvRequest(wr, i); !st.ok()) return st;
    if (qp->recvs.size() >= qp->config.max_recv_wr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("PostRecv: receive queue full (", qp->config.max_recv_wr, " posted)"));
    }
    rnic::WorkCompletion wc;
    wc.wr_id = wr.wr_id;
    wc.opcode = rnic::WcOpcode::kRecv;
    wc.qp_num = qp->qp_num;
    if (qp->state == rnic::QpState::kError) {
      wc.status = rnic::WcStatus::kFlushed;
      Deliver(qp->recv_cq, wc);
      continue;
    }
    if (!domain_->WithRegions(
            [&](const rnic::RegionTable& r) { return rnic::LocalBuffersValid(r, wr); })) {
      wc.status = rnic::WcStatus::kLocalProtectionError;
    }
    if (wc.status != rnic::WcStatus::kSuccess) {
      Deliver(qp->recv_cq, wc);
      FailQp(qp, rnic::WcStatus::kFlushed, "local protection error in a receive request");
      continue;
    }
    qp->recvs.push_back(wr);
  }
  FlushDirty();
  return absl::OkStatus();
}

absl::Status Nic::PostSrqRecv(SrqCore* srq, absl::Span<const rnic::RecvWorkRequest> wrs) {
  MutexLock l(&mu_);
  return domain_->WithRegions([&](const rnic::RegionTable& r) { return srq->state.Post(wrs, r); });
}

absl::Status Nic::ArmSrqLimit(SrqCore* srq, uint32_t limit) {
  MutexLock l(&mu_);
  return srq->state.ArmLimit(limit);
}

bool Nic::TakeSrqLimitEvent(SrqCore* srq) {
  MutexLock l(&mu_);
  return srq->state.TakeLimitEvent();
}

void Nic::CompleteAckedThrough(QpCore* qp, uint32_t psn, bool inclusive) {
  while (!qp->outstanding.empty()) {
    const Outstanding& o = qp->outstanding.front();
    if (o.local_error != rnic::WcStatus::kSuccess) {
      FailQp(qp, rnic::WcStatus::kFlushed, "local protection error in a send request");
      return;
    }
    if (inclusive ? !PsnLessEq(o.psn, psn) : !PsnLess(o.psn, psn)) break;
    if (o.wr.opcode == rnic::Opcode::kRead) break;  // completes on its response only
    CompleteSend(qp, o, rnic::WcStatus::kSuccess);
    qp->outstanding.pop_front();
  }
  // A poisoned request now at the head fails the QP without waiting for more responses.
  if (!qp->outstanding.empty() && qp->outstanding.front().local_error != rnic::WcStatus::kSuccess) {
    FailQp(qp, rnic::WcStatus::kFlushed, "local protection error in a send request");
  }
}

PayloadPlan Nic::OnResponseHeader(Stream* s, const FrameHeader& h) {
  QpCore* qp = QpFor(s, h);
  if (qp == nullptr) return Discard();
  if (h.type != FrameType::kReadResponse) {
    s->current = qp;
    return PlaceNothing();
  }
  CompleteAckedThrough(qp, h.psn, /*inclusive=*/false);
  if (qp->state == rnic::QpState::kError) return Discard();
  if (qp->outstanding.empty() || qp->outstanding.front().psn != h.psn ||
      qp->outstanding.front().wr.opcode != rnic::Opcode::kRead ||
      qp->outstanding.front().wr.TotalLength() != h.payload_len) {
    FailQp(qp, rnic::WcStatus::kRetryExceeded,
           absl::StrCat("READ response psn ", h.psn, " matches no outstanding READ"));
    return Discard();
  }
  s->current = qp;
  return PlaceInto(qp->outstanding.front().wr, h.payload_len);
}

void Nic::OnResponseDone(QpCore* qp, const FrameHeader& h) {
  switch (h.type) {
    case FrameType::kAck:
      if (!qp->outstanding.empty() && qp->outstanding.front().wr.opcode == rnic::Opcode::kRead &&
          PsnLessEq(qp->outstanding.front().psn, h.psn)) {
        FailQp(qp, rnic::WcStatus::kRetryExceeded, "ACK covers an unanswered READ");
        return;
      }
      CompleteAckedThrough(qp, h.psn, /*inclusive=*/true);
      return;
    case FrameType::kNak:
      CompleteAckedThrough(qp, h.psn, /*inclusive=*/false);
      FailQp(qp, static_cast<rnic::WcStatus>(h.aux),
             absl::StrCat("peer refused request psn ", h.psn, ": ",
                          rnic::WcStatusName(static_cast<rnic::WcStatus>(h.aux))),
             /*tell_peer=*/false);
      return;
    case FrameType::kRnrNak:
      OnRnrNak(qp, h);
      return;
    case FrameType::kReadResponse:
      CompleteSend(qp, qp->outstanding.front(), rnic::WcStatus::kSuccess);
      qp->outstanding.pop_front();
      CompleteAckedThrough(qp, h.psn, /*inclusive=*/true);
      return;
    default:
      return;
  }
}

}  // namespace unloadkv::soft
