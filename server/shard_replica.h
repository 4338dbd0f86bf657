// One shard's replica on this node: its arena (registered with the engine), its KvStore, and
// its role in the shard's replica group (docs/cluster.md).
//
// As primary it replicates every write before making it visible: Submit assigns the write a
// sequence number and sends it to every backup link (the value as an engine write into the
// same slot of the backup's mirrored arena, then the REPLICATE record behind it); the write
// commits (becomes visible; its callback runs) once every voting link acknowledged it, in
// sequence order. A link added by state transfer (AddLink) votes on every write submitted
// after it was added. A link that fails stops commits until RemoveLink (after the map dropped
// that backup): no write is acknowledged that a surviving member of the group lacks.
//
// As backup it applies its primary's records in order (Apply), refusing any of an epoch below
// its fence: a deposed primary can never get a write acknowledged by a backup that took over
// or learned of a newer epoch.
//
// With a log (RecoverAndLog), a write also commits only once the replica's log acknowledged it
// under its fsync policy (docs/durability.md).
//
// Thread-safety: every method may be called from any thread. Callbacks (Done, barrier) run
// without the replica's lock held, on engine workers or the calling thread.
#ifndef UNLOADKV_SERVER_SHARD_REPLICA_H_
#define UNLOADKV_SERVER_SHARD_REPLICA_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/replication.pb.h"
#include "server/kv_store.h"
#include "server/log_writer.h"
#include "server/reaper.h"
#include "server/replica_link.h"
#include "server/replica_log.h"
#include "transport/base/clock.h"
#include "transport/base/mapped_memory.h"
#include "transport/base/mutex.h"
#include "transport/base/ring_queue.h"
#include "transport/engine/engine.h"
#include "transport/rnic/memory_region.h"
#include "transport/storage/disk.h"

namespace unloadkv::server {

// Memory protection (docs/security.md): with `windows`, the arena carries no remote right of
// its own; clients write it through grant windows (grant_windows.h) and the attached primary
// through one window over the whole arena bound on its connection (BindMirror). Without, the
// arena is remote-writable through its own key (for measuring what protection costs).
// `on_demoted(shard)` runs (outside the replica's lock) whenever the replica stops being the
// shard's primary or is destroyed as one: what clients were granted must end.
struct ReplicaProtection {
  bool windows = false;
  std::function<void(uint32_t shard)> on_demoted;
};

class ShardReplica : public std::enable_shared_from_this<ShardReplica> {
 public:
  // SPLIT records naming a shard id at or above this are refused (cluster::kMaxShards).
  static constexpr uint32_t kMaxSplitTarget = 4096;
  enum class Role {
    kPrimary,  // serves the shard's keys and replicates to its links
    kBackup,   // applies a primary's records
    kDeposed,  // learned it lost the primary role: serves nothing, awaits removal
  };
  using Done = std::function<void(absl::StatusOr<uint64_t> version)>;
  using Protection = ReplicaProtection;

  // Maps and registers an arena of `arena_bytes` for shard `id`; the replica starts as a
  // backup at epoch 0 holding nothing. ResourceExhausted when the arena cannot be mapped.
  // Links the replica drops are destroyed by `reaper` (which must outlive the replica),
  // never inside their own callbacks. `close_peer(peer)` fails the inbound connection `peer`
  // at once (Connection::Close): the replica fences off a primary it no longer follows, so
  // that none of that primary's one-sided writes lands in this arena afterwards.
  // `address_hint` (nullable): where to ask the kernel to map the arena (MappedMemory).
  // `max_grant_bytes_per_client`: the store's quota per connection (KvStore; 0: none).
  static absl::StatusOr<std::shared_ptr<ShardReplica>> Create(
      engine::Engine* engine, uint32_t id, uint64_t arena_bytes, bool huge_pages, Reaper* reaper,
      std::function<void(uint64_t peer)> close_peer, void* address_hint = nullptr,
      uint64_t max_grant_bytes_per_client = 0, Protection protection = {});
  ~ShardReplica();

