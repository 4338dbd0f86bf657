#include "server/replica_log.h"

#include <algorithm>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/log_frame.h"

namespace unloadkv::server {

std::string SegmentName(uint64_t first_seq) { return absl::StrFormat("%020u.log", first_seq); }

namespace {

// Whether `name` is a segment's name; its first seq in *seq.
bool ParseSegmentName(const std::string& name, uint64_t* seq) {
  return name.size() == 24 && absl::EndsWith(name, ".log") &&
         absl::SimpleAtoi(absl::string_view(name).substr(0, 20), seq);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ReplicaLog>> ReplicaLog::Open(storage::Disk* disk,
                                                             const std::string& dir,
                                                             const Options& options,
                                                             const Replay& replay,
                                                             Recovery* recovery) {
  if (options.segment_bytes < kMaxFrameBytes) {
    return absl::InvalidArgumentError(absl::StrCat("log segments of ", options.segment_bytes,
                                                   " bytes: at least ", kMaxFrameBytes,
                                                   " (one record) needed"));
  }
  std::unique_ptr<ReplicaLog> log(new ReplicaLog(disk, dir, options));
  Recovery local;
  if (absl::Status st = log->Recover(replay, recovery != nullptr ? recovery : &local); !st.ok()) {
    return st;
  }
  return log;
}

absl::Status ReplicaLog::Recover(const Replay& replay, Recovery* recovery) {
  if (absl::Status st = disk_->CreateDirs(dir_); !st.ok()) return st;
  absl::StatusOr<std::vector<std::string>> names = disk_->List(dir_);
  if (!names.ok()) return names.status();
  std::vector<std::string> segments;
  for (const std::string& name : *names) {
    uint64_t first;
    if (ParseSegmentName(name, &first)) segments.push_back(name);
  }
  proto::LogEntry entry;
  for (size_t i = 0; i < segments.size(); ++i) {
    const std::string path = dir_ + "/" + segments[i];
    absl::StatusOr<std::string> data = disk_->ReadAll(path);
    if (!data.ok()) return data.status();
    const bool last = i + 1 == segments.size();
    size_t at = 0;
    while (at < data->size()) {
      const absl::string_view rest = absl::string_view(*data).substr(at);
      const FrameResult r = DecodeFrame(rest, &entry);
      if (r.kind == FrameResult::kOk) {
        const uint64_t seq = entry.record().seq();
        if (seq <= recovery->last_seq) {
          return absl::DataLossError(absl::StrCat(path, ": record at offset ", at, " has seq ", seq,
                                                  ", not after ", recovery->last_seq));
        }
        if (absl::Status st = replay(entry); !st.ok()) return st;
        recovery->last_seq = seq;
        recovery->last_epoch = entry.epoch();
        ++recovery->records;
        recovery->bytes += r.bytes;
        at += r.bytes;
        continue;
      }
      // A torn tail: only at the end of the last segment, and only a frame cut short, zeros,
      // or a final frame (ending exactly at the file's end) whose bytes did not all arrive.
      // (Zeros may follow that final frame: a file system that extended the file.)
      const bool final_frame = r.kind == FrameResult::kCorrupt && r.bytes > 0 &&
                               std::all_of(rest.begin() + static_cast<ptrdiff_t>(r.bytes),
                                           rest.end(), [](char c) { return c == 0; });
      if (last && (r.kind != FrameResult::kCorrupt || final_frame)) {
        recovery->torn_file = path;
        recovery->torn_bytes = rest.size();
        recovery->torn_why = r.kind == FrameResult::kZeros        ? "zeros"
                             : r.kind == FrameResult::kIncomplete ? "an incomplete record"
                                                                  : r.why;
        if (absl::Status st = disk_->Truncate(path, at); !st.ok()) return st;
        break;
      }
      return absl::DataLossError(
          absl::StrCat(path, ": corrupt log record at offset ", at, " (",
                       r.kind == FrameResult::kCorrupt ? r.why : "cut short before the log's end",
                       "); the log refuses to open rather than drop the records after it"));
    }
  }
  recovery->segments = segments.size();
  segments_ = segments.size();
  last_seq_ = synced_seq_ = recovery->last_seq;
  if (segments.empty()) return OpenSegment(SegmentName(last_seq_ + 1));
  return OpenSegment(segments.back());
}

absl::Status ReplicaLog::OpenSegment(const std::string& name) {
  const std::string path = dir_ + "/" + name;
  absl::StatusOr<std::unique_ptr<storage::WritableFile>> f = disk_->OpenForAppend(path);
  if (!f.ok()) return f.status();
  const bool created = (*f)->size() == 0;
  segment_ = path;
  file_ = *std::move(f);
  synced_size_ = written_size_ = file_->size();
  if (created) {
    if (absl::Status st = disk_->SyncDir(dir_); !st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status ReplicaLog::Fail(absl::Status st) {
  failure_ = st;
  return st;
}

absl::Status ReplicaLog::Append(const proto::LogEntry& entry) {
  if (!failure_.ok()) return failure_;
  const uint64_t seq = entry.record().seq();
  if (seq <= last_seq_) {
    return absl::InvalidArgumentError(
        absl::StrCat("log record seq ", seq, " is not after ", last_seq_));
  }
  frame_.clear();
  AppendFrame(entry, &frame_);
  if (frame_.size() > kMaxFrameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("log record of ", frame_.size(), " bytes: at most ", kMaxFrameBytes));
  }
  if (file_->size() > 0 && file_->size() + frame_.size() > options_.segment_bytes) {
    // A new segment, named by this record's seq; the full one is synced first.
    if (absl::Status st = Sync(); !st.ok()) return st;
    if (absl::Status st = OpenSegment(SegmentName(seq)); !st.ok()) return Fail(st);
    ++segments_;
  }
  if (absl::Status st = file_->Append(frame_); !st.ok()) return Fail(st);
  written_size_ = file_->size();
  last_seq_ = seq;
  return absl::OkStatus();
}

absl::Status ReplicaLog::Sync() {
  if (!failure_.ok()) return failure_;
  if (absl::Status st = file_->Sync(); !st.ok()) return Fail(st);
  synced_size_ = file_->size();
  synced_seq_ = last_seq_;
  return absl::OkStatus();
}

absl::Status ReplicaLog::Resume(bool keep_written) {
  if (failure_.ok()) return absl::OkStatus();
  file_.reset();
  const uint64_t size = keep_written ? written_size_ : synced_size_;
  if (absl::Status st = disk_->Truncate(segment_, size); !st.ok()) return st;
  absl::StatusOr<std::unique_ptr<storage::WritableFile>> f = disk_->OpenForAppend(segment_);
  if (!f.ok()) return f.status();
  file_ = *std::move(f);
  written_size_ = size;
  if (!keep_written) last_seq_ = synced_seq_;
  failure_ = absl::OkStatus();
  return absl::OkStatus();
}

}  // namespace unloadkv::server
