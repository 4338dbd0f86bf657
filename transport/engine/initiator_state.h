// What a connection's initiator side holds (docs/engine.md): its writes and messages from
// Write/Send until their callbacks, the main QP's posting state, send slots and message
// credits. Internal to the engine; owned by initiator.cc (posting) and op_completion.cc
// (completing, in post order). Guarded by the connection's mu.
#ifndef UNLOADKV_TRANSPORT_ENGINE_INITIATOR_STATE_H_
#define UNLOADKV_TRANSPORT_ENGINE_INITIATOR_STATE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "transport/base/ring_queue.h"
#include "transport/engine/engine.h"
#include "transport/engine/policy.h"
#include "transport/rnic/types.h"

namespace unloadkv::engine {

// One write or message, from Write/Send until its callback.
struct Op {
  uint64_t id = 0;
  bool is_write = true;
  Path path = Path::kOffload;
  Decision decision;  // the policy's, taken when the write first may be posted (decided)
  bool decided = false;
  bool posted = false;
  bool done = false;
  uint64_t main_index = 0;  // position among the main QP's posted WRs (offloaded writes, messages)
  bool lazy = false;        // WriteOptions::lazy_completion
  bool quiet = false;       // posted unsignaled: completed by later evidence (Quiet)
  bool waited = false;      // a write not posted by the Write that submitted it
  rnic::WcStatus status = rnic::WcStatus::kSuccess;
  absl::Time submitted, decided_at, posted_at, done_at;  // writes only (messages: unset)
  // Write fields.
  rnic::ScatterGatherEntry local;
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  int lane = 0;             // an unloaded write's staging lane
  uint64_t unload_seq = 0;  // its sequence number in the lane
  WriteCallback write_done;
  // Message fields.
  std::string message;  // held until a send slot and a credit are free
  int send_slot = -1;
  SendCallback send_done;
  uint32_t invalidate_rkey = 0;  // SendOptions::invalidate_rkey
};

// The unfinished ops of a connection, oldest first, as a deque of them would hold them, but
// recycling their storage: emplace_back reuses an op that pop_front reset (up to kSpare are
// kept), so a steady stream of writes and messages allocates nothing (a std::deque of ops this
// large allocated a block for each). References to an op stay valid until it is popped.
class OpQueue {
 public:
  Op& emplace_back() {
    std::unique_ptr<Op> op;
    if (spare_.empty()) {
      op = std::make_unique<Op>();
    } else {
      op = std::move(spare_.back());
      spare_.pop_back();
    }
    live_.push_back(std::move(op));
    return *live_.back();
  }
  // Destroys the oldest op's state (its callbacks, its message) here.
  void pop_front() {
    std::unique_ptr<Op> op = std::move(live_.front());
    live_.pop_front();
    *op = Op();
    if (spare_.size() < kSpare) spare_.push_back(std::move(op));
  }
  Op& front() { return *live_.front(); }
  const Op& front() const { return *live_.front(); }
  Op& operator[](size_t i) { return *live_[i]; }
  size_t size() const { return live_.size(); }
  bool empty() const { return live_.empty(); }

  template <typename It, typename T>
  class Iterator {
   public:
    explicit Iterator(It it) : it_(it) {}
    T& operator*() const { return **it_; }
    Iterator& operator++() {
      ++it_;
      return *this;
    }
    bool operator!=(const Iterator& o) const { return it_ != o.it_; }

   private:
    It it_;
  };
  using iterator = Iterator<RingQueue<std::unique_ptr<Op>>::iterator, Op>;
  using const_iterator = Iterator<RingQueue<std::unique_ptr<Op>>::const_iterator, const Op>;
  iterator begin() { return iterator(live_.begin()); }
  iterator end() { return iterator(live_.end()); }
  const_iterator begin() const { return const_iterator(live_.begin()); }
  const_iterator end() const { return const_iterator(live_.end()); }

 private:
  static constexpr size_t kSpare = 256;
  RingQueue<std::unique_ptr<Op>> live_;  // the pointers' ring, too, allocates only to grow
  std::vector<std::unique_ptr<Op>> spare_;
};

struct InitiatorState {
  OpQueue ops;  // ops.front().id is the oldest unfinished op
  uint64_t next_op_id = 0;
  uint64_t messages_issued = 0;  // Send calls accepted
  uint32_t next_lane = 0;        // where the search for a free lane starts
  uint32_t message_credits = 0;
  uint32_t queued_messages = 0;      // sent, not yet posted
  std::vector<int> free_send_slots;  // send_pool slots, free
  uint32_t send_borrowed = 0;
  std::vector<uint32_t> orphan_send_slots;  // see FinishInOrder
  size_t first_unposted = 0;                // index in ops of the first unposted op
  uint32_t send_wrs = 0;                    // posted send WRs not yet completed
  uint64_t main_posted = 0;                 // WRs ever posted on the main QP
  uint32_t max_send_wrs = 0;                // set at creation
  // Main-QP WRs posted unsignaled (messages without a callback, lazy writes), oldest first.
  // They are complete once a later signaled WR completes successfully, or once the peer says
  // it received a message of ours posted after them (RC places one QP's WRs in order).
  struct Quiet {
    uint64_t main_index;
    int send_slot;   // a message's send slot; -1 for a write
    uint64_t op_id;  // a write's op, completed when retired
  };
  RingQueue<Quiet> quiet;
  // While a Connection::Batch is open, main-QP WRs collect here and are posted together.
  int batch_depth = 0;
  std::vector<rnic::SendWorkRequest> batched;
  std::vector<rnic::SendWorkRequest> batched_spare;  // batched's previous storage, reused
  // Buffers of messages posted (copied into their send slots), for the next Send's copy: each
  // of at most kSpareMessageBytes capacity, kSpareBytes of capacity in all (spare_bytes). A
  // byte budget, not a count: small messages (a GET's answer) may wait for credits many at a
  // time (kvserver, 64 GETs in flight: up to 32 answers queued, where 16 spares were kept),
  // and large ones keep the worst case at 16 x 4 KiB per connection.
  static constexpr size_t kSpareMessageBytes = 4096, kSpareBytes = 16 * kSpareMessageBytes;
  std::vector<std::string> spare_messages;
  size_t spare_bytes = 0;
  uint32_t quiet_since_signaled = 0;        // messages
  uint32_t lazy_writes_since_signaled = 0;  // writes
  // Messages posted so far = messages_confirmed (known received by the peer) + the main_index
  // of each later one in `unconfirmed`, oldest first.
  uint64_t messages_confirmed = 0;
  RingQueue<uint64_t> unconfirmed;

  Op* FindOp(uint64_t id);
  Op* FindOpByIndex(uint32_t low32);
};

}  // namespace unloadkv::engine

#endif  // UNLOADKV_TRANSPORT_ENGINE_INITIATOR_STATE_H_
