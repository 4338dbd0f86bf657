// Memory windows of the soft RNIC (rnic/memory_window.h): binds and local invalidations, done
// when posted and completed in send-queue order. Runs with Nic::mu_ held; the windows
// themselves are the Domain's (domain.h).
#include "transport/soft/nic.h"

namespace unloadkv::soft {

void Nic::AddWindow(const rnic::MemoryWindow* handle, WindowCore* window) {
  MutexLock l(&mu_);
  domain_->AddWindow(handle, window);
}

void Nic::RemoveWindow(const rnic::MemoryWindow* handle, WindowCore* window) {
  MutexLock l(&mu_);
  domain_->RemoveWindow(handle, window);
}

rnic::WcStatus Nic::BindWindow(QpCore* qp, const rnic::WindowBind& b) {
  return domain_->Bind(qp->qp_num, b);
}

rnic::WcStatus Nic::InvalidateWindow(QpCore* qp, uint32_t key) {
  return domain_->Invalidate(key, qp->qp_num) ? rnic::WcStatus::kSuccess
                                              : rnic::WcStatus::kWindowBindError;
}

void Nic::PostLocalOp(QpCore* qp, const Outstanding& o) {
  const rnic::SendWorkRequest& wr = o.wr;
  rnic::WcStatus st = wr.opcode == rnic::Opcode::kBindWindow
                          ? BindWindow(qp, wr.bind)
                          : InvalidateWindow(qp, wr.invalidate_rkey);
  if (st != rnic::WcStatus::kSuccess) {
    CompleteSend(qp, o, st);
    FailQp(qp, rnic::WcStatus::kFlushed, "memory window bind or invalidation refused");
    return;
  }
  // A WRITE through the key may be mid-placement (its header passed the check before the
  // invalidation): no byte of it may land once the invalidation completed, so the rest is
  // dropped and the WRITE refused, as if it had come after. The QP fails with it, and this
  // request completes flushed.
  if (wr.opcode == rnic::Opcode::kLocalInvalidate && qp->placing_key == wr.invalidate_rkey &&
      qp->stream != nullptr && qp->stream->current == qp) {
    qp->stream->reader.DiscardRest();
    qp->stream->current = nullptr;
    FrameHeader h;
    h.psn = qp->placing_psn;
    qp->placing_key = 0;
    Refuse(qp, h, rnic::WcStatus::kRemoteAccessError,
           "its memory window was invalidated while its payload arrived");
    CompleteSend(qp, o, rnic::WcStatus::kFlushed);
    return;
  }
  // Done, and completed now: not after the QP's earlier requests, whose ACKs a soft peer may
  // delay (docs/wire-soft.md, memory windows).
  CompleteSend(qp, o, rnic::WcStatus::kSuccess);
}

}  // namespace unloadkv::soft
