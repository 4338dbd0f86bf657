// Send slots for engine messages, shared by the connections one worker serves.
//
// A message is copied into a send slot (header + payload) and the slot is held until the NIC is
// done with it. Each admitted connection owns `reserve` slots for as long as it lives; one with
// more messages in flight borrows slots beyond them from `shared` ones, and gives each back as
// soon as it is free again. So a connection whose peer stops completing its messages holds at
// most its reserve plus what it could borrow, and the others always have their reserves.
// Slots are mapped, not zero-filled, and lent most recently used first: only slots ever used
// are touched and registered (lazy_region.h).
//
// Thread-safety: every method may be called from any thread. Lock order: a connection's lock
// before the pool's.
#ifndef UNLOADKV_TRANSPORT_ENGINE_SEND_SLOT_POOL_H_
#define UNLOADKV_TRANSPORT_ENGINE_SEND_SLOT_POOL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "transport/base/mutex.h"
#include "transport/engine/lazy_region.h"
#include "transport/rnic/device.h"

namespace unloadkv::engine {

class SendSlotPool {
 public:
  struct Options {
    uint32_t slot_bytes = 0;
    uint32_t connections = 0;  // admitted at once, at most
    uint32_t reserve = 0;      // slots per admitted connection
    uint32_t shared = 0;       // slots lent
  };
  static absl::StatusOr<std::unique_ptr<SendSlotPool>> Create(rnic::Device& device,
                                                              const Options& options);

  char* slot(uint32_t index) const { return region_->item(index); }
  // The scatter-gather entry of the first `length` bytes of slot `index` (one handed out).
  rnic::ScatterGatherEntry Sge(uint32_t index, uint32_t length) const {
    return region_->Sge(index, length);
  }

  // Admits a connection: its `reserve` slots. ResourceExhausted, naming the limit, when
  // `connections` are admitted; the device's error when registering their memory fails.
  absl::StatusOr<std::vector<uint32_t>> Admit();
  // One more slot, lent; nullopt when every shared slot is lent (or registering failed).
  std::optional<uint32_t> Borrow();
  // Gives back lent slots (several under one acquisition of the lock).
  void Return(absl::Span<const uint32_t> indices);
  void Return(uint32_t index) { Return({&index, 1}); }
  // A connection leaves with the slots it holds (its reserve and what it borrowed).
  void Leave(absl::Span<const uint32_t> slots, uint32_t borrowed);

  uint32_t capacity() const { return capacity_; }
  uint32_t lent() const;
  uint32_t touched() const;
  uint32_t registered() const;  // slots in registered chunks

 private:
  explicit SendSlotPool(const Options& options) : options_(options) {}
  absl::StatusOr<uint32_t> TakeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  uint32_t capacity_ = 0;
  std::unique_ptr<LazyRegion> region_;
  mutable Mutex mu_;
  std::vector<uint32_t> free_ ABSL_GUARDED_BY(mu_);  // last = most recently used
  uint32_t untouched_ ABSL_GUARDED_BY(mu_) = 0;      // slots [untouched_, capacity) never used
  uint32_t admitted_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t lent_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace unloadkv::engine

#endif  // UNLOADKV_TRANSPORT_ENGINE_SEND_SLOT_POOL_H_
