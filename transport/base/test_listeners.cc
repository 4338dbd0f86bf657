#include "transport/base/test_listeners.h"

#include <netinet/in.h>
#include <sys/socket.h>

namespace unloadkv::testing {

MuteListener::MuteListener(int backlog) {
  listener = ScopedFd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(listener.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 ||
      listen(listener.get(), backlog) != 0) {
    listener = ScopedFd();
    return;
  }
  socklen_t len = sizeof(sa);
  getsockname(listener.get(), reinterpret_cast<sockaddr*>(&sa), &len);
  address = FormatHostPort(sa);
}

BlackHole::BlackHole() : address(mute.address) {
  absl::StatusOr<sockaddr_in> sa = ParseHostPort(address);
  if (!sa.ok()) return;
  filler = ScopedFd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (connect(filler.get(), reinterpret_cast<const sockaddr*>(&*sa), sizeof(*sa)) != 0) {
    filler = ScopedFd();
  }
}

}  // namespace unloadkv::testing
