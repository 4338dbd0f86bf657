// The offload/unload write engine.
//
// An Engine owns the per-node side of the technique: memory registration that both paths
// validate against, and unload workers. A Connection is one reliable connection to a peer
// engine, carrying writes (each on the path its policy picks) and messages.
//
//   auto engine = Engine::Create(device, options);            // one per node
//   auto mr = engine->RegisterMemory(buf, len, kLocalWrite | kRemoteWrite);  // writable by peers
//   auto conn = engine->CreateConnection(MakePolicy("adaptive"));
//   ... exchange conn->local_info() with the peer out of band, then conn->Connect(peer_info)
//   conn->Write(local_sge, remote_addr, rkey, [](const WriteResult& r) { ... });
//
// Semantics, whatever path a write takes (each is a test in engine_test.cc):
//  1. A write's callback with ok status means its bytes are visible in the target's memory.
//  2. Callbacks fire in post order. A message sent after a write is handed to the peer's
//     handler after that write is visible. A write never overtakes an earlier write to
//     overlapping bytes that took the other path: it follows that write's path instead.
//
// Each connection uses a main QP and one staging QP per lane, so that a staged write never
// waits behind an offloaded write's translation miss (RC places one QP's requests in order):
// the main QP carries offloaded writes and messages, each staging lane unloaded writes (as
// SENDs into the target worker's staging pool, within the staging credits the target grants)
// and their acks. A lane is served by its own unload worker (the connection's
// worker, then the next ones on its device port), so one connection's unload work spreads
// over `staging_lanes` workers (of those on its port). Writes overlapping an unloaded write in flight take its lane.
// Messages name how many unloaded writes of each lane preceded them; the target delivers a
// message only after applying those.
//  3. A write the target NIC would refuse (unknown rkey, no remote-write access, out of bounds)
//     is refused on the unload path too, with the same status, copying nothing; as with RC, the
//     connection then fails and later work completes with kFlushed.
//  4. At most as many unloaded writes are in flight per lane as the target granted staging
//     credits (never more than its `staging_slots`); when every lane is out of credits, a
//     write the policy routes to unload waits or goes offload (PathPolicy::OnRingFull).
//
// Threading: PollOnce drives all workers from the calling thread (the simulated fabric, tests);
// Start() instead runs one thread per worker. On a device with several ports
// (rnic::Device::port) worker i uses port i % ports for its CQ, pools and connections' QPs, so
// that workers on different ports share no stream, epoll set or progress. A worker is driven by one
// thread at a time (a PollOnce finding it busy skips it). Write/Send may be called from any thread;
// callbacks run on worker threads (or inside PollOnce) and must not block. CreateConnection
// may be called from any thread (calls are serialized).
#ifndef UNLOADKV_TRANSPORT_ENGINE_ENGINE_H_
#define UNLOADKV_TRANSPORT_ENGINE_ENGINE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "transport/base/clock.h"
#include "transport/base/mutex.h"
#include "transport/engine/invariant_checks.h"
#include "transport/engine/metrics.h"
#include "transport/engine/policy.h"
#include "transport/engine/staged_write_check.h"
#include "transport/engine/target_model.h"
#include "transport/rnic/device.h"

