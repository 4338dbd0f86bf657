// Connection bootstrap attributes: what one end of a queue pair tells its peer out of band.
#ifndef UNLOADKV_TRANSPORT_RNIC_QP_ATTRIBUTES_H_
#define UNLOADKV_TRANSPORT_RNIC_QP_ATTRIBUTES_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace unloadkv::rnic {

// Plain data, exchanged through any side channel (a TCP socket, etcd, a file, a flag).
struct QpAttributes {
  std::string transport;  // backend name: "soft", "sim", "verbs"
  std::string address;    // backend-specific: soft "host:port", verbs "lid/gid", sim "node"
  uint32_t qp_num = 0;
  uint32_t psn = 0;  // first packet sequence number this end will send
  // A secret both ends derived from an authenticated exchange (rpc/handshake.h), given to each
  // end's Connect and never sent as text: a backend whose connection set-up crosses an open
  // network accepts the peer only if it proves the same token (the soft RNIC's CONNECT
  // carries it; sim and verbs ignore it). Empty, or kConnectTokenBytes bytes.
  std::string token;

  bool operator==(const QpAttributes& o) const {
    return transport == o.transport && address == o.address && qp_num == o.qp_num && psn == o.psn &&
           token == o.token;
  }
};
inline constexpr size_t kConnectTokenBytes = 16;

// One line of text: "transport=soft address=127.0.0.1:4791 qp_num=3 psn=0" (never the
// token).
std::string EncodeQpAttributes(const QpAttributes& attrs);

// Parses EncodeQpAttributes output. Rejects unknown or missing keys, bad numbers, empty
// transport or address, and text over 1 KiB, naming the offending field.
absl::StatusOr<QpAttributes> DecodeQpAttributes(absl::string_view text);

}  // namespace unloadkv::rnic

#endif  // UNLOADKV_TRANSPORT_RNIC_QP_ATTRIBUTES_H_