  uint32_t id() const { return id_; }
  KvStore& store() { return *store_; }
  uint64_t arena_addr() const { return mr_->address(); }
  uint32_t arena_rkey() const { return mr_->rkey(); }
  const rnic::MemoryRegion& arena_region() const { return *mr_; }
  bool protected_memory() const { return protection_.windows; }
  uint64_t arena_bytes() const { return arena_bytes_; }
  const MappedMemory& memory() const { return *memory_; }
  Role role() const;
  uint64_t epoch() const;

  // The key range the map gives the shard (start inclusive, end exclusive, "" = unbounded).
  void SetRange(const std::string& start, const std::string& end);
  // Whether this replica is the shard's primary and `key` is in its range (one lock).
  bool ServesKey(absl::string_view key) const;
  // Whether [start, end) lies inside the range ("" end = unbounded).
  bool ContainsRange(absl::string_view start, absl::string_view end) const;

  // ---- primary ----
  // Becomes the shard's primary at `epoch`, with no links (every other replica rejoins by
  // state transfer). From backup: its applied state is the shard's state.
  void BecomePrimary(uint64_t epoch);
  // The primary moved to `epoch` by its own map transaction (a membership change): records
  // from now on carry it, and backups adopt it.
  void AdvanceEpoch(uint64_t epoch);
  // Replicates `m` (prepared by this replica's store) and commits it; `done` gets its version,
  // or UNAVAILABLE (outcome unknown) when the replica stepped down before it committed.
  void Submit(KvStore::Mutation m, Done done);
  // `done(OK)` once every voting link confirmed this epoch after the call (a read barrier);
  // at once without links.
  void Barrier(std::function<void(absl::Status)> done);
  // Adds a backup whose shard was just attached (ReplicaLink::Attach, whose answer is
  // `attached`): sends it the committed state (value writes + snapshot records), or, when the
  // backup kept a state this replica's log extends, only the log's records after it (delta
  // catch-up: value writes + live records, from a buffer of their own); then the writes in
  // flight and every new one. Writes commit without it until it acknowledged the transfer;
  // from then on it votes on every new write (so a long transfer does not hold the shard's
  // writes up), and it is caught up once it also acknowledged every write submitted before.
  // Returns the value bytes the transfer sends.
  // `now`: when the transfer begins (Transfers' start).
  uint64_t AddLink(std::shared_ptr<ReplicaLink> link,
                   const proto::AttachResponse& attached = proto::AttachResponse(),
                   absl::Time now = absl::InfinitePast());
  // A state transfer in flight from this primary: a link not yet caught up.
  struct Transfer {
    std::string node;
    uint64_t bytes = 0;       // value bytes the transfer sends (snapshot or delta)
    uint64_t sent_bytes = 0;  // of those, acknowledged by the joiner
    absl::Time started;       // AddLink's `now`
  };
  std::vector<Transfer> Transfers() const;
  // The link holds every committed write and votes on every new one (state transfer done).
  bool CaughtUp(const std::string& node) const;
  // Paces whole-state transfers from this replica: at most `bytes_per_second` value bytes a
  // second over all its links (0: unlimited, the default), measured on `clock` (which must
  // outlive the replica). A transfer sends in requests of up to 256 values; a paced one sends
  // the next when the budget allows, on an acknowledgment or a Tick. Writes meanwhile commit
  // without the joiner (AddLink), so pacing trades the transfer's speed for the clients'.
  void SetTransferRate(uint64_t bytes_per_second, const Clock* clock);
  // `hook` runs (outside the replica's lock, on the thread of a backup's acknowledgment) when
  // a link became caught up, or a hand-over's last write in flight committed: what the
  // cluster's control thread waits for, so it need not wait for its next round.
  void SetProgressHook(std::function<void()> hook);
  // Stops sending to `node` and requiring its acknowledgments; commits what waited only on it.
  void RemoveLink(const std::string& node);
  // A planned hand-over of the primary's role to `to` (ShardInfo::handover_to; "" ends it):
  // while one is under way, new writes are refused ABORTED (they get no seq, so they are never
  // applied, and the SDK retries them) and those in flight go on committing.
  void SetHandingOver(const std::string& to);
  // No write in flight: every one submitted committed or failed.
  bool Drained() const;
  // Backups whose link failed (connection lost, or a record refused): they hold up commits.
  std::vector<std::string> FailedLinks() const;
  std::vector<std::string> LinkNodes() const;
  // The links that voted on record `seq` and acknowledged it: each applied that very record.
  std::vector<std::string> VotersAt(uint64_t seq) const;
  // Leaves the table: as primary, every write not yet committed fails with UNAVAILABLE (its
  // outcome is unknown: a backup may have applied it) and links are closed; as backup, the
  // attached primary's connection is closed.
  void StepDown(const std::string& why);
  // Checks link deadlines (call periodically).
  void Tick();

