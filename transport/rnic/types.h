// Plain data types of the RNIC interface: opcodes, access flags, work requests and work
// completions. They mirror libibverbs closely enough that the verbs backend maps them 1:1.
//
// Vocabulary used throughout unloadkv:
//   MR   memory region: a registered [addr, addr+length) range the NIC may touch.
//   lkey key naming an MR for local access (the SGEs of a work request).
//   rkey key naming an MR for remote access (the target of WRITE/READ).
//   QP   queue pair: one end of a reliable connection, with a send and a receive queue.
//   CQ   completion queue: where finished work requests are reported.
//   imm  32-bit immediate value carried by *_WITH_IMM operations to the receiver.
//   PSN  packet sequence number of a request within one QP's request stream.
//   MW   memory window: a remote key for a sub-range of an MR, bound by a work request on one
//        QP and usable only by requests arriving on that QP (type 2, memory_window.h).
#ifndef UNLOADKV_TRANSPORT_RNIC_TYPES_H_
#define UNLOADKV_TRANSPORT_RNIC_TYPES_H_

#include <array>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace unloadkv::rnic {

class MemoryRegion;
class MemoryWindow;

// Memory access rights of an MR. Values equal IBV_ACCESS_* so the verbs backend passes them on.
enum Access : uint32_t {
  kLocalWrite = 1u << 0,
  kRemoteWrite = 1u << 1,
  kRemoteRead = 1u << 2,
  // Memory windows may be bound to the region (IBV_ACCESS_MW_BIND). A window's own rights are
  // kRemoteWrite and kRemoteRead, given at the bind; the region needs none of them itself.
  kMwBind = 1u << 4,
  // Not an access right: a hint that the memory is backed by 2 MiB huge pages. Backends that
  // model address translation (sim) translate such a region in 2 MiB pages; the others ignore
  // it (for verbs the kernel knows the page size by itself).
  kHugePageBacked = 1u << 30,
};

// Operations a send work request can carry.
enum class Opcode : uint8_t {
  kWrite,
  kWriteWithImm,
  kSend,
  kSendWithImm,
  kRead,
  // Local operations on memory windows: executed by this device in send-queue order, never
  // sent. kBindWindow binds `bind`; kLocalInvalidate invalidates the window `invalidate_rkey`.
  kBindWindow,
  kLocalInvalidate,
  // A SEND that also invalidates, at the receiver, the window `invalidate_rkey` bound to the
  // receiving QP (before the receive completes). Carries no imm.
  kSendWithInvalidate,
};

// What a work completion reports on.
enum class WcOpcode : uint8_t {
  kWrite,
  kRead,
  kSend,
  kRecv,             // a SEND or SEND_WITH_IMM consumed this receive
  kRecvRdmaWithImm,  // a WRITE_WITH_IMM consumed this receive
  kBindWindow,
  kLocalInvalidate,
};

// Completion status codes; each mirrors the ibv_wc_status of the same name.
enum class WcStatus : uint8_t {
  kSuccess,               // IBV_WC_SUCCESS
  kLocalLengthError,      // IBV_WC_LOC_LEN_ERR: receive buffer too small for the message
  kLocalProtectionError,  // IBV_WC_LOC_PROT_ERR: an SGE is outside its MR or lacks access
  kRemoteAccessError,     // IBV_WC_REM_ACCESS_ERR: bad rkey, access or bounds at the target
  kRemoteInvalidRequest,  // IBV_WC_REM_INV_REQ_ERR: target could not accept (e.g. too long)
  kRnrRetryExceeded,      // IBV_WC_RNR_RETRY_EXC_ERR: receiver had no receive posted
  kRetryExceeded,         // IBV_WC_RETRY_EXC_ERR: peer unreachable or gone
  kFlushed,               // IBV_WC_WR_FLUSH_ERR: QP entered the error state first
  // IBV_WC_MW_BIND_ERR: a bind the device could not do (window already bound, range outside
  // the region, region without kMwBind, kRemoteWrite on a region without kLocalWrite) or an
  // invalidation of a key that names no window bound to this QP. Moves the QP to kError.
  kWindowBindError,
};

