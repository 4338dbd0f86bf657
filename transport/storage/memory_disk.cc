#include "transport/storage/memory_disk.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace unloadkv::storage {

// A handle onto one file of the disk; writes nothing once the disk crashed after it opened.
class MemoryDisk::File : public WritableFile {
 public:
  File(MemoryDisk* disk, std::string path, uint64_t generation, uint64_t size)
      : disk_(disk), path_(std::move(path)), generation_(generation), size_(size) {}
  absl::Status Append(absl::string_view data) override {
    return disk_->AppendTo(path_, generation_, data, &size_);
  }
  absl::Status Sync() override { return disk_->SyncFile(path_, generation_); }
  uint64_t size() const override { return size_; }

 private:
  MemoryDisk* const disk_;
  const std::string path_;
  const uint64_t generation_;
  uint64_t size_;
};

namespace {
std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}
}  // namespace

absl::Status MemoryDisk::Halting(Op op, const std::string& path) {
  if (halt_.armed && !halt_.halted && halt_.triggered && op == halt_.op &&
      ++halt_.seen == halt_.nth) {
    halt_.halted = true;
  }
  if (halt_.halted) return absl::UnavailableError(absl::StrCat(path, ": the process died"));
  if (halt_.armed && op == Op::kOpen && absl::EndsWith(path, halt_.trigger)) halt_.triggered = true;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<WritableFile>> MemoryDisk::OpenForAppend(const std::string& path) {
  MutexLock l(&mu_);
  if (absl::Status st = Halting(Op::kOpen, path); !st.ok()) return st;
  if (dirs_.count(DirOf(path)) == 0) {
    return absl::NotFoundError(absl::StrCat("opening ", path, ": No such file or directory"));
  }
  auto [it, created] = files_.try_emplace(path);
  if (created) it->second.generation = crashes_;
  const uint64_t size = it->second.durable.size() + it->second.pending.size();
  return std::unique_ptr<WritableFile>(new File(this, path, crashes_, size));
}

absl::Status MemoryDisk::AppendTo(const std::string& path, uint64_t generation,
                                  absl::string_view data, uint64_t* size) {
  MutexLock l(&mu_);
  auto it = files_.find(path);
  if (generation != crashes_ || it == files_.end()) {
    return absl::UnavailableError(absl::StrCat("appending to ", path, ": the disk crashed"));
  }
  if (absl::Status st = Halting(Op::kAppend, path); !st.ok()) return st;
  if (io_error_) return absl::UnavailableError(absl::StrCat("appending to ", path, ": I/O error"));
  uint64_t used = 0;
  for (const auto& [p, d] : files_) used += d.durable.size() + d.pending.size();
  const uint64_t room = capacity_ > used ? capacity_ - used : 0;
  const size_t n = static_cast<size_t>(std::min<uint64_t>(room, data.size()));
  it->second.pending.append(data.data(), n);
  *size += n;
  if (n < data.size()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("appending to ", path, ": No space left on device"));
  }
  return absl::OkStatus();
}

absl::Status MemoryDisk::SyncFile(const std::string& path, uint64_t generation) {
  MutexLock l(&mu_);
  auto it = files_.find(path);
  if (generation != crashes_ || it == files_.end()) {
    return absl::UnavailableError(absl::StrCat("syncing ", path, ": the disk crashed"));
  }
  if (absl::Status st = Halting(Op::kSync, path); !st.ok()) return st;
  if (io_error_) return absl::UnavailableError(absl::StrCat("syncing ", path, ": I/O error"));
  it->second.durable += it->second.pending;
  it->second.pending.clear();
  return absl::OkStatus();
}

absl::StatusOr<std::string> MemoryDisk::ReadAll(const std::string& path) {
  MutexLock l(&mu_);
  auto it = files_.find(path);
  if (it == files_.end()) {
    return absl::NotFoundError(absl::StrCat("opening ", path, ": No such file or directory"));
  }
  return it->second.durable + it->second.pending;
}

absl::StatusOr<std::string> MemoryDisk::ReadAt(const std::string& path, uint64_t offset,
                                               uint64_t length) {
  absl::StatusOr<std::string> all = ReadAll(path);
  if (!all.ok()) return all.status();
  if (offset >= all->size()) return std::string();
  return all->substr(offset, length);
}

absl::StatusOr<std::vector<std::string>> MemoryDisk::List(const std::string& dir) {
  MutexLock l(&mu_);
  if (dirs_.count(dir) == 0) {
    return absl::NotFoundError(absl::StrCat("listing ", dir, ": No such file or directory"));
  }
  std::vector<std::string> names;
  for (const auto& [path, d] : files_) {
    if (DirOf(path) == dir) names.push_back(path.substr(dir.size() + 1));
  }
  return names;  // std::map: sorted
}

