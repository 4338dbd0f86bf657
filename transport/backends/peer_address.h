// Addresses exchanged at bootstrap, made safe to use. The soft RNIC connects a QP by dialing
// the TCP address named in the peer's QpAttributes, so a server that dialed whatever a client
// named could be made to open connections to any host and port (server-side request forgery).
// A server therefore dials back only the host the bootstrap connection came from, and
// advertises an address its peer can dial (never a wildcard). Verbs addresses name an RDMA
// port (lid/gid) reached without any dial, and pass through unchanged.
#ifndef UNLOADKV_TRANSPORT_BACKENDS_PEER_ADDRESS_H_
#define UNLOADKV_TRANSPORT_BACKENDS_PEER_ADDRESS_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "transport/rnic/qp_attributes.h"

namespace unloadkv::backends {

// The attributes to connect to, given what the peer claimed and the numeric IPv4 host its
// bootstrap connection came from. soft: the claimed host must be `peer_host` or the wildcard
// 0.0.0.0 (read as "the host I came from"); the result names `peer_host` and the claimed port.
// Anything else is PermissionDenied naming both hosts, and nothing is dialed.
absl::StatusOr<rnic::QpAttributes> DialBackAttributes(const rnic::QpAttributes& claimed,
                                                      absl::string_view peer_host);

// The attributes to advertise to a peer that reached this host at `local_host` (numeric IPv4):
// soft attributes on the wildcard host 0.0.0.0 name `local_host` instead.
rnic::QpAttributes AdvertisedAttributes(const rnic::QpAttributes& local,
                                        absl::string_view local_host);

}  // namespace unloadkv::backends

#endif  // UNLOADKV_TRANSPORT_BACKENDS_PEER_ADDRESS_H_