namespace unloadkv::engine {

// Bounds of EngineOptions, checked by Engine::Create (and, for a peer's staging and message
// parameters, by Connection::Connect).
inline constexpr int kMaxUnloadWorkers = 64;
inline constexpr uint32_t kMaxStagingSlots = 4096;  // per lane
inline constexpr uint32_t kMaxMessageSlots = 1024;
// The longest an idle worker thread sleeps without an event, where the device's waits can be
// interrupted (Engine::Start); it only bounds a wake-up the device would miss.
inline constexpr absl::Duration kIdleWait = absl::Seconds(1);

struct EngineOptions {
  // Threads (or PollOnce slices) serving connections; a multiple of the device's ports when it
  // has fewer ports than this.
  int unload_workers = 1;
  // Staging lanes per connection (1..8), each a staging QP served by its own worker; more
  // lanes than workers share workers. Both ends of a connection must agree.
  int staging_lanes = 1;
  // Staged writes land in a pool per worker (receive_pool.h, docs/engine.md "The staging
  // pool") shared by the staging QPs of every lane it serves, one buffer of
  // staging_slot_bytes per staged write. A lane keeps min_staging_credits (1..staging_slots)
  // of them for its peer's writes, plus one for an ack; a busy one borrows up to
  // staging_slots from the worker's shared_staging_buffers, which also back the acks of this
  // side's own writes in flight. A worker's pool has max_connections_per_worker x
  // staging_lanes x (min_staging_credits + 1) + shared_staging_buffers buffers, at most what
  // the device's SRQ holds; only buffers ever posted are touched.
  uint32_t staging_slots = 64;             // unloaded writes in flight per lane, at most
  uint32_t staging_slot_bytes = 16 << 10;  // header + payload; larger writes go offload
  // 2: a client doing one write at a time may find its previous write's ack still on the way
  // (its answer overtook it on the main QP) and still post at once.
  uint32_t min_staging_credits = 2;
  uint32_t shared_staging_buffers = 256;
  bool huge_pages = true;  // try 2 MiB pages for the staging pools
  // The device models a node's memory (the simulated fabric): memory asked for on huge pages
  // counts as huge-page backed (kHugePageBacked), whatever this host gave.
  bool modeled_huge_pages = false;
  // Connections one worker serves at most (1..65536). Its CQ is sized for all of them flushing
  // every work request at once (what a dying peer does), so it can never overrun; beyond it
  // CreateConnection is ResourceExhausted.
  uint32_t max_connections_per_worker = 256;
  // Messages in flight per connection and direction at most: send slots, and the most message
  // credits a connection hands its peer (1..kMaxMessageSlots).
  uint32_t message_slots = 32;
  uint32_t max_message_bytes = 4096;
  // Message receive buffers come from a pool per worker (receive_pool.h) that every
  // connection's main QP shares through one SRQ. A connection starts with, and keeps reserved,
  // min_message_credits (1..message_slots) credits for its peer; a busy one borrows up to
  // message_slots from the worker's shared_message_buffers. A worker's pool has
  // max_connections_per_worker x min_message_credits + shared_message_buffers buffers, at most
  // what the device's SRQ holds (DeviceLimits::max_qp_wr); only buffers ever posted are touched.
  uint32_t min_message_credits = 2;
  uint32_t shared_message_buffers = 64;
  // A server's guard against a peer that sends requests but takes no answers: while
  // message_slots or more of this side's messages wait for the peer's credits, the credits of
  // the peer's delivered messages are held back (their buffers stay posted), so the peer
  // sends nothing more until it takes answers; acks return credits without needing any, so
  // this cannot deadlock as long as only one end of a connection does it. kvserver sets it;
  // a client must not (its own pipelining would starve the server's answers).
  bool throttle_when_backlogged = false;
  // Connections into the same peer device share what their policies learn about it
  // (target_model.h: warm starts, coordinated probes). False: each connection learns alone.
  bool share_target_models = true;
  EngineMetrics* metrics = nullptr;  // optional; must outlive the engine
  // A simulation's checks of the invariants on every connection (invariant_checks.h); must
  // outlive the engine. Null: no checks.
  InvariantChecks* checks = nullptr;
};

// What a peer needs to connect to a Connection: plain data, one text line when encoded.
struct ConnectionInfo {
  rnic::QpAttributes qp;  // main QP: offloaded writes and messages
  // Staging QPs (same device), one per lane: unloaded writes and their acks.
  struct StagingQp {
    uint32_t qp_num = 0;
    uint32_t psn = 0;
  };
  std::vector<StagingQp> staging;
  // Staged writes in flight per lane the peer grants at most, and grants from the start (its
  // staging credits; docs/engine.md, "The staging pool"); its staging buffers' size.
  uint32_t staging_slots = 0;
  uint32_t staging_credits = 0;
  uint32_t slot_bytes = 0;
  uint32_t message_slots = 0;    // message credits the peer may hand out at most
  uint32_t message_credits = 0;  // message credits the peer starts with (1..message_slots)
  uint32_t max_message_bytes = 0;
  // The peer device's translation cache when it described itself (optional on the wire:
  // "translation_cache=full|warming", absent for unknown); a hint for the path policy.
  rnic::TranslationCacheState translation_cache = rnic::TranslationCacheState::kUnknown;
};
std::string EncodeConnectionInfo(const ConnectionInfo& info);
absl::StatusOr<ConnectionInfo> DecodeConnectionInfo(absl::string_view text);

struct WriteResult {
  rnic::WcStatus status = rnic::WcStatus::kSuccess;
  Path path = Path::kOffload;
  absl::Duration latency;  // post to completion as the engine learned of it, on its clock
  bool ok() const { return status == rnic::WcStatus::kSuccess; }
};
using WriteCallback = std::function<void(const WriteResult&)>;

struct WriteOptions {
  // The caller needs this write's completion only eventually, because traffic that follows
  // confirms it (a request behind it whose answer implies the write was placed). The engine
  // may then post it without asking the NIC for a completion (saving the acknowledgment the
  // soft RNIC sends per signaled request) and complete it when it learns of it: a later
  // signaled completion on the connection, or a message from the peer sent after the peer
  // received a later message of ours. Its callback still means visible, only later; every
  // few lazy writes one stays signaled, so at most message_slots / 4 wait at a time and the
  // policy keeps observing latency. Without such traffic a quiet write's callback waits
  // until the connection's next signaled completion.
  bool lazy_completion = false;
};
using SendCallback = std::function<void(rnic::WcStatus)>;
struct SendOptions {
  // Nonzero: the message goes as SEND_WITH_INVALIDATE of this key, a window the peer bound on
  // this connection (BindWindows at the peer). The peer's NIC ends the window as the message
  // arrives: writes of this connection posted after the message are refused through it on
  // both paths, the ones before still land. A key the peer did not bind here fails the
  // connection, as on verbs.
  uint32_t invalidate_rkey = 0;
};
// A memory window (rnic/memory_window.h) of this engine's device to bind on a connection:
// [addr, addr + length) of `region` (registered through Engine::RegisterMemory with kMwBind),
// writable by the connection's peer only.
struct WindowGrant {
  rnic::MemoryWindow* window = nullptr;  // unbound; outlives its binding
  const rnic::MemoryRegion* region = nullptr;
  uint64_t addr = 0;
  uint64_t length = 0;
};
using WindowCallback = std::function<void(absl::Status)>;
// Receives each message; the bytes are valid only during the call.
using MessageHandler = std::function<void(absl::Span<const char>)>;

class Engine;
struct ConnectionState;

class Connection {
 public:
  ~Connection();
  const ConnectionInfo& local_info() const;
  // Connects to the peer; validates that its staging and message parameters are usable.
  absl::Status Connect(const ConnectionInfo& remote);
  void SetMessageHandler(MessageHandler handler);

