// A shard replica's log on disk (docs/durability.md): the records it committed, in seq order,
// in segment files "<seq of the first record, 20 digits>.log" in one directory, each record
// framed with its length and CRC (log_frame.h).
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
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/log.pb.h"
#include "transport/storage/disk.h"

namespace unloadkv::server {

class ReplicaLog {
 public:
  struct Options {
    uint64_t segment_bytes = uint64_t{64} << 20;  // a new segment starts past this size
  };
  struct Recovery {
    uint64_t segments = 0;
    uint64_t records = 0;
    uint64_t bytes = 0;  // of the records replayed
    uint64_t last_seq = 0;
    uint64_t last_epoch = 0;
    uint64_t torn_bytes = 0;  // cut off the last segment's end
    std::string torn_file;    // that segment's path; empty when nothing was cut
    std::string torn_why;     // what the tail held: "incomplete record", "zeros", ...
  };
  // Called with each record in seq order; an error stops recovery and Open returns it.
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

  // Appends `entry`, whose seq must exceed every earlier one (InvalidArgument otherwise,
  // changing nothing). Not durable until Sync.
  absl::Status Append(const proto::LogEntry& entry);
  // Makes every record appended so far durable.
  absl::Status Sync();
  // After a failure: cuts the current segment back (to the last record written when
  // `keep_written`, else to the last sync) and reopens it. OK when the log can take records
  // again; they go on after last_seq(). After a failed Sync, what was written since the last
  // good one may be gone from the OS's cache too (Linux drops pages it could not write back):
  // `keep_written` keeps the file's bytes, not that promise.
  absl::Status Resume(bool keep_written);

  uint64_t last_seq() const { return last_seq_; }
  uint64_t synced_seq() const { return synced_seq_; }
  // The error that stopped the log, OK while it works.
  const absl::Status& failure() const { return failure_; }
  // Segment files now (for tests and status pages).
  uint64_t segments() const { return segments_; }

 private:
  ReplicaLog(storage::Disk* disk, std::string dir, const Options& options)
      : disk_(disk), dir_(std::move(dir)), options_(options) {}
  absl::Status Recover(const Replay& replay, Recovery* recovery);
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
  absl::Status failure_;
  std::string frame_;  // reused buffer
};

// "00000000000000000042.log" for seq 42.
std::string SegmentName(uint64_t first_seq);

}  // namespace unloadkv::server

#endif  // UNLOADKV_SERVER_REPLICA_LOG_H_