  // ---- splits (docs/cluster.md, "Splits") ----
  // As primary: puts a SPLIT record for [at, the range's end) into the stream at the next seq
  // (a barrier: it commits once every voting backup applied it, each copying the range into
  // its replica of `new_shard`). From this call on, writes of keys in that range are refused
  // ABORTED (the SDK retries them) until EndSplit. `done` gets the record's seq once it
  // committed, or an error (never under the replica's lock). One split at a time:
  // FAILED_PRECONDITION through `done` while one is under way.
  void BeginSplit(const std::string& at, uint32_t new_shard,
                  std::function<void(absl::StatusOr<uint64_t> seq)> done);
  // Ends BeginSplit's refusal: the map split the range (SetRange now refuses those keys), or
  // the split was given up.
  void EndSplit();
  // Whether a split is under way (BeginSplit without EndSplit).
  bool splitting() const;
  // Copies this replica's committed keys in [start, end) ("" end: unbounded) into `target`, an
  // empty backup of another shard with an arena of the same size: the values at the same
  // offsets, as `target`'s whole state at `seq` of `epoch` (logged as a state when it logs).
  // The range must not change meanwhile (BeginSplit's refusal, or a backup's apply order).
  // Any thread; takes `target`'s lock, not this replica's.
  absl::Status CopyRangeTo(ShardReplica* target, absl::string_view start, absl::string_view end,
                           uint64_t seq, uint64_t epoch);
  // How a backup that applies a SPLIT record finds its replica of the new shard (the node's
  // ShardTable::GetOrCreate). Without, SPLIT records are refused (FAILED_PRECONDITION).
  using SplitTargets = std::function<absl::StatusOr<std::shared_ptr<ShardReplica>>(uint32_t)>;
  void SetSplitTargets(SplitTargets targets);
  // A replica born by a split holds new writes (refused ABORTED, the SDK retries them) after
  // it became primary until ReleaseWrites: until the backups that copied the range with it are
  // linked again (AddLink finds them holding its very state, and sends nothing).
  void HoldWrites(const std::string& why);
  void ReleaseWrites();
  // Born by CopyRangeTo and no write taken since: the seq of its state (0: not).
  uint64_t born_seq() const;
  // As primary: deletes (replicated, logged) up to `max` committed keys outside the range the
  // map gives the shard: what a split left behind. Returns how many it submitted.
  size_t PurgeOutsideRange(size_t max);

