// What a connection's target side holds for the messages it receives (docs/engine.md,
// "Message credits"): the credits it hands the peer, the messages held back until the
// unloaded writes they follow are applied, and a refusal in progress. Internal to the engine;
// owned by completion_worker.cc (receiving, delivering, crediting) and staged_write.cc
// (refusing). Guarded by the connection's mu. (Each lane's staged-write state is in lane.h.)
#ifndef UNLOADKV_TRANSPORT_ENGINE_TARGET_STATE_H_
#define UNLOADKV_TRANSPORT_ENGINE_TARGET_STATE_H_

#include <cstdint>
#include <vector>

#include "transport/base/ring_queue.h"
#include "transport/engine/engine_wire.h"
#include "transport/rnic/types.h"

namespace unloadkv::engine {

struct TargetState {
  uint64_t messages_received = 0;
  uint64_t messages_taken = 0;  // taken for delivery (Held::number)
  // Every unit this connection holds in the pool (min_message_credits + borrowed) backs one
  // credit the peer holds (`granted`), one about to be handed back (`credits_to_return`, its
  // buffer posted) or one message received and not yet delivered (`in_hand`, its buffer
  // held). `credit_level` is how many it aims to hold: doubled when the peer runs out with
  // messages waiting, lowered by one after `credit_level` messages in a row (`calm_messages`)
  // that did not wait.
  uint32_t granted = 0;
  uint32_t credits_to_return = 0;
  uint32_t in_hand = 0;
  uint32_t borrowed = 0;
  uint32_t credit_level = 0;
  uint32_t calm_messages = 0;
  // Credits held back (their buffers posted) while Backlogged.
  uint32_t withheld = 0;
  bool refusing = false;  // a staged write was refused: NAK, then fail
  rnic::WcStatus nak_status = rnic::WcStatus::kSuccess;
  bool nak_sent = false;
  // Messages received before the unloaded writes they follow were applied: (pool buffer,
  // length, unloaded writes of each lane required), in arrival order.
  struct Held {
    uint32_t buffer, length;
    uint32_t need[kMaxLanes];
    uint64_t number = 0;       // 0, 1, ... in delivery order; set by TakeDeliverable
    uint32_t invalidated = 0;  // the window key it invalidated (SEND_WITH_INVALIDATE), or 0
  };
  RingQueue<Held> held;
  std::vector<Held> deliverable;  // scratch of TakeDeliverable (completion_worker.cc)
  std::vector<uint32_t> renew;    // scratch of ReleaseBuffers (completion_worker.cc)
};

}  // namespace unloadkv::engine

#endif  // UNLOADKV_TRANSPORT_ENGINE_TARGET_STATE_H_
