// Applies a log's records on a thread of its own while the caller reads and checks the next
// ones: recovery reads, checks (CRC, order) and decodes on one core and copies the values into
// the arena (first-touch page faults: most of its cost) on the other (docs/durability.md).
//
// Records are applied in the order pushed, each exactly once, until `apply` fails; its first
// error is returned by every later Push and by Finish, and nothing after it is applied. At most
// kMaxQueuedBytes of records (plus one record) wait, so memory stays bounded however large
// the log is.
//
// Thread-safety: Push and Finish from one thread (the reader's). `apply` runs on the
// applier's thread, one record at a time; everything it did is visible to the caller when
// Finish returns. The destructor finishes (waits for what was pushed).
#ifndef UNLOADKV_SERVER_APPLY_THREAD_H_
#define UNLOADKV_SERVER_APPLY_THREAD_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "proto/log.pb.h"

namespace unloadkv::server {

class ApplyThread {
 public:
  using Apply = std::function<absl::Status(const proto::LogEntry&)>;
  static constexpr uint64_t kMaxQueuedBytes = uint64_t{16} << 20;

  // `apply` (not owned) must outlive this object.
  explicit ApplyThread(const Apply& apply);
  ~ApplyThread();
  ApplyThread(const ApplyThread&) = delete;
  ApplyThread& operator=(const ApplyThread&) = delete;

  // Queues `entry` (`bytes`: its size on disk, for the bound); waits while the queue is full.
  // Returns the applier's first error, if any (the entry is then dropped).
  absl::Status Push(proto::LogEntry entry, uint64_t bytes);
  // Waits until every pushed record was applied (or one failed); the first error or OK.
  // Push must not be called afterwards.
  absl::Status Finish();

 private:
  static constexpr size_t kBatch = 64;  // records handed over at once
  void Run();
  void Hand();           // hands batch_ to the applier; waits while the queue is full
  absl::Status Error();  // error_, copied under mu_

  const Apply& apply_;
  std::vector<proto::LogEntry> batch_;  // the reader's, not yet handed over
  uint64_t batch_bytes_ = 0;

  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<std::pair<std::vector<proto::LogEntry>, uint64_t>> queue_;  // guarded by mu_
  uint64_t queued_bytes_ = 0;                                            // guarded by mu_
  absl::Status error_;                                                   // guarded by mu_
  bool done_ = false;      // no more pushes; guarded by mu_
  bool finished_ = false;  // Finish ran; the reader's
  std::thread thread_;
};

}  // namespace unloadkv::server

#endif  // UNLOADKV_SERVER_APPLY_THREAD_H_