  // Writes `local` (in a region registered with this engine's device) to [remote_addr,
  // remote_addr + local.length) in the peer region `rkey`. Fails at once (and calls nothing)
  // if the connection is not connected or `local` is larger than the device limit. When the
  // write is posted during the call (it did not wait behind earlier work or a full ring) and
  // `posted_path` is given, the path it took is stored there (the callback reports it too).
  absl::Status Write(const rnic::ScatterGatherEntry& local, uint64_t remote_addr, uint32_t rkey,
                     WriteCallback done, std::optional<Path>* posted_path = nullptr,
                     const WriteOptions& options = WriteOptions());
  // Sends a message of at most max_message_bytes; the bytes are copied before return. Without
  // a callback the message is posted unsignaled (no per-message completion, so no ACK packet
  // on the soft RNIC); its slot comes back with a later signaled completion on the same QP.
  absl::Status Send(absl::Span<const char> message, SendCallback done,
                    const SendOptions& options = {});

  // Posts the writes and messages issued on this connection while the returned Batch lives
  // together when it is destroyed: one doorbell for all (on the soft RNIC, one packet train
  // instead of one sendmsg each), e.g. a value write and the message naming it. Semantics
  // and order are those of the same calls without a batch; only posting waits. Keep a batch
  // short and never wait for this connection's work inside it: nothing it covers is on the
  // wire until it ends. Batches nest; the outermost posts. Must not outlive the Connection.
  class Batch {
   public:
    Batch(Batch&& other) noexcept : state_(other.state_) { other.state_ = nullptr; }
    Batch& operator=(Batch&&) = delete;
    ~Batch();

