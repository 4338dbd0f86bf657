// Disk on the local file system (POSIX calls; fdatasync for Sync).
#ifndef UNLOADKV_TRANSPORT_STORAGE_POSIX_DISK_H_
#define UNLOADKV_TRANSPORT_STORAGE_POSIX_DISK_H_

#include <memory>
#include <string>
#include <vector>

#include "transport/storage/disk.h"

namespace unloadkv::storage {

class PosixDisk : public Disk {
 public:
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
};

// The status for a failed system call on `path` with `err` (an errno value), as disk.h maps them.
absl::Status FileError(absl::string_view what, const std::string& path, int err);

}  // namespace unloadkv::storage

#endif  // UNLOADKV_TRANSPORT_STORAGE_POSIX_DISK_H_
