#include "transport/verbs/verbs_mapping.h"

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace unloadkv::verbs {

rnic::WcStatus MapWcStatus(int s) {
  switch (s) {
    case IBV_WC_SUCCESS:
      return rnic::WcStatus::kSuccess;
    case IBV_WC_LOC_LEN_ERR:
      return rnic::WcStatus::kLocalLengthError;
    case IBV_WC_LOC_PROT_ERR:
      return rnic::WcStatus::kLocalProtectionError;
    case IBV_WC_MW_BIND_ERR:
      return rnic::WcStatus::kWindowBindError;
    case IBV_WC_REM_ACCESS_ERR:
      return rnic::WcStatus::kRemoteAccessError;
    case IBV_WC_REM_INV_REQ_ERR:
    case IBV_WC_REM_OP_ERR:
    case IBV_WC_REM_INV_RD_REQ_ERR:
      return rnic::WcStatus::kRemoteInvalidRequest;
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return rnic::WcStatus::kRnrRetryExceeded;
    case IBV_WC_WR_FLUSH_ERR:
      return rnic::WcStatus::kFlushed;
    // Transport and local failures that leave the QP unusable: the peer is unreachable or the
    // local side broke; both surface as "retry exceeded" (the connection is gone).
    default:
      return rnic::WcStatus::kRetryExceeded;
  }
}

rnic::WcOpcode MapWcOpcode(int op) {
  switch (op) {
    case IBV_WC_RDMA_WRITE:
      return rnic::WcOpcode::kWrite;
    case IBV_WC_RDMA_READ:
      return rnic::WcOpcode::kRead;
    case IBV_WC_SEND:
      return rnic::WcOpcode::kSend;
    case IBV_WC_RECV_RDMA_WITH_IMM:
      return rnic::WcOpcode::kRecvRdmaWithImm;
    case IBV_WC_BIND_MW:
      return rnic::WcOpcode::kBindWindow;
    case IBV_WC_LOCAL_INV:
      return rnic::WcOpcode::kLocalInvalidate;
    default:
      return rnic::WcOpcode::kRecv;  // IBV_WC_RECV
  }
}

int MapSendOpcode(rnic::Opcode op) {
  switch (op) {
    case rnic::Opcode::kWrite:
      return IBV_WR_RDMA_WRITE;
    case rnic::Opcode::kWriteWithImm:
      return IBV_WR_RDMA_WRITE_WITH_IMM;
    case rnic::Opcode::kSend:
      return IBV_WR_SEND;
    case rnic::Opcode::kSendWithImm:
      return IBV_WR_SEND_WITH_IMM;
    case rnic::Opcode::kRead:
      return IBV_WR_RDMA_READ;
    case rnic::Opcode::kBindWindow:
      return IBV_WR_BIND_MW;
    case rnic::Opcode::kLocalInvalidate:
      return IBV_WR_LOCAL_INV;
    case rnic::Opcode::kSendWithInvalidate:
      return IBV_WR_SEND_WITH_INV;
  }
  return IBV_WR_SEND;
}

int MapAccess(uint32_t access) {
  int out = 0;
  if (access & rnic::kLocalWrite) out |= IBV_ACCESS_LOCAL_WRITE;
  if (access & rnic::kRemoteWrite) out |= IBV_ACCESS_REMOTE_WRITE;
  if (access & rnic::kRemoteRead) out |= IBV_ACCESS_REMOTE_READ;
  if (access & rnic::kMwBind) out |= IBV_ACCESS_MW_BIND;
  return out;
}

uint32_t NextWindowKey(uint32_t current, uint8_t random_tag) {
  // ibv_inc_rkey keeps the index (upper 24 bits) and changes the tag; a random tag that is
  // not the current one makes the next key unpredictable in its 8 free bits.
  uint8_t tag = random_tag;
  if (tag == static_cast<uint8_t>(current)) tag = static_cast<uint8_t>(tag + 1);
  return (current & 0xffffff00u) | tag;
}

RnrSettings MapRnrTimeout(absl::Duration timeout) {
  // min_rnr_timer 12 = 0.64 ms per retry (IB spec table); rnr_retry 7 = retry forever.
  if (timeout == absl::InfiniteDuration()) return {12, 7};
  int64_t retries = absl::ToInt64Microseconds(timeout) / 640;
  return {12, static_cast<uint8_t>(std::clamp<int64_t>(retries, 0, 6))};
}

absl::StatusOr<int> MapMtu(int bytes) {
  switch (bytes) {
    case 256:
      return IBV_MTU_256;
    case 512:
      return IBV_MTU_512;
    case 1024:
      return IBV_MTU_1024;
    case 2048:
      return IBV_MTU_2048;
    case 4096:
      return IBV_MTU_4096;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("path MTU ", bytes, " is not one of 256, 512, 1024, 2048, 4096"));
}

std::string EncodeVerbsAddress(const VerbsAddress& a) {
  std::string gid;
  for (int i = 0; i < 16; i += 2) {
    absl::StrAppendFormat(&gid, "%s%02x%02x", i ? ":" : "", a.gid[i], a.gid[i + 1]);
  }
  return absl::StrCat("lid=", a.lid, ",gid=", gid, ",port=", a.port, ",mtu=", a.mtu_bytes);
}

absl::StatusOr<VerbsAddress> DecodeVerbsAddress(absl::string_view text) {
  VerbsAddress a;
  bool seen[4] = {false, false, false, false};
  for (absl::string_view field : absl::StrSplit(text, ',')) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(field, absl::MaxSplits('=', 1));
    uint32_t v;
    if (kv.first == "lid" && absl::SimpleAtoi(kv.second, &v) && v <= 0xffff) {
      a.lid = static_cast<uint16_t>(v);
      seen[0] = true;
    } else if (kv.first == "gid") {
      std::vector<absl::string_view> groups = absl::StrSplit(kv.second, ':');
      if (groups.size() != 8) {
        return absl::InvalidArgumentError(
            absl::StrCat("verbs address: gid '", kv.second, "' is not eight 4-digit hex groups"));
      }
      for (int g = 0; g < 8; ++g) {
        uint32_t word;
        if (groups[g].size() != 4 || !absl::SimpleHexAtoi(groups[g], &word)) {
          return absl::InvalidArgumentError(
              absl::StrCat("verbs address: bad gid group '", groups[g], "'"));
        }
        a.gid[2 * g] = static_cast<uint8_t>(word >> 8);
        a.gid[2 * g + 1] = static_cast<uint8_t>(word);
      }
      seen[1] = true;
    } else if (kv.first == "port" && absl::SimpleAtoi(kv.second, &v) && v >= 1 && v <= 255) {
      a.port = static_cast<uint8_t>(v);
      seen[2] = true;
    } else if (kv.first == "mtu" && absl::SimpleAtoi(kv.second, &v) && MapMtu(v).ok()) {
      a.mtu_bytes = static_cast<int>(v);
      seen[3] = true;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("verbs address: bad or unknown field '", field, "'"));
    }
  }
  for (bool s : seen) {
    if (!s) return absl::InvalidArgumentError("verbs address: needs lid, gid, port and mtu");
  }
  return a;
}

absl::Status NoDeviceError(int errno_value) {
  std::string cause =
      errno_value == ENOSYS
          ? "the kernel has no RDMA support (ibv_get_device_list: ENOSYS)"
          : absl::StrCat("ibv_get_device_list found none",
                         errno_value ? absl::StrCat(" (", std::strerror(errno_value), ")") : "");
  return absl::NotFoundError(absl::StrCat(
      "no RDMA device: ", cause,
      ". Load the RNIC driver, or create a Soft-RoCE device (rdma link add rxe0 type rxe netdev "
      "IFACE; see docs/rdma.md), or run without RDMA on the soft transport"));
}

absl::Status CheckMemlock(uint64_t soft_limit, bool infinite, uint64_t needed_bytes) {
  if (infinite || soft_limit >= needed_bytes) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "RLIMIT_MEMLOCK is ", soft_limit / 1024, " KiB but registering memory needs at least ",
      needed_bytes >> 20,
      " MiB locked: run `ulimit -l unlimited` (or raise it in "
      "/etc/security/limits.conf), set LimitMEMLOCK=infinity in the systemd unit, or give the "
      "container the IPC_LOCK capability"));
}

}  // namespace unloadkv::verbs
