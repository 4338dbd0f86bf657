// Memory windows of the simulated RNIC (windows.cc). Internal to the sim backend.
#ifndef UNLOADKV_TRANSPORT_SIM_WINDOWS_H_
#define UNLOADKV_TRANSPORT_SIM_WINDOWS_H_

#include "transport/sim/fabric.h"
#include "transport/sim/node.h"

namespace unloadkv::sim {

// The bind or invalidation `wr` asks for, done now: kSuccess, or kWindowBindError.
rnic::WcStatus DoLocalOp(const Fabric& f, NodeState& n, SimQpState& qp,
                         const rnic::SendWorkRequest& wr);
// Queues the done local operation `o`; it completes when the modeled NIC finished it and it is
// the QP's oldest outstanding request.
void ScheduleLocalOp(Fabric& f, NodeState& n, SimQpState& qp, Outstanding o);
// Completes the finished local operations at the head of the QP's outstanding requests.
void CompleteLocalOps(Fabric& f, SimQpState& qp);
// The window's key stops working.
void UnbindWindow(NodeState& n, SimWindowState* w);
void UnbindWindowsOfRegion(NodeState& n, uint32_t region_key);
void UnbindWindowsOfQp(NodeState& n, SimQpState& qp);

}  // namespace unloadkv::sim

#endif  // UNLOADKV_TRANSPORT_SIM_WINDOWS_H_
