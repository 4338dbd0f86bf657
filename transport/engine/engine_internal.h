// Internal state of the write engine, shared by its files (docs/engine.md lists them): set-up
// (engine.cc, connection.cc), the initiator (initiator.cc, op_completion.cc) and completion
// processing (completion_worker.cc, staged_write.cc). Not part of the public interface.
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
#include "transport/engine/engine.h"
#include "transport/engine/engine_wire.h"
#include "transport/engine/receive_pool.h"
#include "transport/engine/send_slot_pool.h"
#include "transport/engine/staging_header.h"
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
  kStagePoolRecv
};
inline uint64_t MakeWrId(WrKind k, uint32_t conn, uint32_t index) {
  return (uint64_t{static_cast<uint8_t>(k)} << 56) | (uint64_t{conn & 0xffffff} << 32) | index;
}
inline WrKind KindOf(uint64_t wr_id) { return static_cast<WrKind>(wr_id >> 56); }
inline uint32_t ConnOf(uint64_t wr_id) { return (wr_id >> 32) & 0xffffff; }
inline uint32_t IndexOf(uint64_t wr_id) { return static_cast<uint32_t>(wr_id); }

// The regions peers may write to, as registered through Engine::RegisterMemory.
struct ValidationTable {
  Mutex mu;
  rnic::RegionTable regions ABSL_GUARDED_BY(mu);
};

// One write or message, from Write/Send until its callback.
struct Op {
  uint64_t id = 0;
  bool is_write = true;
  Path path = Path::kOffload;
  Decision decision;
  bool posted = false;
  bool done = false;
  uint64_t main_index = 0;  // position among the main QP's posted WRs (offloaded writes, messages)
  bool lazy = false;        // WriteOptions::lazy_completion
  bool quiet = false;       // posted unsignaled: completed by later evidence (Quiet)
  rnic::WcStatus status = rnic::WcStatus::kSuccess;
  absl::Time submitted, posted_at, done_at;
  // Write fields.
  rnic::ScatterGatherEntry local;
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  int lane = 0;             // an unloaded write's staging lane
  uint64_t unload_seq = 0;  // its sequence number in the lane
  WriteCallback write_done;
  // Message fields.
  std::string message;  // held until a send slot and a credit are free
  int send_slot = -1;
  SendCallback send_done;
};

// One staging lane of a connection: a staging QP, whose receives (the peer's staged writes and
// acks) come from the staging pool of the worker serving it, and the credits both ways
// (docs/engine.md, "The staging pool"). Fields other than pool, qp and worker are guarded by
// the connection's mu.
struct Lane {
  std::shared_ptr<ReceivePool> pool;  // declared before the QP: it must outlive it
  std::unique_ptr<rnic::QueuePair> qp;
  int worker = 0;
  // Initiator side: unloaded writes posted, acknowledged, and in flight (op ids, in order);
  // the peer's grant (sequence numbers below `limit` may be sent).
  uint64_t next_seq = 0;
  uint64_t acked_seq = 0;
  uint64_t limit = 0;
  std::deque<uint64_t> inflight;
  // Units borrowed from `pool` backing the acks still to come for our writes (each ack
  // acknowledges at least one new write, except the peer's one unsolicited ack, which the
  // lane's reserve backs): at least inflight.size(); given back once nothing is in flight.
  uint32_t ack_units = 0;
  bool starved = false;  // a write waited for credits since the last one posted
  // Target side: staged writes applied so far; the ack state.
  uint64_t expected_seq = 0;
  bool ack_pending = false;
  bool refused = false;  // refused the write at expected_seq; the NAK goes out on this lane
  uint32_t acks_in_flight = 0;
  uint32_t next_ack_slot = 0;
  uint32_t nak_wr_index = UINT32_MAX;  // the NAK's WR index, once posted
  // Acks that acknowledge nothing new (message credits only) go one at a time: the reserve
  // backs one at the peer.
  uint64_t applied_sent = 0;
  uint32_t unsolicited_wr_index = UINT32_MAX;  // in flight, or UINT32_MAX
  // Target-side staging credits. `units` buffers of `pool` back the peer's credits
  // (min_staging_credits reserved + `borrowed`), `in_hand` of them hold staged writes being
  // applied; the peer may send sequence numbers below `limit_sent`, so
  // limit_sent - expected_seq <= units - in_hand. `level` is the window aimed at: doubled when
  // the peer asks (StagingHeader::wants_credits), lowered by one after 4 x `level` staged
  // writes sent while half the window was unused (`calm`).
  uint32_t units = 0;
  uint32_t borrowed = 0;
  uint32_t in_hand = 0;
  uint32_t level = 0;
  uint32_t calm = 0;
  uint64_t limit_sent = 0;
};

