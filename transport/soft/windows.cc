// Memory windows of the soft RNIC (rnic/memory_window.h): binds and local invalidations, done
// when posted and completed in send-queue order. Runs with Nic::mu_ held.
#include <vector>

#include "transport/soft/nic.h"

namespace unloadkv::soft {

void Nic::AddWindow(const rnic::MemoryWindow* handle, WindowCore* window) {
  MutexLock l(&mu_);
  windows_[handle] = window;
}

void Nic::RemoveWindow(const rnic::MemoryWindow* handle, WindowCore* window) {
  MutexLock l(&mu_);
  if (window->key != 0) Unbind(window);
  windows_.erase(handle);
}

rnic::WcStatus Nic::BindWindow(QpCore* qp, const rnic::WindowBind& b) {
  auto wit = windows_.find(b.window);
  if (wit == windows_.end()) return rnic::WcStatus::kWindowBindError;  // another device's
  WindowCore* w = wit->second;
  if (w->key != 0) return rnic::WcStatus::kWindowBindError;  // type 2: invalidate first
  const uint32_t region_key = b.region->lkey();
  if (!regions_.CanBind(region_key, b.access, b.addr, b.length)) {
    return rnic::WcStatus::kWindowBindError;
  }
  const uint32_t key = keys_.Next([&](uint32_t k) { return regions_.Contains(k); });
  regions_.Insert(key, {b.addr, b.length, b.access, qp->qp_num, region_key});
  w->key = key;
  w->qp = qp->qp_num;
  w->region_key = region_key;
  w->last_key.store(key, std::memory_order_release);
  bound_[key] = w;
  qp->window_keys.insert(key);
  return rnic::WcStatus::kSuccess;
}

rnic::WcStatus Nic::InvalidateWindow(QpCore* qp, uint32_t key) {
  auto it = bound_.find(key);
  if (it == bound_.end() || it->second->qp != qp->qp_num) {
    return rnic::WcStatus::kWindowBindError;
  }
  Unbind(it->second);
  return rnic::WcStatus::kSuccess;
}

void Nic::Unbind(WindowCore* w) {
  regions_.Erase(w->key);
  bound_.erase(w->key);
  if (auto q = qps_.find(w->qp); q != qps_.end()) q->second->window_keys.erase(w->key);
  w->key = 0;
  w->qp = 0;
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