   private:
    friend class Connection;
    explicit Batch(ConnectionState* state) : state_(state) {}
    ConnectionState* state_;
  };
  Batch BeginBatch();

  // Memory protection (docs/security.md). Binds each window on this connection, writable by
  // the peer only: the NIC admits the peer's offloaded writes through it, and the unload
  // workers its staged writes exactly as the NIC would (the window's key, range and this
  // connection). On return each window's rkey() is its key, valid for the peer once `done`
  // runs with ok, and already for a message this connection sends after the call returned:
  // the binds are posted (one post, one signaled completion) before it on the same send queue,
  // which executes in order, so a peer that learns a key from that message finds it working.
  // A failed bind fails the connection, and `done` gets the error. Fails at once (calls
  // nothing) when the
  // connection is not connected or failed, for a grant without a window or region, and with
  // ResourceExhausted when more than 128 window operations would be in flight.
  absl::Status BindWindows(absl::Span<const WindowGrant> grants, WindowCallback done);
  // Ends the window `rkey` bound on this connection. From the call on, staged writes through
  // it are refused; once `done` runs with ok, no write of the peer through it, on either path,
  // places another byte (the NIC's invalidation completed, and staged writes admitted before
  // the call are in place). Fails at once for a key not bound on this connection. If the
  // connection fails first, `done` gets an error: its windows died with its QPs.
  absl::Status InvalidateWindow(uint32_t rkey, WindowCallback done);
  // Installs a further check of every staged write of this connection (staged_write_check.h):
  // what the application knows and the NIC cannot. Null removes it.
  void SetStagedWriteCheck(std::shared_ptr<const StagedWriteCheck> check);

  // Initiator-side queue state, for tests and debugging: once everything posted has completed,
  // all message slots are free and no send WR is outstanding.
  struct QueueState {
    uint32_t free_message_slots = 0;  // of the connection's own (its reserve)
    uint32_t lent_message_slots = 0;  // borrowed from the worker's shared slots, in use
    uint32_t outstanding_send_wrs = 0;
  };
  QueueState queue_state() const;
  // For tests and debugging: one line of the connection's queues, credits and lanes.
  std::string DebugState() const;

  bool failed() const;
  // Fails the connection now, as a fence against a peer that must no longer change this
  // node's memory: both QPs go to the error state, so the NIC places none of the peer's later
  // writes and delivers none of its messages, and the call returns only after every staged
  // write already being copied into place has landed (none lands after it). Local work
  // completes with kFlushed. Idempotent; any thread.
  void Close();
  // Messages delivered from the peer so far: a peer that sent one has a working data path.
  uint64_t messages_received() const;
  // The application's request on this connection (a message and the peer's answer) took
  // `latency`: told to the path policy (PathPolicy::ObserveRequest). Any thread.
  void ObserveRequest(absl::Duration latency);

 private:
  friend class Engine;
  explicit Connection(std::shared_ptr<ConnectionState> state) : state_(std::move(state)) {}
  std::shared_ptr<ConnectionState> state_;
};

class Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Create(rnic::Device* device,
                                                        const EngineOptions& options);

  // What an engine with `options` can hold, for sizing max_connections_per_worker. Bytes of
  // host memory one connection can make resident at most, whatever its peer does: its reserved
  // staging buffers, outgoing staging headers (for the largest window a peer may grant), and
  // its reserved message buffers and send slots (the transport's own buffers not included).
  static uint64_t MaxConnectionBytes(const EngineOptions& options);
  // Bytes the workers' shared staging buffers, message buffers and send slots can make
  // resident at most.
  static uint64_t SharedBufferBytes(const EngineOptions& options);
  // Connections per worker whose reserved message and staging buffers fit in the device's
  // shared receive queues and whose completions fit in its CQ (Create refuses more).
  static uint32_t MaxConnectionsPerWorker(const EngineOptions& options,
                                          const rnic::DeviceLimits& limits);
  ~Engine();

