// The two ways a write can reach target memory.
#ifndef UNLOADKV_TRANSPORT_ENGINE_PATH_H_
#define UNLOADKV_TRANSPORT_ENGINE_PATH_H_

#include <cstdint>

namespace unloadkv::engine {

enum class Path : uint8_t {
  kOffload = 0,  // one-sided RDMA WRITE: the target NIC translates and places
  kUnload = 1,   // WRITE_WITH_IMM into the staging ring; a target CPU worker validates and copies
};

inline const char* PathName(Path p) { return p == Path::kOffload ? "offload" : "unload"; }

}  // namespace unloadkv::engine

#endif  // UNLOADKV_TRANSPORT_ENGINE_PATH_H_
