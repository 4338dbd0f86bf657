// A check of staged writes that the application installs on a connection (Connection::
// SetStagedWriteCheck): what it knows that the NIC cannot, such as which slots it granted the
// peer and which of them the peer has not used up yet.
#ifndef UNLOADKV_TRANSPORT_ENGINE_STAGED_WRITE_CHECK_H_
#define UNLOADKV_TRANSPORT_ENGINE_STAGED_WRITE_CHECK_H_

#include <cstdint>

#include "transport/rnic/region_table.h"

namespace unloadkv::engine {

// Called by an unload worker for every staged write of the connection, after the check the NIC
// would make (the engine's regions and this connection's windows) passed: kOk admits it,
// anything else refuses it exactly as that check does (kRemoteAccessError at the initiator,
// nothing copied, the connection failed). Called from worker threads, concurrently, under the
// connection's lock: must be thread-safe, quick, and must not block or call into the
// connection. A write the check admitted may still be being copied when the application
// revokes what admitted it; Connection::InvalidateWindow waits for those copies.
class StagedWriteCheck {
 public:
  virtual ~StagedWriteCheck() = default;
  virtual rnic::AccessVerdict Check(uint32_t rkey, uint64_t addr, uint64_t length) const = 0;
};

}  // namespace unloadkv::engine

#endif  // UNLOADKV_TRANSPORT_ENGINE_STAGED_WRITE_CHECK_H_