struct ConnectionState {
  // Gives the connection's message buffers back to its worker's pool (receive_pool.h), once
  // nothing can use them: the last reference is gone.
  ~ConnectionState();

  Mutex mu;
  Engine* engine = nullptr;
  EngineOptions options;
  uint32_t id = 0;
  int worker = 0;  // serves the main QP and lane 0
  // The worker's message pool, whose SRQ the main QP takes its receives from (declared before
  // the QP: it must outlive it).
  std::shared_ptr<ReceivePool> pool;
  bool admitted = false;  // holds its reserve in `pool` and `send_pool`
  // The worker's message send slots (send_slot_pool.h): send_reserve of them the connection's
  // own, send_borrowed more lent while in use.
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
  MessageHandler handler ABSL_GUARDED_BY(mu);

  // Local memory: outgoing staging headers (one per credit the peer may grant, sized at
  // Connect) and ack payloads. Messages are sent from the worker's send slots and arrive in
  // its message pool; staged writes and acks arrive in the lanes' workers' staging pools.
  std::vector<char> headers, acks;
  std::unique_ptr<rnic::MemoryRegion> headers_mr, acks_mr;
  uint32_t message_header_bytes = 0;

  // Initiator side.
  std::deque<Op> ops ABSL_GUARDED_BY(mu);  // ops.front().id is the oldest unfinished op
  uint64_t next_op_id ABSL_GUARDED_BY(mu) = 0;
  uint64_t messages_issued ABSL_GUARDED_BY(mu) = 0;  // Send calls accepted
  uint32_t next_lane ABSL_GUARDED_BY(mu) = 0;        // where the search for a free lane starts
  uint32_t message_credits ABSL_GUARDED_BY(mu) = 0;
  uint32_t queued_messages ABSL_GUARDED_BY(mu) = 0;      // sent, not yet posted
  std::vector<int> free_send_slots ABSL_GUARDED_BY(mu);  // send_pool slots, free
  uint32_t send_borrowed ABSL_GUARDED_BY(mu) = 0;
  std::vector<uint32_t> orphan_send_slots ABSL_GUARDED_BY(mu);  // see FinishInOrder
  size_t first_unposted ABSL_GUARDED_BY(mu) = 0;  // index in ops of the first unposted op
  uint32_t send_wrs ABSL_GUARDED_BY(mu) = 0;      // posted send WRs not yet completed
  uint64_t main_posted ABSL_GUARDED_BY(mu) = 0;   // WRs ever posted on the main QP
  // Main-QP WRs posted unsignaled (messages without a callback, lazy writes), oldest first.
  // They are complete once a later signaled WR completes successfully, or once the peer says
  // it received a message of ours posted after them (RC places one QP's WRs in order).
  struct Quiet {
    uint64_t main_index;
    int send_slot;   // a message's send slot; -1 for a write
    uint64_t op_id;  // a write's op, completed when retired
  };
  std::deque<Quiet> quiet ABSL_GUARDED_BY(mu);
  // While a Connection::Batch is open, main-QP WRs collect here and are posted together.
  int batch_depth ABSL_GUARDED_BY(mu) = 0;
  std::vector<rnic::SendWorkRequest> batched ABSL_GUARDED_BY(mu);
  uint32_t quiet_since_signaled ABSL_GUARDED_BY(mu) = 0;        // messages
  uint32_t lazy_writes_since_signaled ABSL_GUARDED_BY(mu) = 0;  // writes
  // Messages posted so far = messages_confirmed (known received by the peer) + the main_index
  // of each later one in `unconfirmed`, oldest first.
  uint64_t messages_confirmed ABSL_GUARDED_BY(mu) = 0;
  std::deque<uint64_t> unconfirmed ABSL_GUARDED_BY(mu);
  uint32_t max_send_wrs = 0;

