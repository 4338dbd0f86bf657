// The pure logic of the verbs backend: translations between rnic:: and libibverbs values,
// the out-of-band address format, and the start-up checks. No device needed; unit-tested.
#ifndef UNLOADKV_TRANSPORT_VERBS_VERBS_MAPPING_H_
#define UNLOADKV_TRANSPORT_VERBS_VERBS_MAPPING_H_

#include <array>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "transport/rnic/types.h"

namespace unloadkv::verbs {

// ibv_wc_status -> rnic status. Codes without an rnic equivalent map to the closest class
// (documented in the .cc), never to success.
rnic::WcStatus MapWcStatus(int ibv_status);
// ibv_wc_opcode -> rnic completion opcode.
rnic::WcOpcode MapWcOpcode(int ibv_opcode);
// rnic::Opcode -> ibv_wr_opcode.
int MapSendOpcode(rnic::Opcode op);
// rnic::Access bits -> ibv_access_flags (kHugePageBacked dropped: the kernel knows).
int MapAccess(uint32_t access);
// The key of a type-2 window's next bind: its index (upper 24 bits, the device's) with a new
// 8-bit tag, `random_tag` unless that is the current one (then the next value).
uint32_t NextWindowKey(uint32_t current, uint8_t random_tag);
// QpConfig::rnr_timeout -> (min_rnr_timer code, rnr_retry): infinite -> retry 7 (forever).
struct RnrSettings {
  uint8_t min_rnr_timer;
  uint8_t rnr_retry;
};
RnrSettings MapRnrTimeout(absl::Duration timeout);
// Path MTU in bytes (256..4096) -> ibv_mtu enum value; InvalidArgument otherwise.
absl::StatusOr<int> MapMtu(int bytes);

// What a peer needs to address a port: LID (InfiniBand) and GID (RoCE), port, MTU.
struct VerbsAddress {
  uint16_t lid = 0;
  std::array<uint8_t, 16> gid{};
  uint8_t port = 1;
  int mtu_bytes = 1024;
  bool operator==(const VerbsAddress& o) const {
    return lid == o.lid && gid == o.gid && port == o.port && mtu_bytes == o.mtu_bytes;
  }
};
// "lid=5,gid=fe80:0000:...:0001,port=1,mtu=1024" (gid as eight 4-hex-digit groups).
std::string EncodeVerbsAddress(const VerbsAddress& a);
absl::StatusOr<VerbsAddress> DecodeVerbsAddress(absl::string_view text);

// The error for "no RDMA device": names the cause (`errno_value` of ibv_get_device_list) and
// the fixes (Soft-RoCE, --transport=soft).
absl::Status NoDeviceError(int errno_value);
// RLIMIT_MEMLOCK check: `soft_limit` in bytes (RLIM_INFINITY passes). The error names
// `ulimit -l`, systemd LimitMEMLOCK and the container capability IPC_LOCK.
absl::Status CheckMemlock(uint64_t soft_limit, bool infinite, uint64_t needed_bytes);

}  // namespace unloadkv::verbs

#endif  // UNLOADKV_TRANSPORT_VERBS_VERBS_MAPPING_H_
