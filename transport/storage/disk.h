// The files a durable replica keeps (docs/durability.md), behind an interface: the same log code
// runs on a real file system (PosixDisk) and, in a simulation, on a disk that loses what was not
// synced when its node crashes.
//
// Errors: ResourceExhausted when the device is full (ENOSPC, EDQUOT), Unavailable on an I/O
// error (EIO) or a read-only file system, NotFound for a missing file, Internal otherwise; each
// message names the path and the system's reason.
//
// Thread-safety: a Disk may be used from any thread; one WritableFile from one thread at a time.
#ifndef UNLOADKV_TRANSPORT_STORAGE_DISK_H_
#define UNLOADKV_TRANSPORT_STORAGE_DISK_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace unloadkv::storage {

// A file open for appending. Appended bytes may sit in the operating system's cache: they are
// durable only once a later Sync returned OK.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  // Appends all of `data` at the end. On error some prefix of it may have been written: the
  // caller must not append to the file again (reopen and truncate to what it knows is good).
  virtual absl::Status Append(absl::string_view data) = 0;
  // Makes every byte appended before the call durable (fdatasync). Blocks for the device: call
  // it from a thread that may wait.
  virtual absl::Status Sync() = 0;
  // Bytes in the file: its size when opened plus what was appended since.
  virtual uint64_t size() const = 0;
};

class Disk {
 public:
  virtual ~Disk() = default;
  // Opens `path` for appending at its end, creating it (empty) if it does not exist.
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> OpenForAppend(const std::string& path) = 0;
  // The whole content of `path`.
  virtual absl::StatusOr<std::string> ReadAll(const std::string& path) = 0;
  // Up to `length` bytes of `path` from byte `offset` on: fewer only at the file's end.
  virtual absl::StatusOr<std::string> ReadAt(const std::string& path, uint64_t offset,
                                             uint64_t length) = 0;
  // The names (not paths) of the regular files in `dir`, sorted.
  virtual absl::StatusOr<std::vector<std::string>> List(const std::string& dir) = 0;
  // The names of the directories in `dir`, sorted.
  virtual absl::StatusOr<std::vector<std::string>> ListDirs(const std::string& dir) = 0;
  // Cuts `path` to its first `size` bytes and makes that durable.
  virtual absl::Status Truncate(const std::string& path, uint64_t size) = 0;
  virtual absl::Status Remove(const std::string& path) = 0;
  // Renames `from` to `to` (same directory), replacing `to`; durable once the directory is
  // synced (until then a crash may leave either name, or, on MemoryDisk, neither).
  virtual absl::Status Rename(const std::string& from, const std::string& to) = 0;
  // Creates directory `path` and any missing parents; OK if it exists.
  virtual absl::Status CreateDirs(const std::string& path) = 0;
  // Makes the creations and removals of files in `dir` durable.
  virtual absl::Status SyncDir(const std::string& dir) = 0;
};

}  // namespace unloadkv::storage

#endif  // UNLOADKV_TRANSPORT_STORAGE_DISK_H_
