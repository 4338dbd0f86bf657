// A disk in memory that forgets, when its node crashes, what was not synced: for tests and the
// whole-cluster simulation (docs/durability.md), as FoundationDB's simulated disk does.
//
// Each file keeps the bytes a Sync made durable and the bytes appended since. Crash() keeps the
// durable bytes of every file and, of the rest, a seeded choice per file: all of them, none,
// or a prefix (a torn write), that prefix sometimes followed by zeros up to the next 4 KiB (a
// file system that had extended the file). A file created since its directory's last SyncDir
// disappears. Truncate and Remove are durable at once (PosixDisk's Truncate syncs; Remove is
// rare enough to be treated so).
//
// Faults: set_capacity(bytes) fails appends past that many bytes in all (ResourceExhausted,
// with the part that fits written, as a short write leaves it); set_io_error(true) fails every
// Append and Sync (Unavailable). HaltAt arms a crash in the middle of a sequence of writes (a
// compaction's, say): once a file whose path ends with `trigger` is opened for append, the
// `nth` operation of kind `op` from then on halts the disk. The halting operation and every
// later one fail (Unavailable) and change nothing, as if the process had died just before it;
// the caller then crashes the node (and, for a power loss, the disk).
//
// Thread-safety: all members may be called from any thread (one lock).
#ifndef UNLOADKV_TRANSPORT_STORAGE_MEMORY_DISK_H_
#define UNLOADKV_TRANSPORT_STORAGE_MEMORY_DISK_H_

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "transport/base/mutex.h"
#include "transport/storage/disk.h"

namespace unloadkv::storage {

class MemoryDisk : public Disk {
 public:
  explicit MemoryDisk(uint64_t seed = 1) : rng_(seed) {}

  absl::StatusOr<std::unique_ptr<WritableFile>> OpenForAppend(const std::string& path) override;
  absl::StatusOr<std::string> ReadAll(const std::string& path) override;
  absl::StatusOr<std::string> ReadAt(const std::string& path, uint64_t offset,
                                     uint64_t length) override;
  absl::StatusOr<std::vector<std::string>> List(const std::string& dir) override;
  absl::StatusOr<std::vector<std::string>> ListDirs(const std::string& dir) override;
  absl::Status Truncate(const std::string& path, uint64_t size) override;
  absl::Status Remove(const std::string& path) override;
  absl::Status Rename(const std::string& from, const std::string& to) override;
  absl::Status CreateDirs(const std::string& path) override;
  absl::Status SyncDir(const std::string& dir) override;

  // The node lost power: unsynced bytes go as described above. Files open before stay usable
  // objects but write to nothing (a crashed process's descriptors).
  void Crash();
  void set_capacity(uint64_t bytes);
  void set_io_error(bool on);

  enum class Op { kOpen, kAppend, kSync, kRename, kSyncDir, kRemove, kTruncate };
  // Arms a halt (see above); replaces one armed before. Crash and Revive disarm it.
  void HaltAt(const std::string& trigger, Op op, uint64_t nth);
  // Whether an armed halt struck.
  bool halted() const;
  // Takes writes again (a crashed process that restarts, its page cache intact).
  void Revive();
  // Bytes held, durable or not.
  uint64_t used() const;

 private:
  class File;
  struct Data {
    std::string durable;
    std::string pending;        // appended since the last Sync
    bool name_durable = false;  // its directory was synced since it was created
    uint64_t generation = 0;    // of the disk's crashes when opened (stale handles write nothing)
  };
  absl::Status AppendTo(const std::string& path, uint64_t generation, absl::string_view data,
                        uint64_t* size);
  absl::Status SyncFile(const std::string& path, uint64_t generation);
  // Counts `op` toward an armed halt; an error once the disk halted (at this op or before).
  absl::Status Halting(Op op, const std::string& path) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable Mutex mu_;
  std::map<std::string, Data> files_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> dirs_ ABSL_GUARDED_BY(mu_);
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
  uint64_t crashes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t capacity_ ABSL_GUARDED_BY(mu_) = UINT64_MAX;
  bool io_error_ ABSL_GUARDED_BY(mu_) = false;
  struct Halt {
    std::string trigger;
    Op op = Op::kOpen;
    uint64_t nth = 0;
    bool triggered = false;  // the trigger file was opened
    uint64_t seen = 0;       // ops of kind `op` since
    bool armed = false;
    bool halted = false;
  };
  Halt halt_ ABSL_GUARDED_BY(mu_);
};

}  // namespace unloadkv::storage

#endif  // UNLOADKV_TRANSPORT_STORAGE_MEMORY_DISK_H_