  // Target side.
  uint64_t messages_received ABSL_GUARDED_BY(mu) = 0;
  uint64_t messages_taken ABSL_GUARDED_BY(mu) = 0;  // taken for delivery (Held::number)
  // Message credits (docs/engine.md, "Message credits"). Every unit this connection holds in
  // the pool (min_message_credits + borrowed) backs one credit the peer holds (`granted`), one
  // about to be handed back (`credits_to_return`, its buffer posted) or one message received
  // and not yet delivered (`in_hand`, its buffer held). `credit_level` is how many it aims to
  // hold: doubled when the peer runs out with messages waiting, lowered by one after
  // `credit_level` messages in a row (`calm_messages`) that did not wait.
  uint32_t granted ABSL_GUARDED_BY(mu) = 0;
  uint32_t credits_to_return ABSL_GUARDED_BY(mu) = 0;
  uint32_t in_hand ABSL_GUARDED_BY(mu) = 0;
  uint32_t borrowed ABSL_GUARDED_BY(mu) = 0;
  uint32_t credit_level ABSL_GUARDED_BY(mu) = 0;
  uint32_t calm_messages ABSL_GUARDED_BY(mu) = 0;
  // Credits held back (their buffers posted) while Backlogged.
  uint32_t withheld ABSL_GUARDED_BY(mu) = 0;
  bool refusing ABSL_GUARDED_BY(mu) = false;  // a staged write was refused: NAK, then fail
  rnic::WcStatus nak_status ABSL_GUARDED_BY(mu) = rnic::WcStatus::kSuccess;
  bool nak_sent ABSL_GUARDED_BY(mu) = false;
  // Messages received before the unloaded writes they follow were applied: (pool buffer,
  // length, unloaded writes of each lane required), in arrival order.
  struct Held {
    uint32_t buffer, length;
    uint32_t need[kMaxLanes];
    uint64_t number = 0;  // 0, 1, ... in delivery order; set by TakeDeliverable
  };
  std::deque<Held> held ABSL_GUARDED_BY(mu);

  // Callbacks due, in post order, and whether a thread is running them (which one). Worker
  // threads complete ops concurrently; queueing under `mu` and running on one thread at a time
  // keeps invariant 2 (callbacks fire in post order) whichever worker completed an op.
  std::vector<std::function<void()>> ready ABSL_GUARDED_BY(mu);
  // This state itself: RunCallbacks holds it while callbacks run, since one of them may drop
  // the last Connection (and with it the worker's references).
  std::weak_ptr<ConnectionState> self;
  bool callbacks_running ABSL_GUARDED_BY(mu) = false;
  std::thread::id callback_thread ABSL_GUARDED_BY(mu);

  Op* FindOp(uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  Op* FindOpByIndex(uint32_t low32) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
};

// Callbacks collected under a connection's lock, queued before it is released
// (QueueCallbacks) and run after (RunCallbacks).
using Deferred = std::vector<std::function<void()>>;

// Appends `out` to the connection's due callbacks; call before releasing c.mu.
void QueueCallbacks(ConnectionState& c, Deferred& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
// Runs the connection's due callbacks in order, unless another thread is running them (it runs
// these too). With `wait`, returns only once none is due or running, except when called from
// inside one of them. Call without c.mu.
void RunCallbacks(ConnectionState& c, bool wait = false) ABSL_LOCKS_EXCLUDED(c.mu);

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
  return c.options.throttle_when_backlogged && c.queued_messages >= c.options.message_slots;
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

  // Handles up to one batch of completions; returns how many. (completion_worker.cc)
  int PollOnce(ValidationTable& table, EngineMetrics* metrics);
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
};

}  // namespace unloadkv::engine

#endif  // UNLOADKV_TRANSPORT_ENGINE_ENGINE_INTERNAL_H_