  // ---- backup ----
  // Opens the replica as a backup of `req.primary` at `req.epoch`, empty, following the primary
  // on connection `peer` (the connection of a previous primary is closed). ABORTED below the
  // fence; FAILED_PRECONDITION when the arena size differs from the primary's.
  absl::StatusOr<proto::AttachResponse> Attach(const proto::AttachRequest& req, uint64_t peer);
  // Applies records arriving on connection `peer`; ABORTED unless it is the attached primary's.
  // With a log, `reply` runs once the log acknowledged them under its policy (the primary counts
  // a record held only then), or with the log's error; without, at once. Never under the lock.
  using ApplyDone = std::function<void(absl::StatusOr<proto::ReplicateResponse>)>;
  void Apply(const proto::ReplicateRequest& req, uint64_t peer, ApplyDone reply);
  // The same without a log (tests): the answer.
  absl::StatusOr<proto::ReplicateResponse> Apply(const proto::ReplicateRequest& req, uint64_t peer);
  // With a log: waits (at most `limit`, real time; a control thread only) until the log holds
  // every record applied so far. A backup about to take over calls it after raising its fence,
  // so that it never serves a record its own log could still lose. False on timeout.
  bool WaitLogged(absl::Duration limit);
  // Refuses, from now on, records and attaches of epochs below `epoch` (a backup about to take
  // over raises it before its map transaction), and closes the connection of the primary it
  // followed. Never lowers the fence.
  void RaiseFence(uint64_t epoch);
  uint64_t fence() const;

  // Writes submitted and not yet committed.
  size_t pending() const;

  // The key through which the primary attached on connection `peer` (`conn`) writes this
  // backup's mirror: a window over the whole arena bound on that connection (its own until the
  // connection ends; the same primary attaching again on it gets it again). `done` runs once it
  // works. Without windows, the arena's own key at once.
  void BindMirror(const std::shared_ptr<engine::Connection>& conn, uint64_t peer,
                  std::function<void(absl::StatusOr<uint32_t>)> done);
  // For tests and the simulation: the mirror window's key (0: none).
  uint32_t mirror_key() const;

  // ---- durability (docs/durability.md) ----
  // Before the replica serves: replays the log in `dir` on `disk` (not owned, outlives the
  // replica) into the arena and store, then logs every write it commits as primary under
  // `policy`: a write commits only once the log acknowledged it too. DataLoss when the log
  // is corrupt or holds a record the arena cannot take. For a single node's
  // shard, or (cluster mode) for every replica the node creates: a backup logs what it applies
  // and answers its primary only once logged; an attach starts a new state in the log.
  // `own_thread`: the log's writer does its I/O on a thread of its own; false: the caller
  // polls it (PollLog: a simulation, in virtual time).
  absl::Status RecoverAndLog(storage::Disk* disk, const std::string& dir, FsyncPolicy policy,
                             const Clock* clock, ReplicaLog::Recovery* recovery,
                             bool own_thread = true,
                             const ReplicaLog::Options& log_options = ReplicaLog::Options());
  // Without its own thread: one round of the log's I/O (LogWriter::Poll); records acknowledged
  // or failed. Whether records wait for one (LogPending).
  int PollLog();
  bool LogPending() const;
  // As if the process died: the log does no more I/O, not even a last sync (LogWriter::Crash).
  void CrashLog();
  // The log's writer (null without one): its policy, stats and failure.
  const LogWriter* log() const { return log_.get(); }
  // Whether the replica holds a whole state replayed from its log and has not been attached,
  // claimed or promoted since: what a restarted node may serve again if the map still names
  // it (docs/durability.md, "Recovery in a cluster").
  bool recovered() const;
  // The seq of the last record this replica holds (0: none).
  uint64_t last_seq() const;
  // Where the log it recovered ends: (epoch, seq) of its last live record.
  std::pair<uint64_t, uint64_t> recovered_position() const;
  // Empties the replica to claim a shard nobody holds: the store, and the log (an empty state).
  void ClearForClaim();
  // Stops the log (a last sync; records submitted later fail): before another replica of the
  // shard opens the same directory. Blocks for the disk.
  void CloseLog();

