#include "server/replica_log.h"

#include <algorithm>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/apply_thread.h"
#include "server/log_frame.h"

namespace unloadkv::server {

std::string SegmentName(uint64_t first_seq) { return absl::StrFormat("%020u.log", first_seq); }
std::string BaseSegmentName(uint64_t number) { return absl::StrFormat("%020u.base.log", number); }

namespace {

// Whether `name` is a segment's name: its number in *number, and whether it begins a state.
bool ParseSegmentName(const std::string& name, uint64_t* number, bool* base) {
  *base = name.size() == 29 && absl::EndsWith(name, ".base.log");
  if (name.size() != 24 && !*base) return false;
  return absl::EndsWith(name, ".log") &&
         absl::SimpleAtoi(absl::string_view(name).substr(0, 20), number);
}

// Reads a segment in chunks, so that the disk's read-ahead overlaps the decoding and no
// buffer of the segment's size is built. window() holds at least one whole frame, when the
// file has one, after Fill.
class SegmentReader {
 public:
  SegmentReader(storage::Disk* disk, std::string path) : disk_(disk), path_(std::move(path)) {}

  absl::Status Fill() {
    if (end_ || buf_.size() - at_ >= kMaxFrameBytes + kFrameHeaderBytes) return absl::OkStatus();
    return Read(kChunkBytes);
  }
  // Reads everything to the file's end.
  absl::Status ReadRest() {
    while (!end_) {
      if (absl::Status st = Read(kChunkBytes); !st.ok()) return st;
    }
    return absl::OkStatus();
  }
  absl::string_view window() const { return absl::string_view(buf_).substr(at_); }
  uint64_t offset() const { return base_ + at_; }  // of window() in the file
  bool at_end() const { return end_; }
  void Consume(size_t n) { at_ += n; }

 private:
  static constexpr uint64_t kChunkBytes = 4 << 20;

  absl::Status Read(uint64_t length) {
    if (end_) return absl::OkStatus();
    buf_.erase(0, at_);
    base_ += at_;
    at_ = 0;
    absl::StatusOr<std::string> more = disk_->ReadAt(path_, base_ + buf_.size(), length);
    if (!more.ok()) return more.status();
    end_ = more->size() < length;
    buf_.append(*more);
    return absl::OkStatus();
  }