  // Registers memory with the device and with the engine's validation table, so that unloaded
  // writes are checked against exactly what the NIC checks offloaded ones against.
  absl::StatusOr<std::unique_ptr<rnic::MemoryRegion>> RegisterMemory(void* addr, size_t length,
                                                                     uint32_t access);
  // `role`: kServes for a connection whose peer sends this side requests (a server's admitted
  // client); kRequests for one this side opened to send requests (a cluster node's replication
  // link to a peer node), to which EngineOptions::throttle_when_backlogged does not apply:
  // when both ends of a connection throttle, each can wait for the other's credits forever
  // (two kvservers did, on a state transfer of 20,000 records).
  enum class Role { kServes, kRequests };
  absl::StatusOr<std::unique_ptr<Connection>> CreateConnection(std::unique_ptr<PathPolicy> policy,
                                                               Role role = Role::kServes);

  // Processes whatever completions every worker has; returns how many. Never blocks.
  int PollOnce();
  // For an engine without worker threads (Start not called): processes completions, waiting
  // at most `max_wait` for some when there are none (rnic::WaitForWork); returns how many.
  // Blocks: call it from a thread that may wait, one at a time.
  int Drive(absl::Duration max_wait);
  // Runs each worker on its own thread until Stop() or destruction.
  void Start();
  void Stop();

  // The workers' pooled buffers. Message receive buffers (EngineOptions::min_message_credits):
  // connections holding their reserve, shared buffers lent to busy connections, buffers ever
  // posted (the ones that may be resident) and how many the pools hold; send slots and
  // staging buffers (per lane admitted) likewise. Any thread.
  struct PooledBuffers {
    uint32_t connections = 0;
    uint32_t lent = 0;
    uint32_t touched = 0;
    uint32_t capacity = 0;
    uint32_t registered = 0;       // buffers whose memory is registered with the device
    uint32_t send_slots_lent = 0;  // send slots likewise (send_slot_pool.h)
    uint32_t send_slots_touched = 0;
    uint32_t send_slots_registered = 0;
    uint32_t send_slots_capacity = 0;
    uint32_t staging_lanes = 0;  // staging pools (EngineOptions::min_staging_credits)
    uint32_t staging_lent = 0;
    uint32_t staging_touched = 0;
    uint32_t staging_registered = 0;
    uint32_t staging_capacity = 0;
  };
  PooledBuffers pooled_buffers() const;

  // "2 MiB huge pages" or "4 KiB pages (huge pages unavailable: ...)".
  const std::string& staging_memory() const { return staging_memory_; }
  const Clock& clock() const { return device_->clock(); }
  rnic::Device* device() const { return device_; }
  // What this engine's connections learned about each peer device they write into.
  const TargetModels& target_models() const { return target_models_; }

 private:
  struct Worker;
  friend class Connection;
  Engine(rnic::Device* device, const EngineOptions& options);
  // Create's steps (engine.cc): worker `index` with its pools and a CQ of `cq_entries`.
  absl::Status AddWorker(int index, uint64_t cq_entries);
  // CreateConnection's steps (connection.cc).
  absl::Status CreateQueuePairs(ConnectionState& c);
  absl::Status AllocateBuffers(ConnectionState& c);
  // Takes the connection's reserves in its workers' pools: the peer's first credits.
  absl::Status AdmitToPools(ConnectionState& c);
  // Fills c.local: what the peer needs to connect.
  void DescribeLocal(ConnectionState& c) const;
  // Hands the connection to the workers serving its main QP and lanes.
  void ServeOnWorkers(const std::shared_ptr<ConnectionState>& c);

  // The worker serving lane `k` of a connection whose main QP worker `worker` serves: the
  // next workers on the same port.
  int LaneWorker(int worker, int k) const {
    return (worker + k * ports_) % static_cast<int>(workers_.size());
  }

  rnic::Device* device_;
  // Device ports the workers use (min(port_count, unload_workers)); worker i is on port
  // i % ports_.
  int ports_ = 1;
  EngineOptions options_;
  std::string staging_memory_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::shared_ptr<struct ValidationTable> table_;
  TargetModels target_models_;
  Mutex create_mu_;  // serializes CreateConnection
  uint32_t next_connection_ ABSL_GUARDED_BY(create_mu_) = 0;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

}  // namespace unloadkv::engine

#endif  // UNLOADKV_TRANSPORT_ENGINE_ENGINE_H_
