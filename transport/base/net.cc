#include "transport/base/net.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace unloadkv {

absl::Status ErrnoError(absl::string_view what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

absl::Status ParseHost(absl::string_view host, sockaddr_in* sa) {
  std::string h = host == "localhost" ? "127.0.0.1" : std::string(host);
  if (inet_pton(AF_INET, h.c_str(), &sa->sin_addr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("address: host '", host, "' must be numeric IPv4 or localhost"));
  }
  return absl::OkStatus();
}

absl::StatusOr<HostPort> SplitHostPort(absl::string_view text, bool allow_port_zero) {
  std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  uint32_t port;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[1], &port) || port > 65535 ||
      (port == 0 && !allow_port_zero)) {
    return absl::InvalidArgumentError(absl::StrCat("address '", text,
                                                   "' is not host:port with a port in ",
                                                   allow_port_zero ? "0" : "1", "..65535"));
  }
  return HostPort{std::string(parts[0]), static_cast<uint16_t>(port)};
}

absl::StatusOr<sockaddr_in> ParseHostPort(absl::string_view text, bool allow_port_zero) {
  absl::StatusOr<HostPort> hp = SplitHostPort(text, allow_port_zero);
  if (!hp.ok()) return hp.status();
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(hp->port);
  if (absl::Status st = ParseHost(hp->host, &sa); !st.ok()) return st;
  return sa;
}

bool IsLoopbackHost(absl::string_view host) {
  sockaddr_in sa{};
  if (!ParseHost(host, &sa).ok()) return false;
  return (ntohl(sa.sin_addr.s_addr) >> 24) == 127;
}

std::string FormatHostPort(const sockaddr_in& sa) {
  char host[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &sa.sin_addr, host, sizeof(host));
  return absl::StrCat(host, ":", ntohs(sa.sin_port));
}

ScopedFd::~ScopedFd() {
  if (fd_ >= 0) close(fd_);
}

ScopedFd& ScopedFd::operator=(ScopedFd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = o.release();
  }
  return *this;
}

}  // namespace unloadkv