  storage::Disk* const disk_;
  const std::string path_;
  std::string buf_;
  size_t at_ = 0;      // consumed bytes of buf_
  uint64_t base_ = 0;  // file offset of buf_[0]
  bool end_ = false;
};

const char* KindName(proto::LogEntry::Kind k) {
  switch (k) {
    case proto::LogEntry::STATE_BEGIN:
      return "STATE_BEGIN";
    case proto::LogEntry::STATE:
      return "STATE";
    case proto::LogEntry::STATE_END:
      return "STATE_END";
    default:
      return "LIVE";
  }
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

absl::StatusOr<std::vector<ReplicaLog::Segment>> ReplicaLog::ListSegments(storage::Disk* disk,
                                                                          const std::string& dir,
                                                                          size_t* first) {
  absl::StatusOr<std::vector<std::string>> names = disk->List(dir);
  if (!names.ok()) return names.status();
  std::vector<Segment> segments;
  for (const std::string& name : *names) {
    Segment seg{0, false, name};
    if (ParseSegmentName(name, &seg.number, &seg.base)) segments.push_back(seg);
  }
  // A state shares its number with the segment that took the appends while it was built
  // (BeginCompaction), and comes first.
  std::sort(segments.begin(), segments.end(), [](const Segment& a, const Segment& b) {
    return a.number != b.number ? a.number < b.number : a.base && !b.base;
  });
  // Everything before the last segment that begins a state is obsolete.
  *first = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    if (segments[i].base) *first = i;
  }
  return segments;
}

absl::Status ReplicaLog::Recover(const Replay& replay, Recovery* recovery) {
  if (absl::Status st = disk_->CreateDirs(dir_); !st.ok()) return st;
  if (absl::StatusOr<std::vector<std::string>> names = disk_->List(dir_); names.ok()) {
    for (const std::string& name : *names) {
      // A compaction a crash cut short: its state was never put in place.
      if (absl::EndsWith(name, ".base.log.tmp")) (void)disk_->Remove(dir_ + "/" + name);
    }
  }
  size_t first = 0;
  absl::StatusOr<std::vector<Segment>> segments = ListSegments(disk_, dir_, &first);
  if (!segments.ok()) return segments.status();
  bool in_state = false;
  {
    ApplyThread apply(replay);
    for (size_t i = first; i < segments->size(); ++i) {
      if (absl::Status st =
              ReplaySegment((*segments)[i], i + 1 == segments->size(), &apply, recovery, &in_state);
          !st.ok()) {
        // A record applied before the one that stopped the reading may have failed first.
        absl::Status applied = apply.Finish();
        return applied.ok() ? st : applied;
      }
    }
    if (absl::Status st = apply.Finish(); !st.ok()) return st;
  }
  recovery->complete = !in_state;
  // The obsolete segments go only now: a log that refused to open changed nothing.
  for (size_t i = 0; i < first; ++i) {
    if (absl::Status st = disk_->Remove(dir_ + "/" + (*segments)[i].name); !st.ok()) return st;
    ++recovery->obsolete_segments;
  }
  if (first > 0) {
    if (absl::Status st = disk_->SyncDir(dir_); !st.ok()) return st;
  }
  recovery->segments = segments->size() - first;
  segments_ = segments->size() - first;
  last_seq_ = synced_seq_ = recovery->last_seq;
  in_state_ = in_state;
  state_broken_ = in_state;  // an incomplete state is never continued: a new one must begin
  if (segments->empty()) {
    segments_ = 1;  // the one opened here
    last_number_ = last_seq_ + 1;
    return OpenSegment(SegmentName(last_number_));
  }
  last_number_ = segments->back().number;
  base_number_ = (*segments)[first].number;
  return OpenSegment(segments->back().name);
}

absl::Status ReplicaLog::ReplaySegment(const Segment& segment, bool last, ApplyThread* apply,
                                       Recovery* recovery, bool* in_state) {
  const std::string path = dir_ + "/" + segment.name;
  SegmentReader in(disk_, path);
  while (true) {
    proto::LogEntry entry;  // handed to the applier
    if (absl::Status st = in.Fill(); !st.ok()) return st;
    const absl::string_view rest = in.window();
    if (rest.empty()) return absl::OkStatus();
    const uint64_t at = in.offset();
    const FrameResult r = DecodeFrame(rest, &entry);
    if (r.kind == FrameResult::kOk) {
      if (absl::Status st =
              CheckOrder(entry, at == 0 && segment.base, in_state, &recovery->last_seq);
          !st.ok()) {
        return absl::DataLossError(
            absl::StrCat(path, ": record at offset ", at, ": ", st.message()));
      }
      if (entry.kind() == proto::LogEntry::LIVE) recovery->last_epoch = entry.epoch();
      if (entry.kind() == proto::LogEntry::STATE_BEGIN) recovery->state = true;
      if (entry.kind() == proto::LogEntry::STATE) ++recovery->state_records;
      ++recovery->records;
      recovery->bytes += r.bytes;
      if (entry.kind() == proto::LogEntry::LIVE) {
        since_state_bytes_ += r.bytes;
      } else {
        state_bytes_ += r.bytes;
      }
      in.Consume(r.bytes);
      if (absl::Status st = apply->Push(std::move(entry), r.bytes); !st.ok()) return st;
      continue;
    }
    // Whatever does not decode is judged on everything to the file's end.
    if (!in.at_end()) {
      if (absl::Status st = in.ReadRest(); !st.ok()) return st;
      continue;
    }
    // A torn tail: only at the end of the last segment, and only a frame cut short, zeros,
    // or a final frame (ending exactly at the file's end) whose bytes did not all arrive.
    // (Zeros may follow that final frame: a file system that extended the file.)
    const bool final_frame = r.kind == FrameResult::kCorrupt && r.bytes > 0 &&
                             std::all_of(rest.begin() + static_cast<ptrdiff_t>(r.bytes), rest.end(),
                                         [](char c) { return c == 0; });
    if (last && (r.kind != FrameResult::kCorrupt || final_frame)) {
      recovery->torn_file = path;
      recovery->torn_bytes = rest.size();
      recovery->torn_why = r.kind == FrameResult::kZeros        ? "zeros"
                           : r.kind == FrameResult::kIncomplete ? "an incomplete record"
                                                                : r.why;
      return disk_->Truncate(path, at);
    }
    return absl::DataLossError(
        absl::StrCat(path, ": corrupt log record at offset ", at, " (",
                     r.kind == FrameResult::kCorrupt ? r.why : "cut short before the log's end",
                     "); the log refuses to open rather than drop the records after it"));
  }
}

bool ReplicaLog::ShouldCompact() const {
  return options_.compact_bytes > 0 && failure_.ok() && !in_state_ && !state_broken_ &&
         since_state_bytes_ > std::max(options_.compact_bytes, compact_after_) &&
         since_state_bytes_ > 2 * state_bytes_;
}

absl::Status ReplicaLog::ForEachRecord(const std::vector<std::string>& segments,
                                       const std::function<void(const proto::LogEntry&)>& each,
                                       uint64_t* bytes) const {
  proto::LogEntry entry;
  for (const std::string& name : segments) {
    SegmentReader in(disk_, dir_ + "/" + name);
    while (true) {
      if (absl::Status st = in.Fill(); !st.ok()) return st;
      if (in.window().empty()) break;
      const FrameResult r = DecodeFrame(in.window(), &entry);
      if (r.kind != FrameResult::kOk) {
        return absl::DataLossError(absl::StrCat(dir_, "/", name, ": record at offset ", in.offset(),
                                                " does not decode while compacting"));
      }
      in.Consume(r.bytes);
      *bytes += r.bytes;
      each(entry);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ReplicaLog::CompactionPlan> ReplicaLog::BeginCompaction() {
  if (absl::Status st = Sync(); !st.ok()) return st;
  size_t first = 0;
  absl::StatusOr<std::vector<Segment>> segments = ListSegments(disk_, dir_, &first);
  if (!segments.ok()) return segments.status();
  CompactionPlan plan;
  plan.last_seq = last_seq_;
  plan.since_bytes = since_state_bytes_;
  plan.generation = state_generation_;
  for (size_t i = first; i < segments->size(); ++i) plan.segments.push_back((*segments)[i].name);
  // The new state and the segment that takes the appends meanwhile share a number above every
  // seq compacted (the state sorts first): recovery reads the state, then the appends.
  plan.number = std::max(last_number_ + 1, last_seq_ + 1);
  plan.tmp = dir_ + "/" + BaseSegmentName(plan.number) + ".tmp";
  file_.reset();
  if (absl::Status st = OpenSegment(SegmentName(plan.number)); !st.ok()) return Fail(st);
  last_number_ = plan.number;
  ++segments_;
  return plan;
}

absl::Status ReplicaLog::BuildCompaction(const CompactionPlan& plan, Compaction* out) const {
  // Pass 1: each key's last record (0: a state's; deleted keys dropped).
  std::map<std::string, uint64_t> latest;
  absl::Status st = ForEachRecord(
      plan.segments,
      [&latest](const proto::LogEntry& e) {
        const proto::ReplicationRecord& r = e.record();
        if (e.kind() == proto::LogEntry::STATE) {
          latest[r.key()] = 0;
        } else if (e.kind() == proto::LogEntry::LIVE && r.op() == proto::ReplicationRecord::PUT) {
          latest[r.key()] = r.seq();
        } else if (e.kind() == proto::LogEntry::LIVE &&
                   r.op() == proto::ReplicationRecord::DELETE) {
          latest.erase(r.key());
        }
      },
      &out->bytes_read);
  if (st.ok()) st = WriteState(plan, latest, out);
  if (!st.ok()) (void)disk_->Remove(plan.tmp);
  out->keys = latest.size();
  return st;
}

absl::Status ReplicaLog::FinishCompaction(const CompactionPlan& plan, absl::Status built,
                                          Compaction* out) {
  if (built.ok() && plan.generation != state_generation_) {
    built = absl::AbortedError("a state transfer began meanwhile; its state replaces this one");
  } else if (built.ok() && !failure_.ok()) {
    built = failure_;
  }
  if (built.ok()) {
    built = disk_->Rename(plan.tmp, dir_ + "/" + BaseSegmentName(plan.number));
    if (built.ok()) built = disk_->SyncDir(dir_);
  }
  if (!built.ok()) {
    (void)disk_->Remove(plan.tmp);
    compact_after_ = since_state_bytes_ + options_.compact_bytes;
    return built;
  }
  // The state is in place: the segments it compacted are not needed.
  base_number_ = plan.number;
  obsolete_ = plan.segments.size();
  RemoveObsolete();
  out->segments_removed = plan.segments.size();
  segments_ = segments_ + 1 - std::min<uint64_t>(segments_, plan.segments.size());
  since_state_bytes_ -= std::min(since_state_bytes_, plan.since_bytes);
  compact_after_ = 0;
  state_bytes_ = out->bytes_written;
  return absl::OkStatus();
}

absl::Status ReplicaLog::Compact(Compaction* out) {
  absl::StatusOr<CompactionPlan> plan = BeginCompaction();
  if (!plan.ok()) return plan.status();
  return FinishCompaction(*plan, BuildCompaction(*plan, out), out);
}

absl::Status ReplicaLog::WriteState(const CompactionPlan& plan,
                                    const std::map<std::string, uint64_t>& latest,
                                    Compaction* out) const {
  (void)disk_->Remove(plan.tmp);  // one a failed compaction left (NotFound as a rule)
  absl::StatusOr<std::unique_ptr<storage::WritableFile>> f = disk_->OpenForAppend(plan.tmp);
  if (!f.ok()) return f.status();
  std::string frame;
  absl::Status failed;
  auto write = [&](const proto::LogEntry& e) {
    if (!failed.ok()) return;
    frame.clear();
    AppendFrame(e, &frame);
    out->bytes_written += frame.size();
    failed = (*f)->Append(frame);
  };
  proto::LogEntry marker;
  marker.set_kind(proto::LogEntry::STATE_BEGIN);
  write(marker);
  // Pass 2: the records that are their key's last, as the state's.
  uint64_t read = 0;
  absl::Status st = ForEachRecord(
      plan.segments,
      [&](const proto::LogEntry& e) {
        const bool state = e.kind() == proto::LogEntry::STATE;
        const bool put =
            e.kind() == proto::LogEntry::LIVE && e.record().op() == proto::ReplicationRecord::PUT;
        if (!state && !put) return;
        auto it = latest.find(e.record().key());
        if (it == latest.end() || it->second != (state ? 0 : e.record().seq())) return;
        proto::LogEntry copy = e;
        copy.set_kind(proto::LogEntry::STATE);
        copy.mutable_record()->set_seq(0);
        write(copy);
      },
      &read);
  out->bytes_read += read;
  if (!st.ok()) return st;
  marker.set_kind(proto::LogEntry::STATE_END);
  marker.mutable_record()->set_seq(plan.last_seq);
  write(marker);
  if (!failed.ok()) return failed;
  return (*f)->Sync();
}

absl::StatusOr<std::vector<proto::LogEntry>> ReplicaLog::ReadLive(storage::Disk* disk,
                                                                  const std::string& dir,
                                                                  uint64_t from_seq) {
  size_t first = 0;
  absl::StatusOr<std::vector<Segment>> segments = ListSegments(disk, dir, &first);
  if (!segments.ok()) return segments.status();
  std::vector<proto::LogEntry> out;
  proto::LogEntry entry;
  for (size_t i = first; i < segments->size(); ++i) {
    // Every seq of segment i is below the next one's number: skip what ends before from_seq.
    if (i + 1 < segments->size() && (*segments)[i + 1].number <= from_seq) continue;
    SegmentReader in(disk, dir + "/" + (*segments)[i].name);
    while (true) {
      if (absl::Status st = in.Fill(); !st.ok()) return st;
      if (in.window().empty()) break;
      const FrameResult r = DecodeFrame(in.window(), &entry);
      if (r.kind != FrameResult::kOk) return out;  // the end being written
      in.Consume(r.bytes);
      if (entry.kind() == proto::LogEntry::LIVE && entry.record().seq() >= from_seq) {
        out.push_back(entry);
      }
    }
  }
  return out;
}

absl::Status ReplicaLog::CheckOrder(const proto::LogEntry& e, bool base_start, bool* in_state,
                                    uint64_t* last_seq) {
  const uint64_t seq = e.record().seq();
  switch (e.kind()) {
    case proto::LogEntry::STATE_BEGIN:
      if (!base_start) return absl::InvalidArgumentError("STATE_BEGIN not at a segment's start");
      *in_state = true;
      *last_seq = 0;
      return absl::OkStatus();
    case proto::LogEntry::STATE:
    case proto::LogEntry::STATE_END:
      if (!*in_state) {
        return absl::InvalidArgumentError(
            absl::StrCat(KindName(e.kind()), " record outside a state (no STATE_BEGIN before it)"));
      }
      if (e.kind() == proto::LogEntry::STATE_END) {
        *in_state = false;
        *last_seq = seq;
      } else if (seq != 0) {
        return absl::InvalidArgumentError(absl::StrCat("STATE record with seq ", seq));
      }
      return absl::OkStatus();
    case proto::LogEntry::LIVE:
      if (*in_state) return absl::InvalidArgumentError("live record inside a state");
      if (seq <= *last_seq) {
        return absl::InvalidArgumentError(absl::StrCat("seq ", seq, ", not after ", *last_seq));
      }
      *last_seq = seq;
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(absl::StrCat("unknown record kind ", e.kind()));
  }
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
  const bool begin = entry.kind() == proto::LogEntry::STATE_BEGIN;
  if (!failure_.ok() && !begin) return failure_;
  if (state_broken_ && !begin) {
    return absl::FailedPreconditionError(
        "the state this log was taking is incomplete (a disk error or a crash cut it); a new "
        "state transfer must begin");
  }
  bool in_state = in_state_;
  uint64_t last_seq = last_seq_;
  if (absl::Status st = CheckOrder(entry, begin, &in_state, &last_seq); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("log record: ", st.message()));
  }
  frame_.clear();
  AppendFrame(entry, &frame_);
  if (frame_.size() > kMaxFrameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("log record of ", frame_.size(), " bytes: at most ", kMaxFrameBytes));
  }
  if (begin) {
    // A state starts a segment of its own: recovery begins at the last one, and everything
    // before it goes once the state is whole and synced. A failed log gets a fresh start here.
    ++last_number_;
    file_.reset();
    if (absl::Status st = OpenSegment(BaseSegmentName(last_number_)); !st.ok()) {
      state_broken_ = true;  // the old state is forgotten whatever happens next
      return Fail(st);
    }
    base_number_ = last_number_;
    ++state_generation_;
    failure_ = absl::OkStatus();
    state_broken_ = false;
    obsolete_ = obsolete_ + segments_;
    segments_ = 1;
  } else if (file_->size() > 0 && file_->size() + frame_.size() > options_.segment_bytes) {
    // A new segment, named by this record's seq (or after the last name); the full one is
    // synced first.
    if (absl::Status st = Sync(); !st.ok()) return st;
    last_number_ = std::max(last_number_ + 1, entry.record().seq());
    if (absl::Status st = OpenSegment(SegmentName(last_number_)); !st.ok()) return Fail(st);
    ++segments_;
  }
  if (absl::Status st = file_->Append(frame_); !st.ok()) return Fail(st);
  written_size_ = file_->size();
  in_state_ = in_state;
  last_seq_ = last_seq;
  if (begin) since_state_bytes_ = state_bytes_ = compact_after_ = 0;
  if (entry.kind() == proto::LogEntry::LIVE) {
    since_state_bytes_ += frame_.size();
  } else {
    state_bytes_ += frame_.size();
  }
  return absl::OkStatus();
}

absl::Status ReplicaLog::Sync() {
  if (!failure_.ok()) return failure_;
  if (absl::Status st = file_->Sync(); !st.ok()) return Fail(st);
  synced_size_ = file_->size();
  synced_seq_ = last_seq_;
  if (obsolete_ > 0 && !in_state_) RemoveObsolete();
  return absl::OkStatus();
}

void ReplicaLog::RemoveObsolete() {
  // The current state is whole and on disk: the segments before its own are not needed. A
  // removal that fails is left to the next recovery, which skips them anyway.
  absl::StatusOr<std::vector<std::string>> names = disk_->List(dir_);
  if (!names.ok()) return;
  for (const std::string& name : *names) {
    uint64_t number;
    bool base;
    if (ParseSegmentName(name, &number, &base) && dir_ + "/" + name != segment_ &&
        number < base_number_) {
      (void)disk_->Remove(dir_ + "/" + name);
    }
  }
  (void)disk_->SyncDir(dir_);
  obsolete_ = 0;
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
  if (in_state_) state_broken_ = true;  // a state cut short is never continued
  failure_ = absl::OkStatus();
  return absl::OkStatus();
}

}  // namespace unloadkv::server
