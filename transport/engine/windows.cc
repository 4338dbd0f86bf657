// Memory windows a connection grants its peer (Connection::BindWindows, InvalidateWindow):
// binds and invalidations posted on the main QP in order, their keys in the engine's
// validation table (so that staged writes are checked as the NIC checks offloaded ones), and
// an invalidation that also waits for the staged writes admitted before it.
#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "transport/engine/engine_internal.h"

namespace unloadkv::engine {
namespace {

// Posts queued window WRs while the budget allows. False when the QP refused one (the
// connection is then failed by the caller).
bool PostWindowWrs(ConnectionState& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  WindowState& w = c.windows;
  while (!w.unposted.empty() && w.posted < kWindowWrBudget) {
    if (!c.qp->PostSend(w.unposted.front()).ok()) return false;
    w.unposted.pop_front();
    ++w.posted;
  }
  return true;
}

rnic::SendWorkRequest WindowWr(ConnectionState& c, rnic::SendWorkRequest wr, bool signaled)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  wr.wr_id = MakeWrId(WrKind::kWindow, c.id, static_cast<uint32_t>(c.windows.next_index++));
  wr.signaled = signaled;
  return wr;
}

}  // namespace

absl::Status Connection::BindWindows(absl::Span<const WindowGrant> grants, WindowCallback done) {
  ConnectionState& c = *state_;
  for (const WindowGrant& g : grants) {
    if (g.window == nullptr || g.region == nullptr || g.length == 0) {
      return absl::InvalidArgumentError("BindWindows: a grant without window, region or bytes");
    }
  }
  Deferred out;
  bool run = false;  // TakeCallbacks took them: run them after the lock
  {
    MutexLock l(&c.mu);
    if (!c.connected || c.failed) {
      return absl::FailedPreconditionError("BindWindows: connection not connected or failed");
    }
    // Binds never wait behind queued work: their keys are drawn when posted, and the caller
    // needs them on return.
    if (!c.windows.unposted.empty() || c.windows.posted + grants.size() > kWindowWrBudget) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "BindWindows: ", c.windows.posted + c.windows.unposted.size(),
          " window operations in flight on this connection, at most ", kWindowWrBudget));
    }
    WindowOp op;
    op.done = std::move(done);
    // One completion for the batch: the last bind is signaled, and an earlier one that fails
    // completes with its error anyway (failing the QP).
    // One post (one doorbell) for the batch.
    std::vector<rnic::SendWorkRequest> wrs;
    wrs.reserve(grants.size());
    for (size_t i = 0; i < grants.size(); ++i) {
      const WindowGrant& g = grants[i];
      wrs.push_back(WindowWr(
          c, rnic::MakeBindWindow(0, g.window, *g.region, g.addr, g.length, rnic::kRemoteWrite),
          /*signaled=*/i + 1 == grants.size()));
    }
    if (absl::Status st = c.qp->PostSend(wrs); !st.ok()) {
      FailConnection(c, out, FailScope::kMainFailed);
      QueueCallbacks(c, out);
      return st;
    }
    op.wrs = static_cast<uint32_t>(wrs.size());
    c.windows.posted += op.wrs;
    op.completions_due = op.wrs > 0 ? 1 : 0;
    {
      MutexLock t(&c.table->mu);
      for (const WindowGrant& g : grants) {
        const uint32_t key = g.window->rkey();
        c.table->regions.Insert(
            key, {g.addr, g.length, rnic::kRemoteWrite, WindowOwner(c), g.region->lkey()});
        c.windows.keys.insert(key);
      }
    }
    if (grants.empty()) {
      out.Window(std::move(op.done), absl::OkStatus());
    } else {
      c.windows.ops.push_back(std::move(op));
    }
    run = TakeCallbacks(c, out);
  }
  if (run) RunTakenCallbacks(c, out);
  return absl::OkStatus();
}

