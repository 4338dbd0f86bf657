// Loopback listeners with unusual behavior, for tests of what peers do to dialers: one that
// accepts connections (the kernel completes them) and never answers, and one whose accept
// queue is full so that a dial to it neither completes nor fails until the dialer gives up.
#ifndef UNLOADKV_TRANSPORT_BASE_TEST_LISTENERS_H_
#define UNLOADKV_TRANSPORT_BASE_TEST_LISTENERS_H_

#include <string>

#include "transport/base/net.h"

namespace unloadkv::testing {

// Listens on 127.0.0.1 (a free port) with `backlog`, and never accepts.
struct MuteListener {
  explicit MuteListener(int backlog = 8);
  ScopedFd listener;
  std::string address;  // "127.0.0.1:port"
};

// A MuteListener with backlog 0 whose one queue place is taken: the kernel drops further SYNs.
struct BlackHole {
  BlackHole();
  MuteListener mute{0};
  ScopedFd filler;
  std::string address;
};

}  // namespace unloadkv::testing

#endif  // UNLOADKV_TRANSPORT_BASE_TEST_LISTENERS_H_
