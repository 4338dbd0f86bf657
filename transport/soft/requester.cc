// The requester side of the soft RNIC: posting sends and receives, and the responses (ACK,
// NAK, READ data) that complete them. Runs with Nic::mu_ held.
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
    if (!rnic::LocalBuffersValid(regions_, wr)) {
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
    o.psn = qp->next_psn++;
    if (wr.opcode != rnic::Opcode::kRead &&
        (wr.signaled || o.psn - qp->last_ack_request_psn >= kAckRequestInterval ||
         qp->outstanding.size() + 1 >= qp->config.max_send_wr / 2)) {
      o.ack_requested = true;
      qp->last_ack_request_psn = o.psn;
    }
    // The accepting end sends nothing before the peer's HELLO: StartAccepted sends it then.
    if (qp->stream != nullptr) EnqueueRequest(qp, o);
    qp->outstanding.push_back(o);
  }
  FlushDirty();
  return absl::OkStatus();
}

void Nic::EnqueueRequest(QpCore* qp, const Outstanding& o) {
  // An ACK this end owes the peer (a delayed one) rides in front of the request, in the same
  // packet, instead of waiting for its timer.
  if (qp->stream->ack_pending) SendAck(qp->stream);
  const rnic::SendWorkRequest& wr = o.wr;
  FrameHeader h;
  h.type = FrameTypeOf(wr.opcode);
  h.psn = o.psn;
  h.imm = wr.imm;
  h.remote_addr = wr.remote_addr;
  h.rkey = wr.rkey;
  if (wr.opcode == rnic::Opcode::kRead) {
    h.aux = static_cast<uint32_t>(wr.TotalLength());
  } else {
    h.payload_len = static_cast<uint32_t>(wr.TotalLength());
    if (o.ack_requested) h.aux = kAckRequested;
  }
  EnqueueGather(qp->stream, h, wr);
}

void Nic::StartAccepted(QpCore* qp) {
  qp->peer_deadline = absl::InfiniteFuture();
  for (const Outstanding& o : qp->outstanding) {
    // A request that failed its local check is never sent, nor anything posted after it (the
    // QP is poisoned: those wait to be flushed), as PostSend does with a stream at hand.
    if (o.local_error != rnic::WcStatus::kSuccess) break;
    EnqueueRequest(qp, o);
  }
  ResumeStream(qp->stream);  // requests that arrived before Connect
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
      Deliver(*qp->recv_cq, wc);
      continue;
    }
    if (!rnic::LocalBuffersValid(regions_, wr)) {
      wc.status = rnic::WcStatus::kLocalProtectionError;
    }
    if (wc.status != rnic::WcStatus::kSuccess) {
      Deliver(*qp->recv_cq, wc);
      FailQp(qp, rnic::WcStatus::kFlushed, "local protection error in a receive request");
      continue;
    }
    qp->recvs.push_back(wr);
  }
  if (qp->stream != nullptr && qp->stream->reading_paused) ResumeStream(qp->stream);
  FlushDirty();
  return absl::OkStatus();
}

absl::Status Nic::PostSrqRecv(SrqCore* srq, absl::Span<const rnic::RecvWorkRequest> wrs) {
  MutexLock l(&mu_);
  const size_t before = srq->state.size();
  absl::Status st = srq->state.Post(wrs, regions_);
  if (srq->state.size() > before) {
    // Streams of its QPs waiting for a receive (RNR) go on.
    std::vector<Stream*> waiting;
    for (Stream* s : stalled_) {
      if (!s->dead && s->reading_paused && s->qp != nullptr && s->qp->srq.get() == srq) {
        waiting.push_back(s);
      }
    }
    for (Stream* s : waiting) ResumeStream(s);
    FlushDirty();
  }
  return st;
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
  QpCore* qp = s->qp;
  if (qp == nullptr || qp->state == rnic::QpState::kError) return Close();
  if (h.type != FrameType::kReadResponse) return PlaceNothing();
  CompleteAckedThrough(qp, h.psn, /*inclusive=*/false);
  if (qp->state == rnic::QpState::kError) return Close();
  if (qp->outstanding.empty() || qp->outstanding.front().psn != h.psn ||
      qp->outstanding.front().wr.opcode != rnic::Opcode::kRead ||
      qp->outstanding.front().wr.TotalLength() != h.payload_len) {
    KillStream(s, rnic::WcStatus::kRetryExceeded,
               absl::StrCat("READ response psn ", h.psn, " matches no outstanding READ"));
    return Close();
  }
  return PlaceInto(qp->outstanding.front().wr, h.payload_len);
}

void Nic::OnResponseDone(Stream* s, const FrameHeader& h) {
  QpCore* qp = s->qp;
  if (qp == nullptr) return;
  switch (h.type) {
    case FrameType::kAck:
      if (!qp->outstanding.empty() && qp->outstanding.front().wr.opcode == rnic::Opcode::kRead &&
          PsnLessEq(qp->outstanding.front().psn, h.psn)) {
        KillStream(s, rnic::WcStatus::kRetryExceeded, "ACK covers an unanswered READ");
        return;
      }
      CompleteAckedThrough(qp, h.psn, /*inclusive=*/true);
      return;
    case FrameType::kNak:
      CompleteAckedThrough(qp, h.psn, /*inclusive=*/false);
      FailQp(qp, static_cast<rnic::WcStatus>(h.aux),
             absl::StrCat("peer refused request psn ", h.psn, ": ",
                          rnic::WcStatusName(static_cast<rnic::WcStatus>(h.aux))));
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
