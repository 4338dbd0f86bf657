#include "transport/rnic/request_checks.h"

#include "absl/strings/str_cat.h"

namespace unloadkv::rnic {

absl::Status CheckRegistration(const void* addr, size_t length, uint32_t access) {
  if (addr == nullptr || length == 0) {
    return absl::InvalidArgumentError("RegisterMemory: address must be non-null, length > 0");
  }
  constexpr uint32_t kKnown = kLocalWrite | kRemoteWrite | kRemoteRead | kMwBind | kHugePageBacked;
  if (access & ~kKnown) {
    return absl::InvalidArgumentError(
        absl::StrCat("RegisterMemory: unknown access bits 0x", absl::Hex(access & ~kKnown)));
  }
  if ((access & kRemoteWrite) && !(access & kLocalWrite)) {
    return absl::InvalidArgumentError("RegisterMemory: kRemoteWrite requires kLocalWrite");
  }
  return absl::OkStatus();
}

absl::Status CheckSendRequest(const SendWorkRequest& wr, const DeviceLimits& limits, size_t index) {
  if (static_cast<uint8_t>(wr.opcode) > static_cast<uint8_t>(Opcode::kSendWithInvalidate) ||
      wr.num_sge < 0 || wr.num_sge > kMaxSge) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PostSend: request ", index, " has an invalid opcode or num_sge ", wr.num_sge));
  }
  const bool local_op = wr.opcode == Opcode::kBindWindow || wr.opcode == Opcode::kLocalInvalidate;
  if (local_op && wr.num_sge != 0) {
    return absl::InvalidArgumentError(absl::StrCat("PostSend: request ", index, " (",
                                                   OpcodeName(wr.opcode), ") carries buffers"));
  }
  if (wr.opcode == Opcode::kBindWindow) {
    const WindowBind& b = wr.bind;
    constexpr uint32_t kWindowRights = kRemoteWrite | kRemoteRead;
    if (b.window == nullptr || b.region == nullptr || b.length == 0 || b.access == 0 ||
        (b.access & ~kWindowRights)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "PostSend: request ", index,
          " binds no window, no region, zero bytes, or rights other than remote read/write"));
    }
  }
  if (wr.TotalLength() > limits.max_message_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("PostSend: request ", index, " is ",
                                                   wr.TotalLength(), " bytes, limit ",
                                                   limits.max_message_bytes));
  }
  return absl::OkStatus();
}

absl::Status CheckQpConfig(const QpConfig& config, const DeviceLimits& limits) {
  auto bad = [&](uint32_t n) { return n == 0 || n > limits.max_qp_wr; };
  if (bad(config.max_send_wr) || (config.srq == nullptr && bad(config.max_recv_wr))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CreateQueuePair: max_send_wr and max_recv_wr must be in 1..", limits.max_qp_wr));
  }
  return absl::OkStatus();
}

absl::Status CheckRecvRequest(const RecvWorkRequest& wr, size_t index) {
  if (wr.num_sge < 0 || wr.num_sge > kMaxSge) {
    return absl::InvalidArgumentError(
        absl::StrCat("PostRecv: request ", index, " has num_sge ", wr.num_sge));
  }
  return absl::OkStatus();
}

namespace {
template <typename Wr>
bool AllValid(const RegionTable& regions, const Wr& wr, uint32_t required) {
  for (int k = 0; k < wr.num_sge; ++k) {
    const ScatterGatherEntry& sge = wr.sg_list[k];
    if (regions.CheckLocal(sge.lkey, sge.addr, sge.length, required) != AccessVerdict::kOk) {
      return false;
    }
  }
  return true;
}
}  // namespace

bool LocalBuffersValid(const RegionTable& regions, const SendWorkRequest& wr) {
  return AllValid(regions, wr, wr.opcode == Opcode::kRead ? uint32_t{kLocalWrite} : 0);
}

bool LocalBuffersValid(const RegionTable& regions, const RecvWorkRequest& wr) {
  return AllValid(regions, wr, kLocalWrite);
}

}  // namespace unloadkv::rnic
