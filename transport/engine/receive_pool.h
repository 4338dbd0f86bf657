// Receive buffers of equal size shared by the connections one worker serves: one pool per
// worker for engine messages (every main QP's receives), one for staged writes and their acks
// (every staging QP's receives; docs/engine.md, "The staging pool").
//
// The buffers are posted on the pool's shared receive queue, from which the QPs attached to it
// take their receives. A peer sends only with a credit, and every credit a connection hands
// out is backed by one buffer posted on the SRQ (or held for a receive not yet handled), so
// the SRQ never runs dry while peers keep to their credits.
//
// Buffers are counted in units, one per credit backed. An admitted connection holds
// `reserve` units for as long as it lives (the credits it starts with and never drops
// below); a busy one borrows more from `shared` units and gives them back when it is busy no
// longer. Admission is bounded by `connections`, so every connection always has its reserve
// whatever the others borrowed, and memory grows with the workers and the load, not with the
// connections: capacity() = connections x reserve + shared buffers, of which only those ever
// posted are touched (buffers are posted most recently used first) and registered
// (lazy_region.h).
//
// Thread-safety: every method may be called from any thread. Lock order: a connection's lock
// before the pool's.
#ifndef UNLOADKV_TRANSPORT_ENGINE_RECEIVE_POOL_H_
#define UNLOADKV_TRANSPORT_ENGINE_RECEIVE_POOL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "transport/base/mutex.h"
#include "transport/engine/lazy_region.h"
#include "transport/rnic/device.h"
#include "transport/rnic/shared_receive_queue.h"

namespace unloadkv::engine {

class ReceivePool {
 public:
  struct Options {
    const char* name = "receive pool";  // names the pool in errors
    uint32_t buffer_bytes = 0;          // one message, or one staged write, with its header
    uint32_t connections = 0;           // admitted at once, at most
    uint32_t reserve = 0;               // units per admitted connection
    uint32_t shared = 0;                // units lent to busy connections
    uint64_t wr_id_base = 0;            // a buffer's receive has wr_id = wr_id_base | index
    bool huge_pages = false;            // try 2 MiB pages (mapped_memory.h)
    bool modeled_huge_pages = false;    // registered as huge-page backed anyway (EngineOptions)
  };
  // InvalidArgument when capacity() would exceed what the device's SRQ holds.
  static absl::StatusOr<std::unique_ptr<ReceivePool>> Create(rnic::Device& device,
                                                             const Options& options);
  // Every QP attached to srq() must be destroyed first.
  ~ReceivePool();

  rnic::SharedReceiveQueue* srq() const { return srq_.get(); }
  const char* buffer(uint32_t index) const { return region_->item(index); }
  uint32_t capacity() const { return capacity_; }

  // Admits a connection (for the staging pool: one lane of one): posts buffers for its
  // `reserve` first credits. ResourceExhausted,
  // naming the limit, when `connections` are admitted.
  absl::Status Admit();
  // Lends one unit: a buffer posted for one more credit. False when all shared units are lent.
  bool Borrow();
  // A delivered message's buffer `index` comes back. Renew posts it again (its unit stays with
  // the connection: a credit to hand back to the peer), several together (one post per 32),
  // without the pool's lock: a buffer handed out was prepared (LazyRegion::Prepare), what it
  // reads is set at creation, and the SRQ serializes its posts. Return sets it aside and gives
  // its borrowed unit back.
  absl::Status Renew(absl::Span<const uint32_t> indices) const;
  absl::Status Renew(uint32_t index) const { return Renew({&index, 1}); }
  void Return(uint32_t index);
  // A buffer taken by a receive that delivers nothing (it failed, or its connection left):
  // posted again. Its unit stays wherever it was.
  void Recycle(uint32_t index);
  // Gives back `n` lent units whose buffers stay posted, spare: they back the next units lent
  // or admitted.
  void Release(uint32_t n);
  // A connection leaves: `posted` of its units back credits its peer held or was about to get
  // (their buffers stay posted on the SRQ, spare, and back the next credits handed out),
  // `held` are the buffers of messages it never delivered, and `borrowed` of its units were
  // lent.
  void Leave(uint32_t posted, absl::Span<const uint32_t> held, uint32_t borrowed);

  struct Usage {
    uint32_t admitted = 0;    // connections
    uint32_t lent = 0;        // shared units borrowed
    uint32_t touched = 0;     // buffers ever posted (what may be resident)
    uint32_t registered = 0;  // buffers in registered chunks
  };
  Usage usage() const;

 private:
  ReceivePool(const Options& options, uint32_t capacity) : options_(options), capacity_(capacity) {}
  // Posts one buffer, a spare posted one first, else the most recently used free one.
  absl::Status PostOne() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  const uint32_t capacity_;
  std::unique_ptr<LazyRegion> region_;
  std::unique_ptr<rnic::SharedReceiveQueue> srq_;
  mutable Mutex mu_;
  std::vector<uint32_t> free_ ABSL_GUARDED_BY(mu_);  // neither posted nor held; last = newest
  uint32_t untouched_ ABSL_GUARDED_BY(mu_) = 0;      // buffers [untouched_, capacity_) never used
  uint32_t spare_posted_ ABSL_GUARDED_BY(mu_) = 0;   // posted, backing no credit
  uint32_t admitted_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t lent_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace unloadkv::engine

#endif  // UNLOADKV_TRANSPORT_ENGINE_RECEIVE_POOL_H_