absl::Status Connection::InvalidateWindow(uint32_t rkey, WindowCallback done) {
  ConnectionState& c = *state_;
  Deferred out;
  bool run = false;  // TakeCallbacks took them: run them after the lock
  {
    MutexLock l(&c.mu);
    if (c.windows.closing.contains(rkey)) OnPeerInvalidationDelivered(c, rkey);
    const bool by_peer = c.windows.peer_invalidated.contains(rkey);
    if (!by_peer && !c.windows.keys.contains(rkey)) {
      return absl::InvalidArgumentError(
          absl::StrCat("InvalidateWindow: key 0x", absl::Hex(rkey), " is bound on no window here"));
    }
    if (c.failed) return absl::FailedPreconditionError("InvalidateWindow: connection failed");
    WindowOp op;
    op.invalidation = true;
    op.done = std::move(done);
    // Staged writes through the key are refused from here on (a worker validating one holds
    // c.mu, so none is between its check and its count in in_hand); the ones admitted before
    // must be in place first.
    for (size_t k = 0; k < c.lanes.size(); ++k) {
      op.drain_to[k] = c.lanes[k].expected_seq + c.lanes[k].in_hand;
    }
    if (by_peer) {
      // The peer's NIC ended the window already (its key left the table): no work request.
      c.windows.peer_invalidated.erase(rkey);
      c.windows.ops.push_back(std::move(op));
      FinishWindowOps(c, out);
    } else {
      {
        MutexLock t(&c.table->mu);
        c.table->regions.Erase(rkey);
      }
      c.windows.keys.erase(rkey);
      op.completions_due = 1;
      op.wrs = 1;
      c.windows.unposted.push_back(
          WindowWr(c, rnic::MakeLocalInvalidate(0, rkey), /*signaled=*/true));
      c.windows.ops.push_back(std::move(op));
      if (!PostWindowWrs(c)) FailConnection(c, out, FailScope::kMainFailed);
    }
    run = TakeCallbacks(c, out);
  }
  if (run) RunTakenCallbacks(c, out);
  return absl::OkStatus();
}

void OnPeerInvalidation(ConnectionState& c, uint32_t key, const uint32_t* need) {
  if (!c.windows.keys.contains(key)) return;  // not a window of ours: the NIC judged it
  std::array<uint32_t, kMaxLanes>& at = c.windows.closing[key];
  for (size_t k = 0; k < c.lanes.size(); ++k) at[k] = need[k];
}

void OnPeerInvalidationDelivered(ConnectionState& c, uint32_t key) {
  if (c.windows.closing.erase(key) == 0) return;
  {
    MutexLock t(&c.table->mu);
    c.table->regions.Erase(key);
  }
  c.windows.keys.erase(key);
  c.windows.peer_invalidated.insert(key);
}

bool AfterPeerInvalidation(const ConnectionState& c, uint32_t key, int lane, uint64_t sequence) {
  auto it = c.windows.closing.find(key);
  if (it == c.windows.closing.end()) return false;
  return static_cast<int32_t>(static_cast<uint32_t>(sequence) - it->second[lane]) >= 0;
}

void Connection::SetStagedWriteCheck(std::shared_ptr<const StagedWriteCheck> check) {
  MutexLock l(&state_->mu);
  state_->windows.check = std::move(check);
}

void OnWindowCompleted(ConnectionState& c, const rnic::WorkCompletion& wc, Deferred& out) {
  WindowState& w = c.windows;
  for (WindowOp& op : w.ops) {
    if (op.completions_due == 0) continue;
    --op.completions_due;
    w.posted -= std::min(w.posted, op.wrs);
    if (wc.status != rnic::WcStatus::kSuccess && op.status.ok()) {
      op.status = absl::UnavailableError(
          absl::StrCat(op.invalidation ? "window invalidation" : "window bind",
                       " failed: ", rnic::WcStatusName(wc.status)));
    }
    break;
  }
  if (wc.status != rnic::WcStatus::kSuccess) {
    FailConnection(c, out, FailScope::kMainFailed);
    return;
  }
  if (!PostWindowWrs(c)) {
    FailConnection(c, out, FailScope::kMainFailed);
    return;
  }
  FinishWindowOps(c, out);
}

void FinishWindowOps(ConnectionState& c, Deferred& out) {
  // Each op finishes when its own work is done: an invalidation the peer made waits for no
  // bind posted before it (the completions of posted ones still arrive in order).
  WindowState& w = c.windows;
  for (auto it = w.ops.begin(); it != w.ops.end();) {
    WindowOp& op = *it;
    bool done = op.completions_due == 0;
    if (done && op.invalidation) {
      for (size_t k = 0; k < c.lanes.size(); ++k) done &= c.lanes[k].expected_seq >= op.drain_to[k];
    }
    if (!done) {
      ++it;
      continue;
    }
    out.Window(std::move(op.done), op.status);
    it = w.ops.erase(it);
  }
}

void FailWindows(ConnectionState& c, Deferred& out) {
  WindowState& w = c.windows;
  for (WindowOp& op : w.ops) {
    absl::Status st =
        op.status.ok() ? absl::UnavailableError("the connection failed: its windows died with it")
                       : op.status;
    out.Window(std::move(op.done), st);
  }
  w.ops.clear();
  w.unposted.clear();
  w.closing.clear();
  w.peer_invalidated.clear();
  if (!w.keys.empty()) {
    MutexLock t(&c.table->mu);
    for (uint32_t key : w.keys) c.table->regions.Erase(key);
  }
  w.keys.clear();
}

}  // namespace unloadkv::engine
