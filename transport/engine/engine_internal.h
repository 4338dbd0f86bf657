// Internal state of the write engine, shared by its files (docs/engine.md lists them): set-up
// (engine.cc, connection.cc), the initiator (initiator.cc, op_completion.cc) and completion
// processing (completion_worker.cc, staged_write.cc), and the helpers each defines for the
// others. A connection's state is composed of parts (lane.h, initiator_state.h,
// target_state.h), each owned by the files that use it. Not part of the public interface.
#ifndef UNLOADKV_TRANSPORT_ENGINE_ENGINE_INTERNAL_H_
#define UNLOADKV_TRANSPORT_ENGINE_ENGINE_INTERNAL_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "transport/base/mapped_memory.h"
#include "transport/base/mutex.h"
#include "transport/engine/deferred.h"
#include "transport/engine/engine.h"
#include "transport/engine/engine_wire.h"
#include "transport/engine/initiator_state.h"
#include "transport/engine/lane.h"
#include "transport/engine/receive_pool.h"
#include "transport/engine/send_slot_pool.h"
#include "transport/engine/staging_header.h"
#include "transport/engine/target_state.h"
#include "transport/engine/window_state.h"
#include "transport/rnic/region_table.h"

namespace unloadkv::engine {

// Immediate values of SEND_WITH_IMM on an engine connection.
inline constexpr uint32_t kImmMessage = 0x4D534731;  // an application message
inline constexpr uint32_t kImmAck = 0x41434B31;      // an ack (payload: AckPayload)
inline constexpr uint32_t kImmStaged = 0x53544731;   // a staged write (StagingHeader + payload)
inline constexpr uint32_t kAckSlots = 16;            // acks in flight per lane
// Send WRs a connection may have outstanding beyond its staged writes, acks and messages: the
// offloaded writes in flight on its main QP.
inline constexpr uint32_t kOffloadedWrBudget = 256;
// How often a worker looks for QPs that failed with nothing of theirs outstanding.
inline constexpr absl::Duration kQpSweepInterval = absl::Milliseconds(500);
// Message headers and acks: engine_wire.h.

// Completions one connection can put on its workers' CQs at most: every send and receive WR
// its QPs can hold, as when they are all flushed at once.
uint64_t ConnectionCqEntries(const EngineOptions& o);

// Work request ids: kind in the top byte, connection id below it, an index in the low 32 bits
// (kAck: lane << 16 | ack slot). kQuietMessage: a message posted unsignaled (it completes only
// on error). kPoolRecv, kStagePoolRecv: a buffer of a worker's message or staging pool
// (connection 0: whichever QP takes it; its completion names the QP).
enum class WrKind : uint8_t {
  kOffloadWrite = 1,
  kUnloadWrite,
  kMessage,
  kAck,
  kQuietMessage = 6,
  kPoolRecv,
  kStagePoolRecv,
  kWindow,  // a bind or invalidation of a memory window (windows.cc), on the main QP
};
inline uint64_t MakeWrId(WrKind k, uint32_t conn, uint32_t index) {
  return (uint64_t{static_cast<uint8_t>(k)} << 56) | (uint64_t{conn & 0xffffff} << 32) | index;
}
inline WrKind KindOf(uint64_t wr_id) { return static_cast<WrKind>(wr_id >> 56); }
inline uint32_t ConnOf(uint64_t wr_id) { return (wr_id >> 32) & 0xffffff; }
inline uint32_t IndexOf(uint64_t wr_id) { return static_cast<uint32_t>(wr_id); }

// The regions peers may write to, as registered through Engine::RegisterMemory, and the
// windows bound on connections (RegionEntry::bound_to = WindowOwner of the connection).
struct ValidationTable {
  Mutex mu;
  rnic::RegionTable regions ABSL_GUARDED_BY(mu);
};

// A connection's state. What is common to both sides is here; each side's own state is a
// part owned by the files that use it: InitiatorState (initiator_state.h: initiator.cc,
// op_completion.cc), TargetState (target_state.h: completion_worker.cc, staged_write.cc), the
// lanes (lane.h), and the callbacks due (op_completion.cc). One mutex guards them all.
struct ConnectionState {
  // Gives the connection's message buffers back to its worker's pool (receive_pool.h), once
  // nothing can use them: the last reference is gone.
  ~ConnectionState();