 private:
  struct Entry {
    uint64_t seq = 0;
    bool barrier = false;
    // A SPLIT record (a barrier): the new shard's id (0: not one) and the range it copies.
    uint32_t split_shard = 0;
    std::string split_at, split_end;
    std::function<void(absl::StatusOr<uint64_t>)> on_split;  // instead of on_barrier
    KvStore::Mutation mutation;
    Done done;                                     // writes
    std::function<void(absl::Status)> on_barrier;  // barriers
  };
  struct LinkState {
    std::shared_ptr<ReplicaLink> link;
    uint64_t acked = 0;  // highest seq acknowledged
    // Seqs from here on need this link's ack. A link added by AddLink votes only once its
    // transfer is through (StartVotingLocked): until then writes commit without it, and it
    // gets them after the transfer, in order.
    uint64_t votes_from = std::numeric_limits<uint64_t>::max();
    uint64_t transfer_end = 0;      // the transfer is through once acked >= transfer_end (and
                                    // snapshots acked)
    uint64_t caught_at = 0;         // voting: caught up once acked >= caught_at
    uint64_t snapshot_through = 0;  // the seqs a whole-state snapshot holds (acked with it)
    // A paced snapshot (SetTransferRate): what is left to send of it, from snapshot_next, and
    // the live records queued behind it meanwhile (they must follow it: a later record of a
    // key the snapshot also names must be applied after it).
    std::vector<KvStore::Mutation> snapshot;
    size_t snapshot_next = 0;
    bool snapshot_open = false;                      // not all of the snapshot pushed yet
    bool caught_up_told = false;                     // the progress hook heard that it caught up
    uint64_t transfer_bytes = 0, transfer_sent = 0;  // Transfers()
    absl::Time transfer_started;
    std::vector<ReplicaLink::Item> held;
    size_t snapshot_pending = 0;  // snapshot requests not yet acknowledged
    bool failed = false;

    bool voting() const { return votes_from != std::numeric_limits<uint64_t>::max(); }
    // Holds every committed write and votes on every new one (its transfer is done).
    bool caught_up() const { return voting() && acked >= caught_at; }
  };
  // Callbacks collected under mu_, run in order once it is released (Run). A write's outcome
  // is held as its Done and result, not wrapped in another std::function (which allocates).
  class Callbacks {
   public:
    void Write(Done done, absl::StatusOr<uint64_t> result) {
      items_.push_back(Item{std::move(done), std::move(result), nullptr});
    }
    void push_back(std::function<void()> f) {
      items_.push_back(Item{nullptr, uint64_t{0}, std::move(f)});
    }
    void Run() {
      for (Item& i : items_) {
        if (i.other) {
          i.other();
        } else {
          i.done(std::move(i.result));
        }
      }
      items_.clear();
    }

   private:
    struct Item {
      Done done;
      absl::StatusOr<uint64_t> result;
      std::function<void()> other;
    };
    absl::InlinedVector<Item, 4> items_;
  };
  // A delta's values, registered for the link's writes; the link holds it while it lives.
  struct DeltaBuffer {
    std::string bytes;
    std::unique_ptr<rnic::MemoryRegion> mr;  // destroyed first
    ~DeltaBuffer() { mr.reset(); }
  };

