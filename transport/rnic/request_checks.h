// Checks every backend applies when work is posted, so they reject the same requests with the
// same messages.
#ifndef UNLOADKV_TRANSPORT_RNIC_REQUEST_CHECKS_H_
#define UNLOADKV_TRANSPORT_RNIC_REQUEST_CHECKS_H_

#include <cstddef>

#include "absl/status/status.h"
#include "transport/rnic/device.h"
#include "transport/rnic/region_table.h"
#include "transport/rnic/types.h"

namespace unloadkv::rnic {

// The checks of Device::RegisterMemory: non-null address, non-zero length, known access bits
// (kHugePageBacked allowed), and kRemoteWrite only together with kLocalWrite (as verbs).
absl::Status CheckRegistration(const void* addr, size_t length, uint32_t access);

// The checks of Device::CreateQueuePair on its sizes: max_send_wr in 1..limits.max_qp_wr, and
// max_recv_wr too unless the QP takes its receives from an SRQ (then it is ignored).
absl::Status CheckQpConfig(const QpConfig& config, const DeviceLimits& limits);

// The malformed-request checks of QueuePair::PostSend: known opcode, 0 <= num_sge <= kMaxSge,
// total length within the device limit. `index` names the request in the error message.
absl::Status CheckSendRequest(const SendWorkRequest& wr, const DeviceLimits& limits, size_t index);

// Same for PostRecv.
absl::Status CheckRecvRequest(const RecvWorkRequest& wr, size_t index);

// True when every SGE lies in a region registered under its lkey, with kLocalWrite where the
// device will write into it (READ destinations, receive buffers).
bool LocalBuffersValid(const RegionTable& regions, const SendWorkRequest& wr);
bool LocalBuffersValid(const RegionTable& regions, const RecvWorkRequest& wr);

}  // namespace unloadkv::rnic

#endif  // UNLOADKV_TRANSPORT_RNIC_REQUEST_CHECKS_H_
