// What a connection's initiator side holds (docs/engine.md): its writes and messages from
// Write/Send until their callbacks, the main QP's posting state, send slots and message
// credits. Internal to the engine; owned by initiator.cc (posting) and op_completion.cc
// (completing, in post order). Guarded by the connection's mu.
#ifndef UNLOADKV_TRANSPORT_ENGINE_INITIATOR_STATE_H_
#define UNLOADKV_TRANSPORT_ENGINE_INITIATOR_STATE_H_

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/time/time.h"
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
  absl::Time submitted, decided_at, posted_at, done_at;
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

struct InitiatorState {
  std::deque<Op> ops;  // ops.front().id is the oldest unfinished op
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
  std::deque<Quiet> quiet;
  // While a Connection::Batch is open, main-QP WRs collect here and are posted together.
  int batch_depth = 0;
  std::vector<rnic::SendWorkRequest> batched;
  uint32_t quiet_since_signaled = 0;        // messages
  uint32_t lazy_writes_since_signaled = 0;  // writes
  // Messages posted so far = messages_confirmed (known received by the peer) + the main_index
  // of each later one in `unconfirmed`, oldest first.
  uint64_t messages_confirmed = 0;
  std::deque<uint64_t> unconfirmed;

  Op* FindOp(uint64_t id);
  Op* FindOpByIndex(uint32_t low32);
};

}  // namespace unloadkv::engine

#endif  // UNLOADKV_TRANSPORT_ENGINE_INITIATOR_STATE_H_
