#include "transport/backends/peer_address.h"

#include "absl/strings/str_cat.h"

namespace unloadkv::backends {
namespace {

constexpr absl::string_view kWildcard = "0.0.0.0";

// Splits "host:port"; false when there is no ':'.
bool SplitHostPort(absl::string_view address, absl::string_view* host, absl::string_view* port) {
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) return false;
  *host = address.substr(0, colon);
  *port = address.substr(colon + 1);
  return true;
}

}  // namespace

absl::StatusOr<rnic::QpAttributes> DialBackAttributes(const rnic::QpAttributes& claimed,
                                                      absl::string_view peer_host) {
  if (claimed.transport != "soft") return claimed;
  absl::string_view host, port;
  if (!SplitHostPort(claimed.address, &host, &port)) {
    return absl::InvalidArgumentError(
        absl::StrCat("soft address '", claimed.address, "' is not host:port"));
  }
  if (host != peer_host && host != kWildcard) {
    return absl::PermissionDeniedError(absl::StrCat(
        "connection info names soft address ", claimed.address, " but the connection came from ",
        peer_host, "; a server dials back only the host a client connects from"));
  }
  rnic::QpAttributes out = claimed;
  out.address = absl::StrCat(peer_host, ":", port);
  return out;
}

rnic::QpAttributes AdvertisedAttributes(const rnic::QpAttributes& local,
                                        absl::string_view local_host) {
  absl::string_view host, port;
  if (local.transport != "soft" || !SplitHostPort(local.address, &host, &port) ||
      host != kWildcard) {
    return local;
  }
  rnic::QpAttributes out = local;
  out.address = absl::StrCat(local_host, ":", port);
  return out;
}

}  // namespace unloadkv::backends
