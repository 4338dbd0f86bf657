// What the ports of one soft device share (SoftDevice::Options::ports): its memory regions and
// windows, so that a key from any port is valid on every port, and QP numbers, unique across
// ports (windows and frames name QPs by number). Not part of the public interface.
#ifndef UNLOADKV_TRANSPORT_SOFT_DOMAIN_H_
#define UNLOADKV_TRANSPORT_SOFT_DOMAIN_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "transport/base/mutex.h"
#include "transport/rnic/key_source.h"
#include "transport/rnic/memory_window.h"
#include "transport/rnic/region_table.h"
#include "transport/rnic/types.h"

namespace unloadkv::soft {

class Nic;

// A memory window (rnic/memory_window.h). Its fields but last_key belong to the Domain.
struct WindowCore {
  uint32_t key = 0;                   // while bound; 0 when unbound
  uint32_t qp = 0;                    // the QP it is bound to
  uint32_t region_key = 0;            // the region it lies in
  std::atomic<uint32_t> last_key{0};  // MemoryWindow::rkey()
};

// Thread-safety: with several ports (`shared`), every method may be called from any thread,
// with or without a port's Nic::mu_ held (the domain's lock comes after every port's): each
// call takes `mu_` for its duration and calls nothing outside. With one port the domain takes
// no lock of its own, and a caller must hold that port's mu_.
class Domain {
 public:
  explicit Domain(bool shared) : shared_(shared) {}
  Domain(const Domain&) = delete;
  Domain& operator=(const Domain&) = delete;

  // The ports, for what must hold every port's mu_ (a region deregistered while another port
  // may be placing into it). Set once, before any port is used.
  void SetPorts(std::vector<std::weak_ptr<Nic>> ports) { ports_ = std::move(ports); }
  const std::vector<std::weak_ptr<Nic>>& ports() const { return ports_; }

  uint32_t NewQpNum();

  // Regions: the key of a new one (lkey = rkey), and its end (its windows unbound with it).
  uint32_t Register(uint64_t addr, uint64_t length, uint32_t access);
  void Deregister(uint32_t key);

  // Calls `f(const rnic::RegionTable&)` with the regions and bound windows held still, and
  // returns its result: the checks of a request's keys (Check, LocalBuffersValid, an SRQ's
  // posted buffers). `f` must only read the table.
  template <typename F>
  auto WithRegions(F f) const {
    Lock l(*this);
    return f(regions_);
  }

  // Windows: `handle` is the rnic::MemoryWindow that binds name.
  void AddWindow(const rnic::MemoryWindow* handle, WindowCore* window);
  void RemoveWindow(const rnic::MemoryWindow* handle, WindowCore* window);
  // A bind done by QP `qp`: kSuccess, or why not (the window is another device's or bound, the
  // region does not allow it).
  rnic::WcStatus Bind(uint32_t qp, const rnic::WindowBind& bind);
  // Whether `key` names a window bound to QP `qp`.
  bool IsBoundTo(uint32_t key, uint32_t qp) const;
  // Unbinds the window `key` if it is bound to QP `qp`; false (nothing done) otherwise.
  bool Invalidate(uint32_t key, uint32_t qp);
  // Unbinds every window bound to QP `qp` (the QP failed); `forget` also drops what the domain
  // keeps per QP (the QP is destroyed).
  void UnbindAllOf(uint32_t qp, bool forget);

 private:
  // Holds mu_ when the domain is shared.
  class Lock {
   public:
    explicit Lock(const Domain& d) : d_(d) {
      if (d_.shared_) d_.mu_.Lock();
    }
    ~Lock() {
      if (d_.shared_) d_.mu_.Unlock();
    }
    Lock(const Lock&) = delete;
    Lock& operator=(const Lock&) = delete;

   private:
    const Domain& d_;
  };

  uint32_t NewKey();           // a key no region or window has; requires Lock
  void Unbind(WindowCore* w);  // requires Lock

  const bool shared_;
  mutable Mutex mu_;
  std::vector<std::weak_ptr<Nic>> ports_;
  // Guarded by mu_ when shared_, else by the one port's Nic::mu_.
  rnic::RegionTable regions_;  // regions and bound windows
  rnic::KeySource keys_ = rnic::KeySource::Random();
  absl::flat_hash_map<const rnic::MemoryWindow*, WindowCore*> windows_;
  absl::flat_hash_map<uint32_t, WindowCore*> bound_;  // by key
  // Keys bound per QP number; an entry stays until its QP is destroyed, so binds and unbinds
  // once warm allocate nothing.
  absl::flat_hash_map<uint32_t, absl::flat_hash_set<uint32_t>> qp_windows_;
  uint32_t next_qp_num_ = 1;
};

}  // namespace unloadkv::soft

#endif  // UNLOADKV_TRANSPORT_SOFT_DOMAIN_H_
