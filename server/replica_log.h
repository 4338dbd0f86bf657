// A shard replica's log on disk (docs/durability.md): the records it committed, in seq order,
// in segment files "<number, 20 digits>.log" in one directory (a segment's number is its first
// record's seq, or one more than the previous segment's if that is larger), each record
// framed with its length and CRC (log_frame.h).
//
// States (proto/log.proto): STATE_BEGIN starts a segment "<number>.base.log", and recovery
// starts at the last of those; the segments before it are removed once the state's STATE_END
// is synced (or at the next recovery). Entries must come in order: STATE_BEGIN, STATE...,
// STATE_END, then live records with seqs after STATE_END's; anything else is refused
// (InvalidArgument, changing nothing) and, found at recovery, is DataLoss. A state cut short
// (by a crash, or by a disk error and Resume) leaves the log refusing everything but a new
// STATE_BEGIN (FailedPrecondition): its replica holds no state it may build on.
//
// Recovery (Open) reads every segment in order and hands each record to the caller. The end
// of the last segment may be torn by a crash (a frame cut short, a frame whose bytes only
// partly reached the disk, maybe followed by zeros, or zeros where the file system had extended
// it): that tail is cut off
// and reported. Anything else that does not decode, anywhere, is DataLoss naming the file and
// the byte offset, and the log refuses to open: no record after a corrupt one is silently
// dropped.
//
// Failure: after an Append or Sync error (disk full: ResourceExhausted; I/O error:
// Unavailable) every further Append and Sync returns that error until Resume succeeds. Resume
// cuts the segment back to the end of the last record whose Append succeeded (a failed
// Append may leave part of its record), or further, to what the last Sync covered.
//
// Thread-safety: one thread at a time (the caller serializes; a group-committing caller syncs
// from its own thread while holding its lock).
#ifndef UNLOADKV_SERVER_REPLICA_LOG_H_
#define UNLOADKV_SERVER_REPLICA_LOG_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/log.pb.h"
#include "transport/storage/disk.h"

namespace unloadkv::server {

class ApplyThread;

class ReplicaLog {
 public:
  struct Options {
    uint64_t segment_bytes = uint64_t{64} << 20;  // a new segment starts past this size
    // Compaction (ShouldCompact): once the log since its last state holds more than this many
    // bytes, and more than twice that state's; 0: never.
    uint64_t compact_bytes = uint64_t{256} << 20;
  };
  struct Compaction {
    uint64_t keys = 0;        // in the new state
    uint64_t bytes_read = 0;  // of the log, twice
    uint64_t bytes_written = 0;
    uint64_t segments_removed = 0;
  };
  struct Recovery {
    uint64_t segments = 0;
    uint64_t records = 0;
    uint64_t bytes = 0;  // of the records replayed
    uint64_t last_seq = 0;
    uint64_t last_epoch = 0;     // of the last live record (0: none)
    bool state = false;          // the records begin with a state (STATE_BEGIN)
    uint64_t state_records = 0;  // its STATE records
    // False when that state has no STATE_END: the replica holds nothing it may serve.
    bool complete = true;
    uint64_t obsolete_segments = 0;  // removed: before the last state's segment
    uint64_t torn_bytes = 0;         // cut off the last segment's end
    std::string torn_file;           // that segment's path; empty when nothing was cut
    std::string torn_why;            // what the tail held: "incomplete record", "zeros", ...
  };
  // Called with each record in seq order, on a thread of its own while the next records are
  // read and checked (ApplyThread); an error stops recovery and Open returns it. Everything
  // it did is visible to Open's caller when Open returns.
  using Replay = std::function<absl::Status(const proto::LogEntry&)>;

  // Opens the log in `dir` (created if missing) on `disk` (not owned, outlives the log),
  // replaying what it holds. `recovery` (nullable) gets what was found.
  static absl::StatusOr<std::unique_ptr<ReplicaLog>> Open(storage::Disk* disk,
                                                          const std::string& dir,
                                                          const Options& options,
                                                          const Replay& replay,
                                                          Recovery* recovery = nullptr);
  ReplicaLog(const ReplicaLog&) = delete;
  ReplicaLog& operator=(const ReplicaLog&) = delete;

