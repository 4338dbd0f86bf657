// Data path of the simulated RNIC (datapath.cc), used by the device handles (sim_device.cc).
// Everything runs on the fabric's thread, at the fabric's current virtual time.
#ifndef UNLOADKV_TRANSPORT_SIM_DATAPATH_H_
#define UNLOADKV_TRANSPORT_SIM_DATAPATH_H_

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "transport/sim/node.h"

namespace unloadkv::sim {

absl::Status PostSend(Fabric& f, NodeState& n, SimQpState& qp,
                      absl::Span<const rnic::SendWorkRequest> wrs);
absl::Status PostRecv(Fabric& f, NodeState& n, SimQpState& qp,
                      absl::Span<const rnic::RecvWorkRequest> wrs);
// Posts receives on an SRQ of node `n` and runs the requests of its QPs that waited for one.
absl::Status PostSrqRecv(Fabric& f, NodeState& n, SimSrqState& srq,
                         absl::Span<const rnic::RecvWorkRequest> wrs);
// Executes the QP's arrived requests that can run now (after Connect, a posted receive).
void Drain(Fabric& f, NodeState& n, SimQpState& qp);
// Moves the QP to the error state: the oldest outstanding request gets `head_status`, the rest
// and all receives kFlushed. With `tell_peer`, the peer QP notices the lost connection one
// wire latency later and fails with kRetryExceeded.
void FailQp(Fabric& f, NodeState& n, SimQpState& qp, rnic::WcStatus head_status, bool tell_peer);
// CPU time: occupies `core` for `cost_ns` from max(now, when it is free); returns the end.
int64_t ChargeCpu(Fabric& f, NodeState& n, int core, int64_t cost_ns);
// Nanoseconds to move `bytes` at `gbps` Gbit/s.
int64_t TransferNs(uint64_t bytes, double gbps);

}  // namespace unloadkv::sim

#endif  // UNLOADKV_TRANSPORT_SIM_DATAPATH_H_