  Mutex mu;
  Engine* engine = nullptr;
  std::shared_ptr<ValidationTable> table;  // the engine's
  EngineOptions options;
  uint32_t id = 0;
  int worker = 0;  // serves the main QP and lane 0
  // The worker's message pool, whose SRQ the main QP takes its receives from (declared before
  // the QP: it must outlive it).
  std::shared_ptr<ReceivePool> pool;
  bool admitted = false;  // holds its reserve in `pool` and `send_pool`
  // The worker's message send slots (send_slot_pool.h): send_reserve of them the connection's
  // own, InitiatorState::send_borrowed more lent while in use.
  std::shared_ptr<SendSlotPool> send_pool;
  uint32_t send_reserve = 0;
  std::unique_ptr<rnic::QueuePair> qp;  // main: offloaded writes, messages
  std::vector<Lane> lanes;              // sized at creation, never resized
  std::unique_ptr<PathPolicy> policy ABSL_GUARDED_BY(mu);
  ConnectionInfo local;
  ConnectionInfo remote ABSL_GUARDED_BY(mu);
  // With EngineOptions::checks: this connection's name for what it sends and its peer's
  // (invariant_checks.h), set by Connect.
  std::string check_name, peer_check_name;
  bool connected ABSL_GUARDED_BY(mu) = false;
  bool failed ABSL_GUARDED_BY(mu) = false;
  // Staged writes validated and being copied outside the lock (Connection::Close waits).
  int copying ABSL_GUARDED_BY(mu) = 0;
  bool reported_failure ABSL_GUARDED_BY(mu) = false;  // a callback reported an error
  // Workers (bit = Worker::index, < kMaxUnloadWorkers) whose sweep found one of their QPs of
  // this connection in error.
  uint64_t error_swept ABSL_GUARDED_BY(mu) = 0;
  // Shared with the deliveries queued for it (Deferred): queueing one copies no handler.
  std::shared_ptr<const MessageHandler> handler ABSL_GUARDED_BY(mu);

  // Local memory: outgoing staging headers (one per credit the peer may grant, sized at
  // Connect) and ack payloads. Messages are sent from the worker's send slots and arrive in
  // its message pool; staged writes and acks arrive in the lanes' workers' staging pools.
  std::vector<char> headers, acks;
  std::unique_ptr<rnic::MemoryRegion> headers_mr, acks_mr;
  uint32_t message_header_bytes = 0;

  InitiatorState initiator ABSL_GUARDED_BY(mu);
  TargetState target ABSL_GUARDED_BY(mu);
  WindowState windows ABSL_GUARDED_BY(mu);

