// echo_server: the far end of the loopback limit (client/ycsb/echo_db.h). For each frame (u32
// request length, u32 reply length, request bytes) it replies with that many bytes and does
// nothing else. One thread per connection, blocking I/O, TCP_NODELAY: the least a server can do
// per request over TCP. A frame over 16 MiB either way closes its connection.
//   echo_server --listen=127.0.0.1:0     prints "echo_server: listening on HOST:PORT"
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

#include "gflags/gflags.h"
#include "transport/base/little_endian.h"
#include "transport/base/net.h"

DEFINE_string(listen, "127.0.0.1:0", "host:port to listen on (port 0: any free port)");

namespace {

constexpr uint32_t kMaxFrame = 16u << 20;

void Serve(unloadkv::ScopedFd fd) {
  int one = 1;
  setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  std::string in, out;
  char header[8];
  while (unloadkv::RecvAll(fd.get(), header, 8).ok()) {
    const uint32_t request = unloadkv::LoadLittleEndian<uint32_t>(header, 0);
    const uint32_t reply = unloadkv::LoadLittleEndian<uint32_t>(header, 4);
    if (request > kMaxFrame || reply > kMaxFrame) return;
    in.resize(request);
    if (!unloadkv::RecvAll(fd.get(), in.data(), request).ok()) return;
    out.resize(reply);
    if (!unloadkv::SendAll(fd.get(), absl::string_view(out.data(), reply)).ok()) return;
  }
}

}  // namespace

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  std::signal(SIGPIPE, SIG_IGN);
  absl::StatusOr<sockaddr_in> sa = unloadkv::ParseHostPort(FLAGS_listen, true);
  if (!sa.ok()) {
    std::fprintf(stderr, "echo_server: --listen: %s\n", sa.status().ToString().c_str());
    return 2;
  }
  unloadkv::ScopedFd listener(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int one = 1;
  setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  socklen_t len = sizeof(*sa);
  if (!listener.valid() || bind(listener.get(), reinterpret_cast<sockaddr*>(&*sa), len) != 0 ||
      listen(listener.get(), 1024) != 0 ||
      getsockname(listener.get(), reinterpret_cast<sockaddr*>(&*sa), &len) != 0) {
    std::perror("echo_server: listen");
    return 1;
  }
  std::printf("echo_server: listening on %s\n", unloadkv::FormatHostPort(*sa).c_str());
  std::fflush(stdout);
  while (true) {
    const int fd = accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      std::perror("echo_server: accept");
      return 1;
    }
    std::thread(Serve, unloadkv::ScopedFd(fd)).detach();
  }
}