absl::StatusOr<std::vector<std::string>> MemoryDisk::ListDirs(const std::string& dir) {
  MutexLock l(&mu_);
  if (dirs_.count(dir) == 0) {
    return absl::NotFoundError(absl::StrCat("listing ", dir, ": No such file or directory"));
  }
  std::vector<std::string> names;
  for (const std::string& d : dirs_) {
    if (d.size() > dir.size() && DirOf(d) == dir) names.push_back(d.substr(dir.size() + 1));
  }
  return names;  // std::set: sorted
}

absl::Status MemoryDisk::Truncate(const std::string& path, uint64_t size) {
  MutexLock l(&mu_);
  if (absl::Status st = Halting(Op::kTruncate, path); !st.ok()) return st;
  auto it = files_.find(path);
  if (it == files_.end()) {
    return absl::NotFoundError(absl::StrCat("opening ", path, ": No such file or directory"));
  }
  std::string all = it->second.durable + it->second.pending;
  all.resize(std::min<uint64_t>(size, all.size()));
  it->second.durable = std::move(all);
  it->second.pending.clear();
  return absl::OkStatus();
}

absl::Status MemoryDisk::Remove(const std::string& path) {
  MutexLock l(&mu_);
  if (absl::Status st = Halting(Op::kRemove, path); !st.ok()) return st;
  if (files_.erase(path) == 0) {
    return absl::NotFoundError(absl::StrCat("removing ", path, ": No such file or directory"));
  }
  return absl::OkStatus();
}

absl::Status MemoryDisk::Rename(const std::string& from, const std::string& to) {
  MutexLock l(&mu_);
  if (absl::Status st = Halting(Op::kRename, from); !st.ok()) return st;
  auto it = files_.find(from);
  if (it == files_.end()) {
    return absl::NotFoundError(absl::StrCat("renaming ", from, ": No such file or directory"));
  }
  Data moved = std::move(it->second);
  files_.erase(it);
  moved.name_durable = false;  // until its directory is synced
  moved.generation = crashes_;
  files_[to] = std::move(moved);
  return absl::OkStatus();
}

absl::Status MemoryDisk::CreateDirs(const std::string& path) {
  MutexLock l(&mu_);
  for (size_t end = path.find('/', 1);; end = path.find('/', end + 1)) {
    dirs_.insert(path.substr(0, end));
    if (end == std::string::npos) return absl::OkStatus();
  }
}

absl::Status MemoryDisk::SyncDir(const std::string& dir) {
  MutexLock l(&mu_);
  if (absl::Status st = Halting(Op::kSyncDir, dir); !st.ok()) return st;
  if (dirs_.count(dir) == 0) {
    return absl::NotFoundError(absl::StrCat("syncing ", dir, ": No such file or directory"));
  }
  for (auto& [path, d] : files_) {
    if (DirOf(path) == dir) d.name_durable = true;
  }
  return absl::OkStatus();
}

void MemoryDisk::Crash() {
  MutexLock l(&mu_);
  ++crashes_;
  halt_ = Halt();
  for (auto it = files_.begin(); it != files_.end();) {
    Data& d = it->second;
    if (!d.name_durable) {
      it = files_.erase(it);
      continue;
    }
    std::string kept;
    switch (rng_() % 4) {
      case 0:  // the cache had written it all
        kept = d.pending;
        break;
      case 1:  // nothing of it
        break;
      default: {  // a torn write: a prefix, maybe followed by zeros to the next 4 KiB
        kept = d.pending.substr(0, rng_() % (d.pending.size() + 1));
        if (rng_() % 2 == 0 && !d.pending.empty()) {
          const uint64_t end = d.durable.size() + kept.size();
          kept.append(static_cast<size_t>((4096 - end % 4096) % 4096), '\0');
        }
      }
    }
    d.durable += kept;
    d.pending.clear();
    ++it;
  }
}

void MemoryDisk::HaltAt(const std::string& trigger, Op op, uint64_t nth) {
  MutexLock l(&mu_);
  halt_ = Halt();
  halt_.trigger = trigger;
  halt_.op = op;
  halt_.nth = nth;
  halt_.armed = true;
}

bool MemoryDisk::halted() const {
  MutexLock l(&mu_);
  return halt_.halted;
}

void MemoryDisk::Revive() {
  MutexLock l(&mu_);
  halt_ = Halt();
}

void MemoryDisk::set_capacity(uint64_t bytes) {
  MutexLock l(&mu_);
  capacity_ = bytes;
}

void MemoryDisk::set_io_error(bool on) {
  MutexLock l(&mu_);
  io_error_ = on;
}

uint64_t MemoryDisk::used() const {
  MutexLock l(&mu_);
  uint64_t used = 0;
  for (const auto& [p, d] : files_) used += d.durable.size() + d.pending.size();
  return used;
}

}  // namespace unloadkv::storage