  // Callbacks due, in post order, and whether a thread is running them (which one). Worker
  // threads complete ops concurrently; queueing under `mu` and running on one thread at a time
  // keeps invariant 2 (callbacks fire in post order) whichever worker completed an op.
  struct Callbacks {
    Deferred ready;
    bool running = false;
    std::thread::id thread;
  };
  Callbacks callbacks ABSL_GUARDED_BY(mu);
  // This state itself: RunCallbacks holds it while callbacks run, since one of them may drop
  // the last Connection (and with it the worker's references).
  std::weak_ptr<ConnectionState> self;
};

// Appends `out` to the connection's due callbacks; call before releasing c.mu. The next
// RunCallbacks runs them.
void QueueCallbacks(ConnectionState& c, Deferred& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
// QueueCallbacks, then, if no thread runs the connection's callbacks, makes this thread the one
// that does: they all move into `out` and it returns true; the caller must then call
// RunTakenCallbacks after releasing c.mu (RunCallbacks would take the lock again to take them).
// False when none is due or a thread runs them (this one, from inside a callback, included):
// that thread runs these too before it stops.
[[nodiscard]] bool TakeCallbacks(ConnectionState& c, Deferred& out)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
// Runs `batch` (taken by TakeCallbacks), then the callbacks queued meanwhile, until none is due.
void RunTakenCallbacks(ConnectionState& c, Deferred& batch) ABSL_LOCKS_EXCLUDED(c.mu);
// Runs the connection's due callbacks in order, unless another thread is running them (it runs
// these too). With `wait`, returns only once none is due or running, except when called from
// inside one of them. Call without c.mu.
void RunCallbacks(ConnectionState& c, bool wait = false) ABSL_LOCKS_EXCLUDED(c.mu);
// Hands `messages` (deliverable, in order) to `handler` (empty: dropped), then releases their
// buffers and returns credits (completion_worker.cc). Call without c.mu.
void DeliverMessages(ConnectionState& c, const MessageHandler& handler,
                     absl::Span<const TargetState::Held> messages) ABSL_LOCKS_EXCLUDED(c.mu);

// Connection::Batch without the handle: while held (calls nest), main-QP work requests are
// collected and posted together by the outermost ReleasePosts (initiator.cc).
void HoldPosts(ConnectionState& c) ABSL_LOCKS_EXCLUDED(c.mu);
void ReleasePosts(ConnectionState& c) ABSL_LOCKS_EXCLUDED(c.mu);

// Initiator-side helpers (initiator.cc, op_completion.cc).
void PostReady(ConnectionState& c, Deferred& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
void MarkDone(ConnectionState& c, Op& op, rnic::WcStatus status)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
void FinishInOrder(ConnectionState& c, Deferred& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
// Which QPs a failure takes down. The main QP is moved to error only when it failed itself
// (it then reports each of its ops, a refusal with its precise status) or on close: otherwise
// a staging-side failure racing with a refusal on the main QP would flush the refused write
// before its NAK is read.
// kRefusalSent: this target's NAK went out; only the refusing lane goes to error, so that the
// initiator reads the NAK before any other lane of it fails (which would flush the refused write).
enum class FailScope { kMainFailed, kStageFailed, kRefusalSent, kClose };
void FailConnection(ConnectionState& c, Deferred& out, FailScope scope)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
// Lane `lane` of the peer applied its first `applied` staged writes; with an error status, it
// refused the next one with that status.
void AckUnloaded(ConnectionState& c, int lane, uint64_t applied, rnic::WcStatus status,
                 Deferred& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
// Whether the peer gets no credits back for now (EngineOptions::throttle_when_backlogged):
// message_slots or more of this side's messages wait for its credits.
inline bool Backlogged(const ConnectionState& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  return c.options.throttle_when_backlogged &&
         c.initiator.queued_messages >= c.options.message_slots;
}
// A message's send slot is free again: a lent one goes back to the pool, one of the reserve
// stays with the connection.
void ReleaseSendSlot(ConnectionState& c, int slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
// Send slots a connection owns: max(min_message_credits, SignalEvery), so that among the
// messages holding them one is always signaled and its completion frees the others.
uint32_t SendReserve(const EngineOptions& o);
// Bytes of one message buffer or send slot: the message header and the largest message.
inline uint32_t MessageBufferBytes(const EngineOptions& o) {
  return MessageHeaderBytes(o.staging_lanes) + o.max_message_bytes;
}
// Of the messages without a callback, and of the lazy writes, every this-many-th is signaled.
inline uint32_t SignalEvery(const EngineOptions& o) {
  return o.message_slots / 4 > 1 ? o.message_slots / 4 : 1;
}
// Every main-QP WR before `main_index` is known complete: quiet messages give back their send
// slots and queue entries, quiet writes complete.
void RetireQuietBefore(ConnectionState& c, uint64_t main_index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);

// Memory windows (windows.cc).
// What the engine's table names as the holder of a window bound on `c` (never 0: regions).
inline uint32_t WindowOwner(const ConnectionState& c) { return c.id + 1; }
// A bind or invalidation on the main QP completed.
void OnWindowCompleted(ConnectionState& c, const rnic::WorkCompletion& wc, Deferred& out)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
// Finishes the window operations whose own work is done (binds complete in post order anyway);
// after any staged write commit.
void FinishWindowOps(ConnectionState& c, Deferred& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
// The connection failed: pending window operations get an error, its keys leave the table.
void FailWindows(ConnectionState& c, Deferred& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
// A message of the peer that invalidated `key` arrived; `need` is its header's lane counts.
void OnPeerInvalidation(ConnectionState& c, uint32_t key, const uint32_t* need)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
// That message is delivered: every staged write before it is applied; the key leaves the table.
void OnPeerInvalidationDelivered(ConnectionState& c, uint32_t key)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
// Whether the staged write `sequence` of `lane` through `key` comes after a message of the
// peer that invalidated the key (it must be refused as the NIC would).
bool AfterPeerInvalidation(const ConnectionState& c, uint32_t key, int lane, uint64_t sequence)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);

// Target-side helpers (staged_write.cc).

// A validated staged write, copied outside the connection's lock.
struct StagedCopy {
  void* dst = nullptr;
  const char* src = nullptr;
  uint32_t length = 0;
};
// Validates the staged write that arrived in staging pool buffer `buffer` (`byte_len` bytes)
// of lane `lane_index` exactly as the NIC would validate the write; on success fills `copy`
// (the caller copies, then calls CommitStagedWrite) and counts the buffer in hand, on failure
// records the refusal (the lane's next ack is a NAK). The buffer is the caller's to recycle
// unless this returned true.
bool ValidateStagedWrite(ConnectionState& c, int lane_index, uint32_t buffer, uint32_t byte_len,
                         ValidationTable& table, EngineMetrics* metrics, StagedCopy* copy)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
// The placement copy; no lock held (only the thread driving the lane's worker copies).
void CopyStagedWrite(const StagedCopy& copy);
// The write in `buffer` is applied: counted, and its buffer goes back to the pool (posted
// again for a credit, or returned with a borrowed unit when the lane holds more than its level).
void CommitStagedWrite(ConnectionState& c, Lane& lane, uint32_t buffer, uint32_t length,
                       EngineMetrics* metrics) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
// A staged write of the peer arrived, asking for a larger window (`wanted`) or sent while half
// its window was unused (`calm`): the lane's level doubles, or falls by one after 4 x `level`
// calm ones in a row, and units are borrowed up to it, as far as the pool lends.
void AdjustStagingCredits(ConnectionState& c, Lane& lane, bool wanted, bool calm)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
void SendAckIfDue(ConnectionState& c, Lane& lane) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
// Whether lane `lane` may post one more unloaded write now: a staging credit left, and a unit
// for its ack (borrowed here when needed). Marks the lane starved when not.
bool LaneHasRoom(ConnectionState& c, Lane& lane) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);

}  // namespace unloadkv::engine

namespace unloadkv::engine {

// One unload worker: a CQ shared by the connections assigned to it (their sends and receives).
struct Engine::Worker {
  int index = 0;  // in Engine::workers_
  // The device port whose QPs, CQ and SRQs this worker's are (index % Engine::ports_), and
  // the one its thread progresses.
  rnic::Device* device = nullptr;
  std::unique_ptr<rnic::CompletionQueue> cq;
  // Receive buffers for the messages of the connections whose main QP this worker serves.
  std::shared_ptr<ReceivePool> pool;
  std::shared_ptr<SendSlotPool> send_pool;
  // Staging buffers for the staged writes and acks of every lane this worker serves.
  std::shared_ptr<ReceivePool> stage_pool;
  // Held while a thread drives this worker: a lane's staged writes are copied outside the
  // connection's lock, in order, so only one thread may process a lane's completions.
  std::atomic<bool> polling{false};
  Mutex mu;
  absl::flat_hash_map<uint32_t, std::shared_ptr<ConnectionState>> conns ABSL_GUARDED_BY(mu);
  // Main QP number -> connection id, for the pool's receives (their wr_id names no connection).
  absl::flat_hash_map<uint32_t, uint32_t> main_qps ABSL_GUARDED_BY(mu);
  // Staging QP number -> connection id, likewise for the staging pool's receives.
  absl::flat_hash_map<uint32_t, uint32_t> stage_qps ABSL_GUARDED_BY(mu);

  // Handles one batch of completions: rounds of up to kPollBatch while a round comes back full,
  // at most kMaxPollRounds; the connections' posts and staging acks go out when it ends.
  // Returns how many. (completion_worker.cc)
  static constexpr int kPollBatch = 32;
  static constexpr int kMaxPollRounds = 8;
  int PollOnce(ValidationTable& table, EngineMetrics* metrics);
  // One round of PollOnce: polls up to kPollBatch completions and handles them, holding the
  // posts of each connection they touch (added to `touched`). Returns how many.
  int PollRound(ValidationTable& table, EngineMetrics* metrics);
  // At most once per kQpSweepInterval of `now`: fails the connections whose QPs this worker
  // serves and that went to the error state by themselves (their peer died), once two sweeps
  // in a row found them so. Every receive
  // of an engine QP comes from a shared receive queue, and a QP on an SRQ has none of its own
  // to flush when it fails (verbs reports it as an asynchronous event, which the rnic
  // interface does not carry), so an idle connection would otherwise never learn of it.
  // PollOnce calls it (the thread driving this worker).
  void SweepFailedQps(absl::Time now);
  const Clock* clock = nullptr;  // the device's
  absl::Time next_sweep = absl::InfinitePast();
  // PollOnce's connections of the batch (empty between polls; kept for its capacity). Used
  // by the thread holding `polling`.
  std::vector<std::shared_ptr<ConnectionState>> touched;
};

}  // namespace unloadkv::engine

#endif  // UNLOADKV_TRANSPORT_ENGINE_ENGINE_INTERNAL_H_