  // Appends `entry`, in the order above (a live record's seq must exceed every earlier one);
  // InvalidArgument otherwise, changing nothing. Not durable until Sync.
  absl::Status Append(const proto::LogEntry& entry);
  // Makes every record appended so far durable.
  absl::Status Sync();
  // Whether the log has grown enough since its last state to compact (Options::compact_bytes).
  bool ShouldCompact() const;
  // Compaction: writes every key's last PUT since the last state (deletes dropped) as a new
  // state, into a segment written aside ("<n>.base.log.tmp"), synced and renamed into place;
  // the older segments are then removed. It runs in three steps so that appends need not wait
  // for the middle one:
  //   BeginCompaction (the log's thread): syncs, closes the current segment and opens a new
  //     one, "<n>.log", for the appends that follow; the plan names the closed segments (from
  //     the last state on) and the state's seq, last_seq() now.
  //   BuildCompaction (any thread, the log's appends going on): reads the plan's segments
  //     (twice) and writes and syncs the new state aside.
  //   FinishCompaction (the log's thread): puts the state in place as "<n>.base.log" (it sorts
  //     before "<n>.log") and removes the segments it replaces; or, when the build failed, the
  //     log failed or a state transfer began meanwhile (STATE_BEGIN), removes the aside file
  //     and returns why, the log as it was, and the next attempt waits until the log grew by
  //     compact_bytes again.
  // A crash at any step leaves the old segments or the new state whole, and the appends after
  // them. Compact runs the three in a row.
  struct CompactionPlan {
    uint64_t number = 0;                // of the new state's segment and of the appends' segment
    uint64_t last_seq = 0;              // the state's
    uint64_t since_bytes = 0;           // live bytes in the compacted segments after their state
    uint64_t generation = 0;            // STATE_BEGINs appended before it (none may come meanwhile)
    std::vector<std::string> segments;  // compacted, in order
    std::string tmp;                    // path the state is written to
  };
  absl::StatusOr<CompactionPlan> BeginCompaction();
  // Touches only the disk and the plan's files: safe beside the log's other calls.
  absl::Status BuildCompaction(const CompactionPlan& plan, Compaction* out) const;
  absl::Status FinishCompaction(const CompactionPlan& plan, absl::Status built, Compaction* out);
  absl::Status Compact(Compaction* out);
  // After a failure: cuts the current segment back (to the last record written when
  // `keep_written`, else to the last sync) and reopens it. OK when the log can take records
  // again; they go on after last_seq(). After a failed Sync, what was written since the last
  // good one may be gone from the OS's cache too (Linux drops pages it could not write back):
  // `keep_written` keeps the file's bytes, not that promise.
  absl::Status Resume(bool keep_written);

  // The live records with seqs from `from_seq` on in the log in `dir` (from its last state),
  // in order, up to the first record that does not decode (the end being written). For a
  // primary sending a backup the records it lacks while the log's own thread appends: it
  // reads the files, never the ReplicaLog object.
  static absl::StatusOr<std::vector<proto::LogEntry>> ReadLive(storage::Disk* disk,
                                                               const std::string& dir,
                                                               uint64_t from_seq);

  uint64_t last_seq() const { return last_seq_; }
  uint64_t synced_seq() const { return synced_seq_; }
  // The error that stopped the log, OK while it works.
  const absl::Status& failure() const { return failure_; }
  // Segment files now (for tests and status pages).
  uint64_t segments() const { return segments_; }

 private:
  ReplicaLog(storage::Disk* disk, std::string dir, const Options& options)
      : disk_(disk), dir_(std::move(dir)), options_(options) {}
  struct Segment {
    uint64_t number;
    bool base;  // begins with STATE_BEGIN
    std::string name;
  };
  // The segments in `dir` by number; *first: the last one that begins a state (0: none).
  static absl::StatusOr<std::vector<Segment>> ListSegments(storage::Disk* disk,
                                                           const std::string& dir, size_t* first);
  absl::Status Recover(const Replay& replay, Recovery* recovery);
  // Replays one segment (`last`: the log's last, whose torn tail is cut).
  absl::Status ReplaySegment(const Segment& segment, bool last, ApplyThread* apply,
                             Recovery* recovery, bool* in_state);
  // Whether `e` may follow what *in_state and *last_seq describe (`base_start`: it is the
  // first record of a base segment); if so, advances them.
  static absl::Status CheckOrder(const proto::LogEntry& e, bool base_start, bool* in_state,
                                 uint64_t* last_seq);
  // Removes the segments before the current state's (best effort).
  void RemoveObsolete();
  // BuildCompaction's passes over `segments` of `dir`: `each(entry)` in order.
  absl::Status ForEachRecord(const std::vector<std::string>& segments,
                             const std::function<void(const proto::LogEntry&)>& each,
                             uint64_t* bytes) const;
  // BuildCompaction's second half: writes the state of `latest` to plan.tmp and syncs it.
  absl::Status WriteState(const CompactionPlan& plan, const std::map<std::string, uint64_t>& latest,
                          Compaction* out) const;
  absl::Status OpenSegment(const std::string& name);
  absl::Status Fail(absl::Status st);

  storage::Disk* const disk_;
  const std::string dir_;
  const Options options_;
  std::string segment_;  // the current segment's path
  std::unique_ptr<storage::WritableFile> file_;
  uint64_t synced_size_ = 0;   // of the current segment, at the last Sync
  uint64_t written_size_ = 0;  // of the current segment, after the last whole record
  uint64_t last_seq_ = 0;
  uint64_t synced_seq_ = 0;
  uint64_t segments_ = 0;
  uint64_t last_number_ = 0;        // the current segment's number
  uint64_t base_number_ = 0;        // the number of the segment the current state began in
  uint64_t obsolete_ = 0;           // segments before it not yet removed
  bool in_state_ = false;           // between STATE_BEGIN and STATE_END
  bool state_broken_ = false;       // a state was cut short: only STATE_BEGIN is taken
  uint64_t since_state_bytes_ = 0;  // appended (or recovered) after the last state's end
  uint64_t state_bytes_ = 0;        // of the last state's records
  uint64_t compact_after_ = 0;      // since_state_bytes_ a compaction waits for
  uint64_t state_generation_ = 0;   // STATE_BEGINs appended
  absl::Status failure_;
  std::string frame_;  // reused buffer
};

// "00000000000000000042.log" for number 42.
std::string SegmentName(uint64_t number);
// "00000000000000000042.base.log": a segment that begins with a state.
std::string BaseSegmentName(uint64_t number);

}  // namespace unloadkv::server

#endif  // UNLOADKV_SERVER_REPLICA_LOG_H_
