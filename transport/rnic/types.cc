#include "transport/rnic/types.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace unloadkv::rnic {

absl::string_view OpcodeName(Opcode op) {
  switch (op) {
    case Opcode::kWrite:
      return "WRITE";
    case Opcode::kWriteWithImm:
      return "WRITE_WITH_IMM";
    case Opcode::kSend:
      return "SEND";
    case Opcode::kSendWithImm:
      return "SEND_WITH_IMM";
    case Opcode::kRead:
      return "READ";
    case Opcode::kBindWindow:
      return "BIND_WINDOW";
    case Opcode::kLocalInvalidate:
      return "LOCAL_INVALIDATE";
    case Opcode::kSendWithInvalidate:
      return "SEND_WITH_INVALIDATE";
  }
  return "UNKNOWN";
}

WcOpcode CompletionOpcode(Opcode op) {
  switch (op) {
    case Opcode::kWrite:
    case Opcode::kWriteWithImm:
      return WcOpcode::kWrite;
    case Opcode::kRead:
      return WcOpcode::kRead;
    case Opcode::kSend:
    case Opcode::kSendWithImm:
    case Opcode::kSendWithInvalidate:
      return WcOpcode::kSend;
    case Opcode::kBindWindow:
      return WcOpcode::kBindWindow;
    case Opcode::kLocalInvalidate:
      return WcOpcode::kLocalInvalidate;
  }
  return WcOpcode::kSend;
}

absl::string_view WcOpcodeName(WcOpcode op) {
  switch (op) {
    case WcOpcode::kWrite:
      return "WRITE";
    case WcOpcode::kRead:
      return "READ";
    case WcOpcode::kSend:
      return "SEND";
    case WcOpcode::kRecv:
      return "RECV";
    case WcOpcode::kRecvRdmaWithImm:
      return "RECV_RDMA_WITH_IMM";
    case WcOpcode::kBindWindow:
      return "BIND_WINDOW";
    case WcOpcode::kLocalInvalidate:
      return "LOCAL_INVALIDATE";
  }
  return "UNKNOWN";
}

absl::string_view WcStatusName(WcStatus status) {
  switch (status) {
    case WcStatus::kSuccess:
      return "success";
    case WcStatus::kLocalLengthError:
      return "local length error";
    case WcStatus::kLocalProtectionError:
      return "local protection error";
    case WcStatus::kRemoteAccessError:
      return "remote access error";
    case WcStatus::kRemoteInvalidRequest:
      return "remote invalid request";
    case WcStatus::kRnrRetryExceeded:
      return "receiver not ready (RNR retry exceeded)";
    case WcStatus::kRetryExceeded:
      return "transport retry exceeded";
    case WcStatus::kFlushed:
      return "flushed";
    case WcStatus::kWindowBindError:
      return "memory window bind error";
  }
  return "unknown status";
}

namespace {
template <typename Wr>
uint64_t SumSge(const Wr& wr) {
  uint64_t total = 0;
  for (int i = 0; i < wr.num_sge && i < kMaxSge; ++i) total += wr.sg_list[i].length;
  return total;
}
}  // namespace

uint64_t SendWorkRequest::TotalLength() const { return SumSge(*this); }
uint64_t RecvWorkRequest::TotalLength() const { return SumSge(*this); }

std::string WorkCompletion::DebugString() const {
  return absl::StrFormat(
      "wc{wr_id=%u op=%s status=%s byte_len=%u imm=%s%s qp=%u}", wr_id, WcOpcodeName(opcode),
      WcStatusName(status), byte_len, has_imm ? absl::StrCat(imm) : "none",
      has_invalidate ? absl::StrCat(" invalidated=", invalidated_rkey) : "", qp_num);
}

namespace {
SendWorkRequest Single(uint64_t wr_id, Opcode op, ScatterGatherEntry local) {
  SendWorkRequest wr;
  wr.wr_id = wr_id;
  wr.opcode = op;
  wr.sg_list[0] = local;
  wr.num_sge = 1;
  return wr;
}
}  // namespace

SendWorkRequest MakeWrite(uint64_t wr_id, ScatterGatherEntry local, uint64_t remote_addr,
                          uint32_t rkey) {
  SendWorkRequest wr = Single(wr_id, Opcode::kWrite, local);
  wr.remote_addr = remote_addr;
  wr.rkey = rkey;
  return wr;
}

SendWorkRequest MakeWriteWithImm(uint64_t wr_id, ScatterGatherEntry local, uint64_t remote_addr,
                                 uint32_t rkey, uint32_t imm) {
  SendWorkRequest wr = MakeWrite(wr_id, local, remote_addr, rkey);
  wr.opcode = Opcode::kWriteWithImm;
  wr.imm = imm;
  return wr;
}

SendWorkRequest MakeSend(uint64_t wr_id, ScatterGatherEntry local) {
  return Single(wr_id, Opcode::kSend, local);
}

SendWorkRequest MakeSendWithImm(uint64_t wr_id, ScatterGatherEntry local, uint32_t imm) {
  SendWorkRequest wr = Single(wr_id, Opcode::kSendWithImm, local);
  wr.imm = imm;
  return wr;
}

SendWorkRequest MakeRead(uint64_t wr_id, ScatterGatherEntry local, uint64_t remote_addr,
                         uint32_t rkey) {
  SendWorkRequest wr = MakeWrite(wr_id, local, remote_addr, rkey);
  wr.opcode = Opcode::kRead;
  return wr;
}

SendWorkRequest MakeBindWindow(uint64_t wr_id, MemoryWindow* window, const MemoryRegion& region,
                               uint64_t addr, uint64_t length, uint32_t access) {
  SendWorkRequest wr;
  wr.wr_id = wr_id;
  wr.opcode = Opcode::kBindWindow;
  wr.bind = WindowBind{window, &region, addr, length, access};
  return wr;
}

SendWorkRequest MakeLocalInvalidate(uint64_t wr_id, uint32_t rkey) {
  SendWorkRequest wr;
  wr.wr_id = wr_id;
  wr.opcode = Opcode::kLocalInvalidate;
  wr.invalidate_rkey = rkey;
  return wr;
}

SendWorkRequest MakeSendWithInvalidate(uint64_t wr_id, ScatterGatherEntry local, uint32_t rkey) {
  SendWorkRequest wr = Single(wr_id, Opcode::kSendWithInvalidate, local);
  wr.invalidate_rkey = rkey;
  return wr;
}

RecvWorkRequest MakeRecv(uint64_t wr_id, ScatterGatherEntry local) {
  RecvWorkRequest wr;
  wr.wr_id = wr_id;
  wr.sg_list[0] = local;
  wr.num_sge = 1;
  return wr;
}

}  // namespace unloadkv::rnic