  ShardReplica() = default;
  // The replica stopped being the primary (`was_primary`): tell on_demoted. Outside mu_.
  void Demoted(bool was_primary);
  // Hands every link in `links` to the reaper.
  void Retire(std::map<std::string, LinkState>* links);
  // Gives `entry` (a write or a barrier) the next sequence number and sends it to every
  // link; fails it at once (ABORTED, nothing applied) unless this replica is the primary.
  void Append(Entry entry);
  // Requires mu_. The transfers of AddLink onto ls->link: the whole committed state; or the
  // records after the backup's state from the log's `tail` (false, sending nothing, when the
  // backup's history is not this log's or a delta would move more than the state).
  void SendSnapshotLocked(LinkState* ls, uint64_t* bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Pushes the next requests of `ls`'s snapshot while the transfer budget lasts; once all of
  // it is pushed, the live records held behind it. True when it pushed anything.
  bool PushSnapshotLocked(LinkState* ls) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds what the transfer rate allows since the last refill (no-op when unlimited).
  void RefillTransferBudgetLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Pushes `item` to `ls`, or holds it behind a snapshot still being paced.
  void PushLiveLocked(LinkState* ls, ReplicaLink::Item item) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Pushes the live records held behind `ls`'s snapshot, in order, batched as the snapshot is
  // (up to 256 records a request; items of one epoch; a SPLIT record alone), and empties the
  // hold.
  void PushHeldLocked(LinkState* ls) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool SendDeltaLocked(const proto::AttachResponse& attached, std::vector<proto::LogEntry> tail,
                       LinkState* ls, uint64_t* bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Requires mu_. Seqs from..to as requests: `records` (in order) where logged, barriers
  // (NOOP) between them; values copied into `buffer`.
  void PushDeltaLocked(const std::vector<const proto::LogEntry*>& records, uint64_t from,
                       uint64_t to, const std::shared_ptr<DeltaBuffer>& buffer, LinkState* ls)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Requires mu_. The link item that carries `e` to a backup.
  ReplicaLink::Item ItemFor(const Entry& e);
  // Requires mu_. Commits every entry all voting links acknowledged; queues their callbacks.
  void CommitReady(Callbacks* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A link whose transfer is through starts voting: writes from next_seq_ on wait for it,
  // and it is caught up once it acknowledged those before.
  void StartVotingLocked(LinkState* ls) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `bytes`: the transfer's value bytes the acknowledged request carried.
  void OnAck(const std::string& node, uint64_t seq, bool snapshot,
             const absl::StatusOr<proto::ReplicateResponse>& r, uint64_t bytes = 0);
  // The log acknowledged `seq` (or failed it with `st`).
  void OnLogged(uint64_t seq, const absl::Status& st);
  // As backup: the log acknowledged applied record `seq` (0: not a live one), or failed it.
  void NoteLogged(uint64_t seq, const absl::Status& st);
  // Requires mu_. As backup: empties the store and begins a new state in the log.
  void ClearStateLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Requires mu_. The log record of write `e`.
  proto::LogEntry LogEntryFor(const Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Requires mu_. Applies `req`'s records; `to_log` gets the log entries of those applied.
  // `targets`: this node's replicas of the shards `req`'s SPLIT records name.
  using TargetMap = std::map<uint32_t, std::shared_ptr<ShardReplica>>;
  absl::StatusOr<proto::ReplicateResponse> ApplyLocked(const proto::ReplicateRequest& req,
                                                       uint64_t peer,
                                                       std::vector<proto::LogEntry>* to_log,
                                                       const TargetMap& targets = {})
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Requires mu_. A SPLIT record `r` at this replica's epoch: the copy into its target.
  absl::Status ApplySplitLocked(const proto::ReplicationRecord& r, uint64_t epoch,
                                const TargetMap& targets) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes `state` (mutations whose values CopyRangeTo put in the arena) as the whole state at
  // (`seq`, `epoch`): an empty backup becomes one that kept that state (AttachResponse).
  // `values`: the arena the mutations' slots are in.
  absl::Status AdoptState(const std::vector<KvStore::Mutation>& state, const char* values,
                          uint64_t seq, uint64_t epoch);
  // Requires mu_. Whether `key` is in a range BeginSplit refuses.
  bool SplitRefusesLocked(absl::string_view key) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Requires mu_. Whether live record `r` is the one the backup expects next; ends an open
  // state in the log first (`to_log`, nullable).
  absl::Status CheckNextLocked(const proto::ReplicationRecord& r,
                               std::vector<proto::LogEntry>* to_log)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Requires mu_. The log entry of mutation `m` (its value copied from the arena).
  proto::LogEntry EntryOf(const KvStore::Mutation& m, uint64_t seq, proto::LogEntry::Kind kind)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Requires mu_. Submits a state marker (STATE_BEGIN, STATE_END at `seq`) to the log.
  void LogMarker(proto::LogEntry::Kind kind, uint64_t seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Requires mu_. Fails every pending entry (outcome unknown).
  void FailPendingLocked(const std::string& why, Callbacks* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  uint32_t id_ = 0;
  uint64_t arena_bytes_ = 0;
  Reaper* reaper_ = nullptr;
  std::function<void(uint64_t)> close_peer_;
  Protection protection_;
  rnic::Device* device_ = nullptr;
  std::unique_ptr<MappedMemory> memory_;
  std::unique_ptr<rnic::MemoryRegion> mr_;
  std::unique_ptr<KvStore> store_;
  std::unique_ptr<LogWriter> log_;  // set before the replica serves (RecoverAndLog)
  storage::Disk* disk_ = nullptr;   // the log's, and its directory: read for delta catch-up
  std::string log_dir_;
  engine::Engine* engine_ = nullptr;  // registers a delta's value buffer

  mutable Mutex mu_;
  Role role_ ABSL_GUARDED_BY(mu_) = Role::kBackup;
  std::string handing_over_ ABSL_GUARDED_BY(mu_);  // SetHandingOver
  std::string held_ ABSL_GUARDED_BY(mu_);          // HoldWrites' reason ("" : not held)
  // BeginSplit: refusing writes of [split_at_, end_) while split_open_.
  bool split_open_ ABSL_GUARDED_BY(mu_) = false;
  std::string split_at_ ABSL_GUARDED_BY(mu_);
  SplitTargets split_targets_ ABSL_GUARDED_BY(mu_);
  // AdoptState's (seq, epoch): the state a born replica's backups may hold too (born_seq).
  uint64_t born_seq_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t born_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t fence_ ABSL_GUARDED_BY(mu_) = 0;
  std::string start_ ABSL_GUARDED_BY(mu_), end_ ABSL_GUARDED_BY(mu_);
  // primary
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  // Transfer pacing (SetTransferRate): the bytes a snapshot may still send now, refilled at
  // transfer_rate_ a second up to a tenth of a second's worth.
  std::function<void()> progress_hook_ ABSL_GUARDED_BY(mu_);  // SetProgressHook
  uint64_t transfer_rate_ ABSL_GUARDED_BY(mu_) = 0;
  const Clock* transfer_clock_ ABSL_GUARDED_BY(mu_) = nullptr;
  double transfer_budget_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time transfer_refilled_ ABSL_GUARDED_BY(mu_);
  RingQueue<Entry> pending_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, LinkState> links_ ABSL_GUARDED_BY(mu_);
  uint64_t logged_ ABSL_GUARDED_BY(mu_) = 0;     // the log acknowledged every write up to here
  bool recovered_ ABSL_GUARDED_BY(mu_) = false;  // see recovered()
  std::pair<uint64_t, uint64_t> recovered_position_ ABSL_GUARDED_BY(mu_);  // (epoch, seq)
  // The state a backup holds (AttachResponse): its last live record's seq, and its last PUT or
  // DELETE's seq and epoch (check_epoch_ 0: none; a delta can extend the state only when set).
  uint64_t state_seq_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t check_seq_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t check_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  bool kept_ ABSL_GUARDED_BY(mu_) = false;        // attached keeping its state (delta)
  bool log_behind_ ABSL_GUARDED_BY(mu_) = false;  // the log refused a record the store applied
  bool state_open_ ABSL_GUARDED_BY(mu_) = false;  // the log has STATE_BEGIN without STATE_END
  // backup
  uint64_t applied_seq_ ABSL_GUARDED_BY(mu_) = 0;   // 0: no live record yet since the attach
  uint64_t first_seq_ ABSL_GUARDED_BY(mu_) = 0;     // the first live record's, if the snapshot said
  uint64_t primary_peer_ ABSL_GUARDED_BY(mu_) = 0;  // connection of the attached primary
  // The mirror's window and the connection it is bound on (BindMirror).
  std::unique_ptr<rnic::MemoryWindow> mirror_window_ ABSL_GUARDED_BY(mu_);
  uint64_t mirror_peer_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace unloadkv::server

#endif  // UNLOADKV_SERVER_SHARD_REPLICA_H_
