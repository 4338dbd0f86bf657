// The registered memory a client posts value writes from: `count` buffers of kMaxValueBytes
// each, handed out and returned by index. Thread-safe.
#ifndef UNLOADKV_CLIENT_VALUE_BUFFERS_H_
#define UNLOADKV_CLIENT_VALUE_BUFFERS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/limits.h"
#include "transport/base/mapped_memory.h"
#include "transport/base/mutex.h"
#include "transport/engine/engine.h"
#include "transport/rnic/memory_region.h"

namespace unloadkv::client_internal {

class ValueBuffers {
 public:
  // Maps and registers the buffers with `engine` (which must outlive this).
  static absl::StatusOr<std::unique_ptr<ValueBuffers>> Create(engine::Engine* engine, size_t count);
  // A free buffer's index, or nullopt when all are in use.
  std::optional<uint32_t> Take();
  // Gives back a buffer from Take, once nothing reads it any more.
  void Release(uint32_t index);
  char* data(uint32_t index) const {
    return memory_->data() + size_t{index} * proto::kMaxValueBytes;
  }
  // The first `size` bytes of buffer `index`, as a local SGE.
  rnic::ScatterGatherEntry Sge(uint32_t index, uint32_t size) const {
    return mr_->Sge(size_t{index} * proto::kMaxValueBytes, size);
  }

 private:
  ValueBuffers() = default;
  std::unique_ptr<MappedMemory> memory_;
  std::unique_ptr<rnic::MemoryRegion> mr_;
  Mutex mu_;
  std::vector<uint32_t> free_ ABSL_GUARDED_BY(mu_);
};

}  // namespace unloadkv::client_internal

#endif  // UNLOADKV_CLIENT_VALUE_BUFFERS_H_
