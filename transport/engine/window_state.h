// What a connection holds for the memory windows it grants its peer (Connection::BindWindows,
// InvalidateWindow): the bind and invalidation requests in flight on its main QP, in post
// order, and the keys bound on it. Internal to the engine; owned by windows.cc. Guarded by the
// connection's mu.
#ifndef UNLOADKV_TRANSPORT_ENGINE_WINDOW_STATE_H_
#define UNLOADKV_TRANSPORT_ENGINE_WINDOW_STATE_H_

#include <array>
#include <cstdint>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "transport/base/ring_queue.h"
#include "transport/engine/engine.h"
#include "transport/engine/engine_wire.h"
#include "transport/engine/staged_write_check.h"
#include "transport/rnic/types.h"

namespace unloadkv::engine {

// Window work requests one connection has in flight at most (its main QP and CQ have room for
// them). Binds beyond it are refused (ResourceExhausted); invalidations wait in
// WindowState::unposted.
inline constexpr uint32_t kWindowWrBudget = 128;

struct WindowOp {
  // Only its last work request is signaled (a send queue completes in order), so one
  // completion ends it; `wrs` go back to the budget then.
  uint32_t completions_due = 0;
  uint32_t wrs = 0;
  bool invalidation = false;
  // An invalidation: each lane's staged writes (by sequence) that were admitted before it and
  // must be in place before it is done.
  uint64_t drain_to[kMaxLanes] = {};
  absl::Status status;
  WindowCallback done;
};

struct WindowState {
  RingQueue<WindowOp> ops;                    // unfinished, in post order
  RingQueue<rnic::SendWorkRequest> unposted;  // beyond kWindowWrBudget
  uint32_t posted = 0;                        // window WRs on the main QP, not completed
  uint64_t next_index = 0;
  absl::flat_hash_set<uint32_t> keys;  // bound on this connection: in the engine's table
  // Keys the peer invalidated with a message not yet delivered, with that message's need (per
  // lane, the staged writes posted before it): a staged write through the key at or after it
  // is refused, as the NIC refuses the offloaded ones; the earlier ones still land.
  absl::flat_hash_map<uint32_t, std::array<uint32_t, kMaxLanes>> closing;
  // Keys whose invalidating message was delivered (out of the table): InvalidateWindow of one
  // only waits for the staged writes admitted through it.
  absl::flat_hash_set<uint32_t> peer_invalidated;
  std::shared_ptr<const StagedWriteCheck> check;  // SetStagedWriteCheck
};

}  // namespace unloadkv::engine

#endif  // UNLOADKV_TRANSPORT_ENGINE_WINDOW_STATE_H_
