// A type-2 memory window (MW): a remote key for a sub-range of a memory region, bound on one
// QP (verbs: ibv_alloc_mw(IBV_MW_TYPE_2), IBV_WR_BIND_MW).
#ifndef UNLOADKV_TRANSPORT_RNIC_MEMORY_WINDOW_H_
#define UNLOADKV_TRANSPORT_RNIC_MEMORY_WINDOW_H_

#include <cstdint>

namespace unloadkv::rnic {

// The contract every backend keeps (the conformance suite checks it):
//  * A window is allocated unbound: no key of it works.
//  * A kBindWindow request on QP q binds it to [addr, addr+length) of a region of the same
//    device that carries kMwBind, with kRemoteWrite and/or kRemoteRead. The window gets a
//    fresh key (rkey() once PostSend returned), valid no later than the bind's completion.
//    From then on a WRITE or READ naming that key is allowed only when it arrives on q and
//    lies inside the bound range with the right; anything else fails exactly as a bad rkey
//    does (kRemoteAccessError at the requester, nothing written, both QPs in error).
//  * A bound window cannot be bound again: kWindowBindError. It becomes unbound (its key
//    never works again) by a kLocalInvalidate on q, by the peer's kSendWithInvalidate arriving
//    on q, when q fails or is destroyed, when its region is deregistered, or when the window is
//    destroyed. An invalidation takes effect no later than its completion (the receive's, for
//    SEND_WITH_INVALIDATE).
//  * A bind or invalidation completes (kBindWindow / kLocalInvalidate) once done. Verbs and the
//    simulated NIC complete it in send-queue order; the soft RNIC completes it when posted, not
//    after the QP's earlier requests, whose ACKs a soft peer may delay by milliseconds. Callers
//    must not infer anything about earlier requests from it.
//  * Keys are drawn at random (rnic/key_source.h) and never equal a live key of the device.
//
// Destroying the window unbinds it. The window must not outlive its device. Thread-safety:
// rkey() may be called from any thread; binds are posted by one thread at a time.
class MemoryWindow {
 public:
  MemoryWindow() = default;
  virtual ~MemoryWindow() = default;
  MemoryWindow(const MemoryWindow&) = delete;
  MemoryWindow& operator=(const MemoryWindow&) = delete;

  // The key of the window's latest bind posted; 0 before the first.
  virtual uint32_t rkey() const = 0;
};

}  // namespace unloadkv::rnic

#endif  // UNLOADKV_TRANSPORT_RNIC_MEMORY_WINDOW_H_
