// QP pairs over a shared stream in the soft RNIC: the dialing end's CONNECT names both QPs and
// its first PSN, the listening end answers CONNECT_ACK once it is connected too (requests flow
// only then), and either end's DISCONNECT fails the peer QP. docs/wire-soft.md has the rules.
// Runs with Nic::mu_ held.
#include <openssl/crypto.h>

#include "absl/strings/str_cat.h"
#include "transport/base/logging.h"
#include "transport/soft/datapath_util.h"
#include "transport/soft/nic.h"

namespace unloadkv::soft {

void Nic::RefuseConnect(Stream* s, uint32_t qp, uint32_t src_qp, absl::string_view why) {
  peer_log_.Log(LogLevel::kWarning,
                absl::StrCat("soft: CONNECT from QP ", src_qp, " to QP ", qp, " refused: ", why));
  FrameHeader no;
  no.type = FrameType::kDisconnect;
  no.qp = src_qp;
  no.src_qp = qp;
  Enqueue(s, no, nullptr, 0, false);
}

PayloadPlan Nic::OnConnect(Stream* s, const FrameHeader& h) {
  auto refuse = [&](absl::string_view why) {
    RefuseConnect(s, h.qp, h.src_qp, why);
    return PlaceNothing();
  };
  if (s->outbound) return refuse("only the dialing end connects");
  auto it = qps_.find(h.qp);
  if (it == qps_.end()) return refuse("no such QP");
  QpCore* qp = it->second.get();
  if (qp->state == rnic::QpState::kError) return refuse("the QP is in the error state");
  if (qp->stream != nullptr) return refuse("the QP is connected to another already");
  const bool connected = qp->state == rnic::QpState::kReadyToSend;
  if (connected && qp->dials) return refuse("the QP dials its peer itself");
  if (connected && (qp->remote.qp_num != h.src_qp || qp->remote.psn != h.psn)) {
    return refuse(absl::StrCat("the QP is connected to QP ", qp->remote.qp_num, " (psn ",
                               qp->remote.psn, "), not QP ", h.src_qp, " (psn ", h.psn, ")"));
  }
  // The token proves the CONNECT comes from the end of the authenticated exchange; one that
  // arrives before this end's Connect is checked there (soft_device.cc).
  const std::string token = ConnectTokenOf(h);
  if (connected && CRYPTO_memcmp(token.data(), CanonicalConnectToken(qp->remote.token).data(),
                                 rnic::kConnectTokenBytes) != 0) {
    return refuse("it does not carry the pair's token");
  }
  qp->offered_token = token;
  qp->stream = s;
  ++s->attached;
  s->handshake_deadline = absl::InfiniteFuture();
  qp->peer_qp = h.src_qp;
  qp->expected_psn = h.psn;
  if (connected) Establish(qp);
  return PlaceNothing();
}

void Nic::Establish(QpCore* qp) {
  EnqueueControl(qp, FrameType::kConnectAck);
  qp->established = true;
  qp->peer_deadline = absl::InfiniteFuture();
  SendOutstanding(qp);
}

PayloadPlan Nic::OnConnectAck(Stream* s, const FrameHeader& h) {
  QpCore* qp = QpFor(s, h);
  if (qp == nullptr || !qp->dials || qp->established) return PlaceNothing();  // stale
  qp->established = true;
  qp->peer_deadline = absl::InfiniteFuture();
  SendOutstanding(qp);
  return PlaceNothing();
}

PayloadPlan Nic::OnDisconnect(Stream* s, const FrameHeader& h) {
  auto it = qps_.find(h.qp);
  if (it == qps_.end()) return PlaceNothing();
  QpCore* qp = it->second.get();
  if (qp->stream != s || qp->peer_qp != h.src_qp) return PlaceNothing();
  FailQp(qp, rnic::WcStatus::kRetryExceeded,
         absl::StrCat("peer QP ", h.src_qp, " at ", qp->remote.address,
                      " disconnected or refused the connection"),
         /*tell_peer=*/false);
  return PlaceNothing();
}

}  // namespace unloadkv::soft
