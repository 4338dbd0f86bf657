// Group commit over a shard replica's log, under an fsync policy (docs/durability.md):
//
//   always       a record is acknowledged (its `done` runs OK) only after an fsync covers it;
//                one fsync covers every record submitted while the previous one ran
//   interval:MS  acknowledged once written to the file (the OS cache); an fsync every MS at
//                most, so a power loss loses at most MS of acknowledged records
//   never        acknowledged once written; the OS writes back when it likes
//
// Submit never waits for the disk: it queues. Poll does the I/O (appends what was queued,
// syncs when due, runs the dones); Start runs it on a thread of its own, or a simulation calls
// it from a participant.
//
// Disk errors: the log stops (ReplicaLog). Queued records fail with its error, and so do,
// under `always`, the records written but not synced: they were never acknowledged, and Resume
// cuts them. Under `interval` and `never` those were acknowledged, and Resume keeps them (it
// cuts only a partly written record). While the log is stopped every record submitted fails
// with its error at the next Poll; Poll tries Resume at most once per second.
//
// Thread-safety: Submit, stats and failure from any thread; Poll from one thread at a time
// (Start's, or the caller's when not started). `done` runs on the thread calling Poll (on
// Submit's caller only after Stop), never under the writer's lock: a caller may Submit while
// holding a lock its `done` takes.
#ifndef UNLOADKV_SERVER_LOG_WRITER_H_
#define UNLOADKV_SERVER_LOG_WRITER_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/replica_log.h"
#include "transport/base/clock.h"

namespace unloadkv::server {

struct FsyncPolicy {
  enum class Kind { kAlways, kInterval, kNever };
  Kind kind = Kind::kAlways;
  absl::Duration interval = absl::ZeroDuration();  // kInterval

  // "always", "interval:MS" (1..60000) or "never".
  static absl::StatusOr<FsyncPolicy> Parse(absl::string_view text);
  std::string ToString() const;
};

class LogWriter {
 public:
  using Done = std::function<void(absl::Status)>;
  struct Stats {
    uint64_t records = 0;  // acknowledged
    uint64_t syncs = 0;
    uint64_t failed = 0;  // records whose done reported an error
    uint64_t compactions = 0;
    uint64_t compaction_us = 0;  // time the compactions took, begin to finish
    Stats& operator+=(const Stats& o) {
      records += o.records;
      syncs += o.syncs;
      failed += o.failed;
      compactions += o.compactions;
      compaction_us += o.compaction_us;
      return *this;
    }
  };

  // `clock` (not owned) times `interval` syncs and Resume attempts.
  LogWriter(std::unique_ptr<ReplicaLog> log, FsyncPolicy policy, const Clock* clock);
  ~LogWriter();  // Stop()
  LogWriter(const LogWriter&) = delete;
  LogWriter& operator=(const LogWriter&) = delete;

  // Queues `entry` (seqs increasing, as ReplicaLog wants); `done` runs when the policy
  // acknowledges it, or with the error that stopped the log.
  void Submit(proto::LogEntry entry, Done done);
  // One round of I/O (see above); returns the records it acknowledged or failed. Blocks for
  // the disk.
  int Poll();
  // Runs Poll on a thread of its own, waking for submissions and for `interval` syncs.
  void Start();
  // Stops that thread after a last round, with a final sync under every policy but `never`.
  void Stop();
  // As if the process died (a simulation's crash): no more I/O, not even a last sync, and the
  // queued records' dones never run. Stop does nothing afterwards.
  void Crash();
  // Whether a Poll has work: records queued, or (interval) a sync due.
  bool pending() const;

  const FsyncPolicy& policy() const { return policy_; }
  Stats stats() const;
  absl::Status failure() const;  // OK while the log takes records

 private:
  struct Pending {
    proto::LogEntry entry;
    Done done;
  };
  // After a round: begins compacting the log when it grew enough (ReplicaLog::ShouldCompact)
  // and `may_begin`; finishes a compaction whose state was built. Started, the writer builds
  // the state on a thread of its own (compactor_) and appends meanwhile; driven by its caller,
  // it compacts at once.
  void MaybeCompact(bool may_begin);
  void FinishCompaction();
  void CompactionFailed(const absl::Status& st);
  // The log stopped with `st`: fails what must fail (see above).
  void Stopped(const absl::Status& st, std::vector<Done>* failed);

  std::unique_ptr<ReplicaLog> log_;  // Poll's thread only
  const FsyncPolicy policy_;
  const Clock* const clock_;
  absl::Time last_sync_;       // Poll's thread only
  absl::Time next_resume_;     // Poll's thread only
  std::vector<Done> waiting_;  // `always`: written records' dones, until a sync; Poll's only
  // The compaction begun and not finished (null: none); Poll's thread only, but for `built`
  // and `result`, which compactor_ writes before it sets compaction_built_.
  struct Running {
    ReplicaLog::CompactionPlan plan;
    absl::Status built;
    ReplicaLog::Compaction result;
    absl::Time start;
  };
  std::unique_ptr<Running> compaction_;
  std::thread compactor_;
  bool unsynced_ = false;  // records written since the last sync; Poll's thread only

  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Pending> queue_;  // guarded by mu_
  absl::Status failure_;       // guarded by mu_
  Stats stats_;                // guarded by mu_
  // `interval`: when the written records' sync is due (InfiniteFuture while all are synced).
  absl::Time sync_due_ = absl::InfiniteFuture();  // guarded by mu_
  bool stop_ = false;                             // guarded by mu_
  bool crashed_ = false;                          // guarded by mu_
  bool compaction_built_ = false;                 // compactor_ is done; guarded by mu_
  std::thread thread_;
};

}  // namespace unloadkv::server

#endif  // UNLOADKV_SERVER_LOG_WRITER_H_