absl::string_view OpcodeName(Opcode op);
// What the requester's completion of a send request of opcode `op` reports.
WcOpcode CompletionOpcode(Opcode op);
absl::string_view WcOpcodeName(WcOpcode op);
absl::string_view WcStatusName(WcStatus status);

// One contiguous local buffer of a work request. `lkey` must name an MR covering it.
struct ScatterGatherEntry {
  uint64_t addr = 0;
  uint32_t length = 0;
  uint32_t lkey = 0;
};

inline constexpr int kMaxSge = 4;

// What a kBindWindow request binds: `window` to [addr, addr+length) of `region` (same device),
// with `access` (kRemoteWrite and/or kRemoteRead), on the QP it is posted on. The window's new
// key is window->rkey() once PostSend returned; it works when the bind completes (or earlier).
struct WindowBind {
  MemoryWindow* window = nullptr;
  const MemoryRegion* region = nullptr;
  uint64_t addr = 0;
  uint64_t length = 0;
  uint32_t access = 0;
};

// A request for the send queue. Local buffers are gathered (WRITE*, SEND*) or scattered into
// (READ) in list order. The buffers must stay valid and unmodified until the request completes.
struct SendWorkRequest {
  uint64_t wr_id = 0;
  Opcode opcode = Opcode::kSend;
  std::array<ScatterGatherEntry, kMaxSge> sg_list{};
  int num_sge = 0;
  uint64_t remote_addr = 0;      // WRITE, WRITE_WITH_IMM, READ
  uint32_t rkey = 0;             // WRITE, WRITE_WITH_IMM, READ
  uint32_t imm = 0;              // WRITE_WITH_IMM, SEND_WITH_IMM
  uint32_t invalidate_rkey = 0;  // LOCAL_INVALIDATE, SEND_WITH_INVALIDATE
  WindowBind bind;               // BIND_WINDOW
  bool signaled = true;          // false: no completion on success (errors always complete)

  uint64_t TotalLength() const;
};

// A buffer for the receive queue; an incoming SEND or WRITE_WITH_IMM consumes one.
struct RecvWorkRequest {
  uint64_t wr_id = 0;
  std::array<ScatterGatherEntry, kMaxSge> sg_list{};
  int num_sge = 0;

  uint64_t TotalLength() const;
};

// The outcome of one work request.
struct WorkCompletion {
  uint64_t wr_id = 0;
  WcStatus status = WcStatus::kSuccess;
  WcOpcode opcode = WcOpcode::kSend;
  uint32_t byte_len = 0;  // receives: bytes placed (for kRecvRdmaWithImm, the WRITE's length)
  uint32_t imm = 0;       // valid when has_imm
  bool has_imm = false;
  // A SEND_WITH_INVALIDATE consumed this receive and invalidated the window of this key.
  bool has_invalidate = false;
  uint32_t invalidated_rkey = 0;
  uint32_t qp_num = 0;

  std::string DebugString() const;
};

// Convenience builders for the common single-buffer cases.
SendWorkRequest MakeWrite(uint64_t wr_id, ScatterGatherEntry local, uint64_t remote_addr,
                          uint32_t rkey);
SendWorkRequest MakeWriteWithImm(uint64_t wr_id, ScatterGatherEntry local, uint64_t remote_addr,
                                 uint32_t rkey, uint32_t imm);
SendWorkRequest MakeSend(uint64_t wr_id, ScatterGatherEntry local);
SendWorkRequest MakeSendWithImm(uint64_t wr_id, ScatterGatherEntry local, uint32_t imm);
SendWorkRequest MakeRead(uint64_t wr_id, ScatterGatherEntry local, uint64_t remote_addr,
                         uint32_t rkey);
SendWorkRequest MakeBindWindow(uint64_t wr_id, MemoryWindow* window, const MemoryRegion& region,
                               uint64_t addr, uint64_t length, uint32_t access);
SendWorkRequest MakeLocalInvalidate(uint64_t wr_id, uint32_t rkey);
SendWorkRequest MakeSendWithInvalidate(uint64_t wr_id, ScatterGatherEntry local, uint32_t rkey);
RecvWorkRequest MakeRecv(uint64_t wr_id, ScatterGatherEntry local);

}  // namespace unloadkv::rnic

#endif  // UNLOADKV_TRANSPORT_RNIC_TYPES_H_
