// One staging lane of a connection (docs/engine.md, "The staging pool"): a staging QP, whose
// receives (the peer's staged writes and acks) come from the staging pool of the worker
// serving it, and the credits both ways. Internal to the engine: initiator.cc posts unloaded
// writes on it and takes their acks, staged_write.cc applies the peer's and acknowledges.
#ifndef UNLOADKV_TRANSPORT_ENGINE_LANE_H_
#define UNLOADKV_TRANSPORT_ENGINE_LANE_H_

#include <cstdint>
#include <memory>

#include "transport/base/ring_queue.h"
#include "transport/engine/receive_pool.h"
#include "transport/rnic/queue_pair.h"

namespace unloadkv::engine {

// Fields other than pool, qp and worker are guarded by the connection's mu.
struct Lane {
  std::shared_ptr<ReceivePool> pool;  // declared before the QP: it must outlive it
  std::unique_ptr<rnic::QueuePair> qp;
  int worker = 0;
  // Initiator side: unloaded writes posted, acknowledged, and in flight (op ids, in order);
  // the peer's grant (sequence numbers below `limit` may be sent).
  uint64_t next_seq = 0;
  uint64_t acked_seq = 0;
  uint64_t limit = 0;
  RingQueue<uint64_t> inflight;
  // Units borrowed from `pool` backing the acks still to come for our writes (each ack
  // acknowledges at least one new write, except the peer's one unsolicited ack, which the
  // lane's reserve backs): at least inflight.size(); given back once nothing is in flight.
  uint32_t ack_units = 0;
  bool starved = false;  // a write waited for credits since the last one posted
  // Target side: staged writes applied so far; the ack state.
  uint64_t expected_seq = 0;
  bool ack_pending = false;
  bool refused = false;  // refused the write at expected_seq; the NAK goes out on this lane
  uint32_t acks_in_flight = 0;
  uint32_t next_ack_slot = 0;
  uint32_t nak_wr_index = UINT32_MAX;  // the NAK's WR index, once posted
  // Acks that acknowledge nothing new (message credits only) go one at a time: the reserve
  // backs one at the peer.
  uint64_t applied_sent = 0;
  uint32_t unsolicited_wr_index = UINT32_MAX;  // in flight, or UINT32_MAX
  // Target-side staging credits. `units` buffers of `pool` back the peer's credits
  // (min_staging_credits reserved + `borrowed`), `in_hand` of them hold staged writes being
  // applied; the peer may send sequence numbers below `limit_sent`, so
  // limit_sent - expected_seq <= units - in_hand. `level` is the window aimed at: doubled when
  // the peer asks (StagingHeader::wants_credits), lowered by one after 4 x `level` staged
  // writes sent while half the window was unused (`calm`).
  uint32_t units = 0;
  uint32_t borrowed = 0;
  uint32_t in_hand = 0;
  uint32_t level = 0;
  uint32_t calm = 0;
  uint64_t limit_sent = 0;
};

}  // namespace unloadkv::engine

#endif  // UNLOADKV_TRANSPORT_ENGINE_LANE_H_
