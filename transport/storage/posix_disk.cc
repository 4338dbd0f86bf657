#include "transport/storage/posix_disk.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace unloadkv::storage {

absl::Status FileError(absl::string_view what, const std::string& path, int err) {
  const std::string message = absl::StrCat(what, " ", path, ": ", std::strerror(err));
  switch (err) {
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      return absl::ResourceExhaustedError(message);
    case EIO:
    case EROFS:
      return absl::UnavailableError(message);
    case ENOENT:
      return absl::NotFoundError(message);
    default:
      return absl::InternalError(message);
  }
}

namespace {

// An open descriptor, closed on destruction.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  const int fd_;
};

class PosixFile : public WritableFile {
 public:
  PosixFile(std::string path, int fd, uint64_t size)
      : path_(std::move(path)), fd_(fd), size_(size) {}

  absl::Status Append(absl::string_view data) override {
    while (!data.empty()) {
      const ssize_t n = write(fd_.get(), data.data(), data.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        return FileError("appending to", path_, errno);
      }
      data.remove_prefix(static_cast<size_t>(n));
      size_ += static_cast<uint64_t>(n);
    }
    return absl::OkStatus();
  }

  absl::Status Sync() override {
    if (fdatasync(fd_.get()) != 0) return FileError("syncing", path_, errno);
    return absl::OkStatus();
  }

  uint64_t size() const override { return size_; }

 private:
  const std::string path_;
  const Fd fd_;
  uint64_t size_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<WritableFile>> PosixDisk::OpenForAppend(const std::string& path) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return FileError("opening", path, errno);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return FileError("reading the size of", path, err);
  }
  return std::unique_ptr<WritableFile>(new PosixFile(path, fd, static_cast<uint64_t>(st.st_size)));
}

absl::StatusOr<std::string> PosixDisk::ReadAll(const std::string& path) {
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return FileError("opening", path, errno);
  std::string out;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = read(fd.get(), buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      return FileError("reading", path, errno);
    }
    if (n == 0) return out;
    out.append(buf, static_cast<size_t>(n));
  }
}

absl::StatusOr<std::string> PosixDisk::ReadAt(const std::string& path, uint64_t offset,
                                              uint64_t length) {
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return FileError("opening", path, errno);
  std::string out(length, '\0');
  uint64_t got = 0;
  while (got < length) {
    const ssize_t n =
        pread(fd.get(), out.data() + got, length - got, static_cast<off_t>(offset + got));
    if (n < 0) {
      if (errno == EINTR) continue;
      return FileError("reading", path, errno);
    }
    if (n == 0) break;  // the file's end
    got += static_cast<uint64_t>(n);
  }
  out.resize(got);
  return out;
}

absl::StatusOr<std::vector<std::string>> PosixDisk::List(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return FileError("listing", dir, errno);
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    if (e->d_type == DT_REG) names.emplace_back(e->d_name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<std::vector<std::string>> PosixDisk::ListDirs(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return FileError("listing", dir, errno);
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (e->d_type == DT_DIR && name != "." && name != "..") names.push_back(name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

absl::Status PosixDisk::Truncate(const std::string& path, uint64_t size) {
  Fd fd(open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (fd.get() < 0) return FileError("opening", path, errno);
  if (ftruncate(fd.get(), static_cast<off_t>(size)) != 0) {
    return FileError("truncating", path, errno);
  }
  if (fdatasync(fd.get()) != 0) return FileError("syncing", path, errno);
  return absl::OkStatus();
}

absl::Status PosixDisk::Remove(const std::string& path) {
  if (unlink(path.c_str()) != 0) return FileError("removing", path, errno);
  return absl::OkStatus();
}

absl::Status PosixDisk::Rename(const std::string& from, const std::string& to) {
  if (rename(from.c_str(), to.c_str()) != 0) return FileError("renaming", from, errno);
  return absl::OkStatus();
}

absl::Status PosixDisk::CreateDirs(const std::string& path) {
  for (size_t end = path.find('/', 1);; end = path.find('/', end + 1)) {
    const std::string prefix = path.substr(0, end);
    if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return FileError("creating directory", prefix, errno);
    }
    if (end == std::string::npos) return absl::OkStatus();
  }
}

absl::Status PosixDisk::SyncDir(const std::string& dir) {
  Fd fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) return FileError("opening directory", dir, errno);
  if (fsync(fd.get()) != 0) return FileError("syncing directory", dir, errno);
  return absl::OkStatus();
}

}  // namespace unloadkv::storage
