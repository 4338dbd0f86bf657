// Errors and teardown in the soft RNIC: completing a QP's outstanding work with the RC error
// rules, taking a QP off its stream (telling the peer QP), closing and draining streams,
// freeing them. Runs with Nic::mu_ held.
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

void Nic::CompleteSend(QpCore* qp, const Outstanding& o, rnic::WcStatus status) {
  if (status == rnic::WcStatus::kSuccess && !o.wr.signaled) return;
  rnic::WorkCompletion wc;
  wc.wr_id = o.wr.wr_id;
  wc.status = status;
  wc.opcode = rnic::CompletionOpcode(o.wr.opcode);
  wc.qp_num = qp->qp_num;
  if (o.wr.opcode == rnic::Opcode::kRead && status == rnic::WcStatus::kSuccess) {
    wc.byte_len = static_cast<uint32_t>(o.wr.TotalLength());
  }
  Deliver(qp->send_cq, wc);
}

void Nic::FailQp(QpCore* qp, rnic::WcStatus head_status, absl::string_view reason, bool tell_peer,
                 bool owner) {
  if (qp->state == rnic::QpState::kError) return;
  if ((qp->state != rnic::QpState::kReset && !owner) || !qp->outstanding.empty()) {
    // A peer that closes with nothing outstanding is an ordinary disconnect.
    Log(head_status == rnic::WcStatus::kFlushed || qp->outstanding.empty() ? LogLevel::kInfo
                                                                           : LogLevel::kWarning,
        absl::StrCat("soft qp ", qp->qp_num, " -> error: ", reason));
  }
  qp->state = rnic::QpState::kError;
  // Its windows' keys stop working with it.
  domain_->UnbindAllOf(qp->qp_num, /*forget=*/false);
  qp->placing_key = 0;
  // Off the stream first: its requests not yet sent must not leave once their buffers are the
  // caller's again (the completions below hand them back).
  Detach(qp, tell_peer);
  bool head = true;
  for (const Outstanding& o : qp->outstanding) {
    rnic::WcStatus st = o.local_error != rnic::WcStatus::kSuccess ? o.local_error
                        : head                                    ? head_status
                                                                  : rnic::WcStatus::kFlushed;
    CompleteSend(qp, o, st);
    head = false;
  }
  qp->outstanding.clear();
  for (const rnic::RecvWorkRequest& r : qp->recvs) {
    rnic::WorkCompletion wc;
    wc.wr_id = r.wr_id;
    wc.status = rnic::WcStatus::kFlushed;
    wc.opcode = rnic::WcOpcode::kRecv;
    wc.qp_num = qp->qp_num;
    Deliver(qp->recv_cq, wc);
  }
  qp->recvs.clear();
  if (qp->taken.has_value()) {  // taken from the SRQ for a request that never finished
    rnic::WorkCompletion wc;
    wc.wr_id = qp->taken->wr_id;
    wc.status = rnic::WcStatus::kFlushed;
    wc.opcode = rnic::WcOpcode::kRecv;
    wc.qp_num = qp->qp_num;
    Deliver(qp->recv_cq, wc);
    qp->taken.reset();
  }
  qp->peer_deadline = absl::InfiniteFuture();
  qp->rnr_wait = false;
  qp->rnr_retry_at = absl::InfiniteFuture();
  qp->ack_pending = qp->ack_now = false;
  qp->ack_deadline = absl::InfiniteFuture();
}

void Nic::Detach(QpCore* qp, bool tell_peer) {
  Stream* s = qp->stream;
  if (s == nullptr) return;
  PurgeRequests(s, qp);
  if (s->current == qp) {  // a payload of this QP's is being placed: the rest is skipped
    s->reader.DiscardRest();
    s->current = nullptr;
    qp->placing_key = 0;
  }
  if (tell_peer && !s->dead && !s->draining) EnqueueControl(qp, FrameType::kDisconnect);
  qp->stream = nullptr;
  --s->attached;
  if (s->attached > 0 || s->dead) return;
  if (s->outbound) {
    CloseStream(s, /*drain=*/true);
  } else {
    s->handshake_deadline = absl::Now() + kHelloTimeout;
    ArmTimerFor(s->handshake_deadline);
  }
}

void Nic::KillStream(Stream* s, rnic::WcStatus head_status, absl::string_view reason) {
  if (s->dead) return;
  std::vector<QpCore*> on_it;
  for (const auto& [num, qp] : qps_) {
    if (qp->stream == s) on_it.push_back(qp.get());
  }
  if (on_it.empty()) {
    peer_log_.Log(LogLevel::kWarning, absl::StrCat("soft stream closed: ", reason));
  }
  FinishClose(s);  // a broken stream is not drained
  for (QpCore* qp : on_it) FailQp(qp, head_status, reason, /*tell_peer=*/false);
}

void Nic::PeerClosed(Stream* s, absl::string_view reason) {
  // A peer that refused one of our requests sent its NAK before closing: that NAK, read
  // first, already failed the QP with the refusal's status.
  KillStream(s, rnic::WcStatus::kRetryExceeded, reason);
}

void Nic::ForgetOutbound(Stream* s) {
  if (!s->outbound) return;
  auto it = outbound_.find(s->peer);
  if (it != outbound_.end() && it->second == s) outbound_.erase(it);
}

void Nic::CloseStream(Stream* s, bool drain) {
  if (s->dead) return;
  ForgetOutbound(s);
  if (drain && !s->connecting) {
    // Queued output first, then our side shuts and input is dropped until the peer's side
    // closes (FlushStream, DropInput): at most one second.
    s->draining = true;
    s->drain_deadline = absl::Now() + absl::Seconds(1);
    if (s->out.empty()) {
      shutdown(s->fd, SHUT_WR);
      s->lingering = true;
    } else {
      s->want_write = true;
    }
    UpdateInterest(s);
    ArmStallTimer();
    return;
  }
  FinishClose(s);
}

void Nic::FinishClose(Stream* s) {
  if (s->dead) return;
  ForgetOutbound(s);
  s->dead = true;
  epoll_ctl(epfd_, EPOLL_CTL_DEL, s->fd, nullptr);
  if (s->reading_unlocked) {
    shutdown(s->fd, SHUT_RDWR);  // ends the recv; that Progress closes it
    s->close_by_reader = true;
  } else {
    close(s->fd);
  }
  s->fd = -1;
  s->out.clear();
  s->current = nullptr;
}

void Nic::Reap() {
  auto is_dead = [](Stream* s) { return s->dead; };
  dirty_.erase(std::remove_if(dirty_.begin(), dirty_.end(), is_dead), dirty_.end());
  streams_.erase(std::remove_if(streams_.begin(), streams_.end(),
                                [](const std::unique_ptr<Stream>& s) { return s->dead; }),
                 streams_.end());
}

}  // namespace unloadkv::soft
