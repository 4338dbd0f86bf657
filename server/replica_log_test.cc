#include "server/replica_log.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/log_frame.h"
#include "transport/storage/memory_disk.h"
#include "transport/storage/posix_disk.h"

namespace unloadkv::server {
namespace {

proto::LogEntry Entry(uint64_t seq, size_t value_bytes = 100) {
  proto::LogEntry e;
  e.set_epoch(3);
  e.mutable_record()->set_op(proto::ReplicationRecord::PUT);
  e.mutable_record()->set_seq(seq);
  e.mutable_record()->set_key("key" + std::to_string(seq));
  e.mutable_record()->set_offset(seq * 4096);
  e.mutable_record()->set_size(static_cast<uint32_t>(value_bytes));
  e.set_value(std::string(value_bytes, static_cast<char>('a' + seq % 26)));
  return e;
}

bool operator!=(const proto::LogEntry& a, const proto::LogEntry& b) {
  return a.SerializeAsString() != b.SerializeAsString();
}

// A fresh directory per test.
std::string Dir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(base != nullptr ? base : "/tmp") + "/replica_log/" + name;
  std::system(("rm -rf '" + dir + "'").c_str());
  return dir;
}

// Opens the log in `dir`, collecting the replayed records' seqs.
absl::StatusOr<std::unique_ptr<ReplicaLog>> OpenLog(storage::Disk* disk, const std::string& dir,
                                                    std::vector<uint64_t>* seqs,
                                                    ReplicaLog::Recovery* recovery = nullptr) {
  ReplicaLog::Options o;
  o.segment_bytes = kMaxFrameBytes;  // 1 MiB: 15 records of 64 KiB
  return ReplicaLog::Open(
      disk, dir, o,
      [seqs](const proto::LogEntry& e) {
        if (e != Entry(e.record().seq(), e.value().size()) && e.value().size() > 0) {
          return absl::InternalError("a record came back different");
        }
        seqs->push_back(e.record().seq());
        return absl::OkStatus();
      },
      recovery);
}

// Writes records 1..n of 64 KiB each (3 segments for 40) and syncs.
void Fill(storage::Disk* disk, const std::string& dir, uint64_t n) {
  std::vector<uint64_t> seqs;
  auto log = OpenLog(disk, dir, &seqs);
  ASSERT_TRUE(log.ok()) << log.status();
  for (uint64_t s = 1; s <= n; ++s) ASSERT_TRUE((*log)->Append(Entry(s, 64 << 10)).ok()) << s;
  ASSERT_TRUE((*log)->Sync().ok());
}

std::vector<uint64_t> Range(uint64_t from, uint64_t to) {
  std::vector<uint64_t> v;
  for (uint64_t s = from; s <= to; ++s) v.push_back(s);
  return v;
}

TEST(ReplicaLogTest, ReplaysEveryRecordInOrderAcrossSegmentsAndAppendsAfterThem) {
  storage::PosixDisk disk;
  const std::string dir = Dir("roundtrip");
  Fill(&disk, dir, 40);
  std::vector<uint64_t> seqs;
  ReplicaLog::Recovery rec;
  auto log = OpenLog(&disk, dir, &seqs, &rec);
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ(seqs, Range(1, 40));
  EXPECT_EQ(rec.segments, 3u);
  EXPECT_EQ(rec.last_seq, 40u);
  EXPECT_EQ(rec.last_epoch, 3u);
  EXPECT_TRUE(rec.torn_file.empty());
  EXPECT_EQ(*disk.List(dir),
            (std::vector<std::string>{SegmentName(1), SegmentName(16), SegmentName(31)}));
  // A seq not after the last is refused and changes nothing.
  EXPECT_EQ((*log)->Append(Entry(40)).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE((*log)->Append(Entry(41)).ok());
  ASSERT_TRUE((*log)->Sync().ok());
  log->reset();
  seqs.clear();
  ASSERT_TRUE(OpenLog(&disk, dir, &seqs).ok());
  EXPECT_EQ(seqs, Range(1, 41));
}

proto::LogEntry Marker(proto::LogEntry::Kind kind, uint64_t seq = 0) {
  proto::LogEntry e;
  e.set_kind(kind);
  e.mutable_record()->set_seq(seq);
  return e;
}

proto::LogEntry StateEntry(const std::string& key) {
  proto::LogEntry e = Entry(0, 0);
  e.set_kind(proto::LogEntry::STATE);
  e.mutable_record()->set_key(key);
  return e;
}

// Opens the log in `dir`, describing each replayed record: "B", "S:key", "E:seq" or "seq".
absl::StatusOr<std::unique_ptr<ReplicaLog>> OpenDescribed(storage::Disk* disk,
                                                          const std::string& dir,
                                                          std::vector<std::string>* seen,
                                                          ReplicaLog::Recovery* recovery) {
  ReplicaLog::Options o;
  o.segment_bytes = kMaxFrameBytes;
  return ReplicaLog::Open(
      disk, dir, o,
      [seen](const proto::LogEntry& e) {
        switch (e.kind()) {
          case proto::LogEntry::STATE_BEGIN:
            seen->push_back("B");
            break;
          case proto::LogEntry::STATE:
            seen->push_back("S:" + e.record().key());
            break;
          case proto::LogEntry::STATE_END:
            seen->push_back("E:" + std::to_string(e.record().seq()));
            break;
          default:
            seen->push_back(std::to_string(e.record().seq()));
        }
        return absl::OkStatus();
      },
      recovery);
}

// A transfer's state (STATE_BEGIN .. STATE_END) makes everything before it obsolete: recovery
// replays from it, and the older segments go once it is synced. Seqs after it may be lower
// than the old ones (a new primary's history).
TEST(ReplicaLogTest, AStateReplacesWhatCameBeforeIt) {
  storage::PosixDisk disk;
  const std::string dir = Dir("state");
  Fill(&disk, dir, 40);  // 3 segments
  std::vector<std::string> seen;
  ReplicaLog::Recovery rec;
  auto log = OpenDescribed(&disk, dir, &seen, &rec);
  ASSERT_TRUE(log.ok()) << log.status();
  // Out of order: refused, changing nothing.
  EXPECT_EQ((*log)->Append(StateEntry("k")).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*log)->Append(Marker(proto::LogEntry::STATE_END, 9)).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE((*log)->Append(Marker(proto::LogEntry::STATE_BEGIN)).ok());
  EXPECT_EQ((*log)->Append(Entry(41)).code(), absl::StatusCode::kInvalidArgument);  // in a state
  ASSERT_TRUE((*log)->Append(StateEntry("a")).ok());
  ASSERT_TRUE((*log)->Append(StateEntry("b")).ok());
  ASSERT_TRUE((*log)->Append(Marker(proto::LogEntry::STATE_END, 20)).ok());
  EXPECT_EQ((*log)->Append(Entry(20)).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE((*log)->Append(Entry(21, 0)).ok());
  ASSERT_TRUE((*log)->Sync().ok());
  EXPECT_EQ(*disk.List(dir), std::vector<std::string>{BaseSegmentName(32)});
  log->reset();
  seen.clear();
  rec = ReplicaLog::Recovery();
  log = OpenDescribed(&disk, dir, &seen, &rec);
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ(seen, (std::vector<std::string>{"B", "S:a", "S:b", "E:20", "21"}));
  EXPECT_TRUE(rec.complete);
  EXPECT_TRUE(rec.state);
  EXPECT_EQ(rec.state_records, 2u);
  EXPECT_EQ(rec.last_seq, 21u);
  ASSERT_TRUE((*log)->Append(Entry(22, 0)).ok());
}

// A state cut short by a crash: recovery says so (incomplete), the segments before it are
// gone, and the log takes nothing but a new state; a crash between STATE_BEGIN and the
// removal of the old segments leaves them, and recovery skips and removes them.
TEST(ReplicaLogTest, AStateCutShortIsIncompleteAndOnlyANewStateFollows) {
  storage::MemoryDisk disk(7);
  const std::string dir = "/data/shard-1";
  Fill(&disk, dir, 20);
  std::vector<std::string> seen;
  {
    auto log = OpenDescribed(&disk, dir, &seen, nullptr);
    ASSERT_TRUE(log.ok()) << log.status();
    ASSERT_TRUE((*log)->Append(Marker(proto::LogEntry::STATE_BEGIN)).ok());
    ASSERT_TRUE((*log)->Append(StateEntry("a")).ok());
    ASSERT_TRUE((*log)->Sync().ok());  // in a state: the old segments stay
    EXPECT_EQ(disk.List(dir)->size(), 3u);
  }
  disk.Crash();
  seen.clear();
  ReplicaLog::Recovery rec;
  auto log = OpenDescribed(&disk, dir, &seen, &rec);
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_FALSE(rec.complete);
  EXPECT_EQ(rec.obsolete_segments, 2u);
  EXPECT_EQ(seen, (std::vector<std::string>{"B", "S:a"}));
  EXPECT_EQ((*log)->Append(StateEntry("b")).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*log)->Append(Entry(21)).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE((*log)->Append(Marker(proto::LogEntry::STATE_BEGIN)).ok());
  ASSERT_TRUE((*log)->Append(Marker(proto::LogEntry::STATE_END, 0)).ok());
  ASSERT_TRUE((*log)->Append(Entry(1, 0)).ok());
  ASSERT_TRUE((*log)->Sync().ok());
  log->reset();
  seen.clear();
  rec = ReplicaLog::Recovery();
  ASSERT_TRUE(OpenDescribed(&disk, dir, &seen, &rec).ok());
  EXPECT_TRUE(rec.complete);
  EXPECT_EQ(seen, (std::vector<std::string>{"B", "E:0", "1"}));
}

// Segments are read in chunks of 4 MiB: records that straddle chunks replay in order, and a torn
// tail or a corrupt record far past the first chunk is judged on the whole rest of the file.
TEST(ReplicaLogTest, ASegmentReadInChunksReplaysWholeAndJudgesItsEndOnTheRest) {
  storage::PosixDisk disk;
  const std::string dir = Dir("chunks");
  ReplicaLog::Options o;
  o.segment_bytes = 64 << 20;  // one segment
  auto open = [&](std::vector<uint64_t>* seqs, ReplicaLog::Recovery* rec) {
    return ReplicaLog::Open(
        &disk, dir, o,
        [seqs](const proto::LogEntry& e) {
          if (e != Entry(e.record().seq(), e.value().size())) {
            return absl::InternalError("a record came back different");
          }
          seqs->push_back(e.record().seq());
          return absl::OkStatus();
        },
        rec);
  };
  {
    std::vector<uint64_t> seqs;
    auto log = open(&seqs, nullptr);
    ASSERT_TRUE(log.ok()) << log.status();
    // 200 records of 50,001 bytes: about 10 MB, no frame aligned with a chunk.
    for (uint64_t s = 1; s <= 200; ++s) ASSERT_TRUE((*log)->Append(Entry(s, 50001)).ok());
    ASSERT_TRUE((*log)->Sync().ok());
  }
  const std::string path = dir + "/" + SegmentName(1);
  std::vector<uint64_t> seqs;
  ReplicaLog::Recovery rec;
  ASSERT_TRUE(open(&seqs, &rec).ok());
  EXPECT_EQ(seqs, Range(1, 200));
  EXPECT_TRUE(rec.torn_file.empty());
  // A final record cut short: cut off, the 199 before it kept.
  const std::string whole = *disk.ReadAll(path);
  ASSERT_TRUE(disk.Truncate(path, whole.size() - 7).ok());
  seqs.clear();
  rec = ReplicaLog::Recovery();
  ASSERT_TRUE(open(&seqs, &rec).ok());
  EXPECT_EQ(seqs, Range(1, 199));
  EXPECT_EQ(rec.torn_file, path);
  // A flipped byte in record 150 (past two chunks): refused, naming its offset.
  std::string data = *disk.ReadAll(path);
  std::string before;  // the frames of records 1..149
  for (uint64_t s = 1; s < 150; ++s) AppendFrame(Entry(s, 50001), &before);
  data[before.size() + 100] ^= 0x40;
  ASSERT_TRUE(disk.Truncate(path, 0).ok());
  ASSERT_TRUE((*disk.OpenForAppend(path))->Append(data).ok());
  seqs.clear();
  absl::StatusOr<std::unique_ptr<ReplicaLog>> bad = open(&seqs, nullptr);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss) << bad.status();
  EXPECT_TRUE(
      absl::StrContains(bad.status().message(), absl::StrCat("at offset ", before.size(), " (")))
      << bad.status();
}

// A PUT or DELETE of `key` at `seq`, with a value of `value_bytes` derived from seq.
proto::LogEntry KeyRecord(uint64_t seq, const std::string& key, bool del,
                          size_t value_bytes = 100) {
  proto::LogEntry e;
  e.set_epoch(3);
  proto::ReplicationRecord* r = e.mutable_record();
  r->set_op(del ? proto::ReplicationRecord::DELETE : proto::ReplicationRecord::PUT);
  r->set_seq(seq);
  r->set_key(key);
  if (!del) {
    r->set_offset(seq * 64);
    r->set_size(static_cast<uint32_t>(value_bytes));
    e.set_value(std::string(value_bytes, static_cast<char>('a' + seq % 26)));
  }
  return e;
}

// Replays the log in `dir` into key -> value (STATE and PUT set, DELETE erases).
absl::StatusOr<std::unique_ptr<ReplicaLog>> OpenInto(storage::Disk* disk, const std::string& dir,
                                                     const ReplicaLog::Options& o,
                                                     std::map<std::string, std::string>* state,
                                                     ReplicaLog::Recovery* rec = nullptr) {
  state->clear();
  return ReplicaLog::Open(
      disk, dir, o,
      [state](const proto::LogEntry& e) {
        if (e.kind() == proto::LogEntry::STATE_BEGIN) state->clear();
        if (e.kind() != proto::LogEntry::STATE && e.kind() != proto::LogEntry::LIVE) {
          return absl::OkStatus();
        }
        if (e.record().op() == proto::ReplicationRecord::DELETE) {
          state->erase(e.record().key());
        } else {
          (*state)[e.record().key()] = e.value();
        }
        return absl::OkStatus();
      },
      rec);
}

// Compaction rewrites each key's last PUT as a new state (deleted keys gone), removes the
// older segments, and the log goes on after it: what recovery rebuilds is the same before and
// after, and later records follow the state.
TEST(ReplicaLogTest, CompactionKeepsEachKeysLastWriteAndRemovesTheOldSegments) {
  storage::PosixDisk disk;
  const std::string dir = Dir("compact");
  ReplicaLog::Options o;
  o.segment_bytes = kMaxFrameBytes;  // 1 MiB
  o.compact_bytes = 2 << 20;
  std::map<std::string, std::string> want, got;
  auto log = OpenInto(&disk, dir, o, &got);
  ASSERT_TRUE(log.ok()) << log.status();
  uint64_t seq = 0;
  for (int round = 0; round < 8; ++round) {  // 8 x 10 PUTs of 40 KB: about 3.3 MB
    for (int k = 0; k < 10; ++k) {
      proto::LogEntry e = KeyRecord(++seq, absl::StrCat("k", k), false, 40000);
      want[e.record().key()] = e.value();
      ASSERT_TRUE((*log)->Append(e).ok());
    }
  }
  for (int k = 0; k < 3; ++k) {
    ASSERT_TRUE((*log)->Append(KeyRecord(++seq, absl::StrCat("k", k), true)).ok());
    want.erase(absl::StrCat("k", k));
  }
  ASSERT_TRUE((*log)->Sync().ok());
  const size_t segments_before = disk.List(dir)->size();
  EXPECT_GT(segments_before, 3u);
  EXPECT_TRUE((*log)->ShouldCompact());
  ReplicaLog::Compaction c;
  absl::Status compacted = (*log)->Compact(&c);
  ASSERT_TRUE(compacted.ok()) << compacted;
  EXPECT_EQ(c.keys, 7u);
  EXPECT_EQ(c.segments_removed, segments_before);
  EXPECT_FALSE((*log)->ShouldCompact());
  // The state, and the (empty) segment that took the appends while it was built: one number.
  std::vector<std::string> left = *disk.List(dir);
  std::sort(left.begin(), left.end());
  ASSERT_EQ(left.size(), 2u);
  EXPECT_TRUE(absl::EndsWith(left[0], ".base.log")) << left[0];
  EXPECT_EQ(left[1], left[0].substr(0, 20) + ".log");
  // The log goes on after the state.
  proto::LogEntry after = KeyRecord(++seq, "k9", false);
  want["k9"] = after.value();
  ASSERT_TRUE((*log)->Append(after).ok());
  ASSERT_TRUE((*log)->Sync().ok());
  log->reset();
  ReplicaLog::Recovery rec;
  ASSERT_TRUE(OpenInto(&disk, dir, o, &got, &rec).ok());
  EXPECT_EQ(got, want);
  EXPECT_TRUE(rec.complete);
  EXPECT_EQ(rec.state_records, 7u);
  EXPECT_EQ(rec.last_seq, seq);
}

// Compaction under power loss and a disk that fills, on MemoryDisk, 40 seeds: random PUTs and
// DELETEs of 12 keys, syncs, compactions (some failing for want of space), and crashes after a
// sync. After every restart the log opens and rebuilds exactly the state as of the last sync.
TEST(ReplicaLogTest, CompactionLosesNothingSyncedAcrossPowerLossAndFullDisks) {
  int compacted = 0, refused = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    storage::MemoryDisk disk(seed);
    std::mt19937_64 rng(seed);
    const std::string dir = "/data/shard-0";
    ReplicaLog::Options o;
    o.segment_bytes = kMaxFrameBytes;
    o.compact_bytes = 256 << 10;
    std::map<std::string, std::string> synced, now, got;
    uint64_t seq = 0;
    for (int life = 0; life < 6; ++life) {
      auto log = OpenInto(&disk, dir, o, &got);
      ASSERT_TRUE(log.ok()) << "seed " << seed << ": " << log.status();
      ASSERT_EQ(got, synced) << "seed " << seed << ", life " << life;
      now = synced;
      seq = std::max(seq, (*log)->last_seq());
      for (int op = 0; op < 60; ++op) {
        const std::string key = absl::StrCat("k", rng() % 12);
        const bool del = rng() % 5 == 0 && now.count(key) > 0;
        proto::LogEntry e = KeyRecord(++seq, key, del, 1000 + rng() % 30000);
        if (!(*log)->Append(e).ok()) break;
        if (del) {
          now.erase(key);
        } else {
          now[key] = e.value();
        }
        if (rng() % 4 == 0) {
          if (!(*log)->Sync().ok()) break;
          synced = now;
        }
        if (rng() % 10 == 0) {
          if (rng() % 3 == 0) disk.set_capacity(disk.used() + rng() % 40000);  // fills soon
          ReplicaLog::Compaction c;
          if ((*log)->ShouldCompact()) ++((*log)->Compact(&c).ok() ? compacted : refused);
          disk.set_capacity(UINT64_MAX);
          if (!(*log)->failure().ok()) break;
        }
      }
      if ((*log)->failure().ok() && (*log)->Sync().ok()) synced = now;
      disk.Crash();
    }
  }
  EXPECT_GT(compacted, 20);  // the test exercised both
  EXPECT_GT(refused, 5);
}

// Builds a log of 8 keys (3 MB), crashes its compaction at the `nth` step of kind `op`, with a
// power loss or with the page cache intact, and checks that the log rebuilds the state as of the
// last sync and takes records after it. *struck: whether the compaction had such a step.
void CrashCompactionAt(storage::MemoryDisk::Op op, uint64_t nth, bool power, bool* struck) {
  SCOPED_TRACE(absl::StrCat("op ", static_cast<int>(op), ", nth ", nth, ", power ", power));
  storage::MemoryDisk disk(nth);
  const std::string dir = "/data/shard-0";
  ReplicaLog::Options o;
  o.segment_bytes = kMaxFrameBytes;  // 1 MiB
  o.compact_bytes = 1 << 20;
  std::map<std::string, std::string> want, got;
  auto log = OpenInto(&disk, dir, o, &got);
  ASSERT_TRUE(log.ok()) << log.status();
  uint64_t seq = 0;
  for (int i = 0; i < 60; ++i) {  // 8 keys, some deleted: 3 MB, 3 segments
    const std::string key = absl::StrCat("k", i % 8);
    const bool del = i % 7 == 6;
    proto::LogEntry e = KeyRecord(++seq, key, del, 50000);
    ASSERT_TRUE((*log)->Append(e).ok());
    if (del) {
      want.erase(key);
    } else {
      want[key] = e.value();
    }
  }
  ASSERT_TRUE((*log)->ShouldCompact());
  // From the opening of the segment that takes the appends (the first file the compaction
  // opens) on.
  disk.HaltAt(".log", op, nth);
  ReplicaLog::Compaction c;
  const absl::Status st = (*log)->Compact(&c);  // syncs first: `want` is durable
  log->reset();
  *struck = disk.halted();
  if (!*struck) {
    ASSERT_TRUE(st.ok()) << st;
    return;
  }
  if (power) {
    disk.Crash();
  } else {
    disk.Revive();
  }
  auto again = OpenInto(&disk, dir, o, &got);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(got, want);
  proto::LogEntry later = KeyRecord(++seq, "after", false, 10);
  ASSERT_TRUE((*again)->Append(later).ok());
  ASSERT_TRUE((*again)->Sync().ok());
  again->reset();
  want["after"] = later.value();
  ASSERT_TRUE(OpenInto(&disk, dir, o, &got).ok());
  EXPECT_EQ(got, want);
}

// A crash at any step of a compaction (MemoryDisk::HaltAt: each open, append, sync, rename,
// directory sync and removal from the new segment's creation on), followed by a power loss
// or by a process restart with the page cache intact: nothing synced is lost.
TEST(ReplicaLogTest, ACrashAtAnyStepOfACompactionLosesNothingSynced) {
  using Op = storage::MemoryDisk::Op;
  std::map<int, int> halts;  // by kind of step
  for (Op op : {Op::kOpen, Op::kAppend, Op::kSync, Op::kRename, Op::kSyncDir, Op::kRemove}) {
    for (uint64_t nth = 1;; ++nth) {  // until the compaction has no nth step of this kind
      bool struck = false;
      for (bool power : {true, false}) {
        CrashCompactionAt(op, nth, power, &struck);
        if (::testing::Test::HasFatalFailure()) return;
        if (struck) ++halts[static_cast<int>(op)];
      }
      if (!struck) break;
    }
  }
  // Every kind of step, each occurrence, with and without power: the directory syncs after the
  // new segment's creation, after the rename and after the removals, the aside file's opening, the
  // new state's 8 appends and more, 4 removals (a stale aside file's, NotFound, then 3 compacted
  // segments).
  EXPECT_EQ(halts.size(), 6u);
  EXPECT_EQ(halts[static_cast<int>(Op::kSyncDir)], 6);
  EXPECT_EQ(halts[static_cast<int>(Op::kOpen)], 2);
  EXPECT_GE(halts[static_cast<int>(Op::kAppend)], 16);
  EXPECT_EQ(halts[static_cast<int>(Op::kRemove)], 8);
}

// A crash may leave the last segment's end torn: a record cut short, the final record's bytes
// partly written, or zeros. That tail is cut off and reported; the log goes on after it.
TEST(ReplicaLogTest, ATornTailIsCutOffAndReported) {
  struct Case {
    const char* name;
    std::function<void(std::string*)> damage;
    uint64_t records;
    const char* why;
  };
  const std::vector<Case> cases = {
      {"cut", [](std::string* d) { d->resize(d->size() - 3); }, 39, "an incomplete record"},
      {"header", [](std::string* d) { d->append("\x05\x00\x01", 3); }, 40, "an incomplete record"},
      {"final_crc", [](std::string* d) { (*d)[d->size() - 10] ^= 0x40; }, 39, "checksum mismatch"},
      {"zeros", [](std::string* d) { d->append(4096, '\0'); }, 40, "zeros"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    storage::PosixDisk disk;
    const std::string dir = Dir(std::string("torn_") + c.name);
    Fill(&disk, dir, 40);
    const std::string last = dir + "/" + SegmentName(31);
    std::string data = *disk.ReadAll(last);
    c.damage(&data);
    ASSERT_TRUE(disk.Truncate(last, 0).ok());
    ASSERT_TRUE((*disk.OpenForAppend(last))->Append(data).ok());
    std::vector<uint64_t> seqs;
    ReplicaLog::Recovery rec;
    auto log = OpenLog(&disk, dir, &seqs, &rec);
    ASSERT_TRUE(log.ok()) << log.status();
    EXPECT_EQ(seqs, Range(1, c.records));
    EXPECT_EQ(rec.torn_file, last);
    EXPECT_GT(rec.torn_bytes, 0u);
    EXPECT_EQ(rec.torn_why, c.why);
    // Cut for good, and the log goes on.
    ASSERT_TRUE((*log)->Append(Entry(c.records + 1)).ok());
    ASSERT_TRUE((*log)->Sync().ok());
    log->reset();
    seqs.clear();
    ReplicaLog::Recovery again;
    ASSERT_TRUE(OpenLog(&disk, dir, &seqs, &again).ok());
    EXPECT_EQ(seqs, Range(1, c.records + 1));
    EXPECT_TRUE(again.torn_file.empty());
  }
}

// Damage anywhere but the torn tail is data loss: the log refuses to open, naming the file
// and offset, and changes nothing on disk.
TEST(ReplicaLogTest, CorruptionBeforeTheTailRefusesToOpenNamingFileAndOffset) {
  // The third record of a full segment, and of the last one (records 31..40: not its final).
  for (uint64_t segment : {uint64_t{1}, uint64_t{31}}) {
    SCOPED_TRACE(segment);
    storage::PosixDisk disk;
    const std::string dir = Dir("corrupt_" + std::to_string(segment));
    Fill(&disk, dir, 40);
    const std::string path = dir + "/" + SegmentName(segment);
    std::string two;  // the segment's first two frames
    AppendFrame(Entry(segment, 64 << 10), &two);
    AppendFrame(Entry(segment + 1, 64 << 10), &two);
    std::string data = *disk.ReadAll(path);
    data[two.size() + 100] ^= 0x01;
    ASSERT_TRUE(disk.Truncate(path, 0).ok());
    ASSERT_TRUE((*disk.OpenForAppend(path))->Append(data).ok());
    std::vector<uint64_t> seqs;
    auto log = OpenLog(&disk, dir, &seqs);
    ASSERT_FALSE(log.ok());
    EXPECT_EQ(log.status().code(), absl::StatusCode::kDataLoss) << log.status();
    EXPECT_NE(log.status().message().find(path + ": corrupt log record at offset " +
                                          std::to_string(two.size()) + " (checksum mismatch)"),
              absl::string_view::npos)
        << log.status();
    EXPECT_EQ(*disk.ReadAll(path), data);    // nothing cut
    EXPECT_EQ(seqs, Range(1, segment + 1));  // replayed up to the damage
  }
}

// A disk that fills: the append fails with ResourceExhausted and the log stops; Resume cuts
// the segment back to what was synced and the log goes on from there.
class FillingDisk : public storage::PosixDisk {
 public:
  absl::StatusOr<std::unique_ptr<storage::WritableFile>> OpenForAppend(
      const std::string& path) override {
    auto f = PosixDisk::OpenForAppend(path);
    if (!f.ok()) return f;
    return std::unique_ptr<storage::WritableFile>(new File(this, *std::move(f)));
  }
  bool full = false;

 private:
  class File : public storage::WritableFile {
   public:
    File(FillingDisk* disk, std::unique_ptr<storage::WritableFile> f)
        : disk_(disk), f_(std::move(f)) {}
    absl::Status Append(absl::string_view data) override {
      if (!disk_->full) return f_->Append(data);
      // Half of it fits, as a real short write would leave it.
      (void)f_->Append(data.substr(0, data.size() / 2));
      return absl::ResourceExhaustedError("appending to x: No space left on device");
    }
    absl::Status Sync() override { return f_->Sync(); }
    uint64_t size() const override { return f_->size(); }

   private:
    FillingDisk* const disk_;
    std::unique_ptr<storage::WritableFile> f_;
  };
};

TEST(ReplicaLogTest, AFullDiskStopsTheLogUntilResumed) {
  FillingDisk disk;
  const std::string dir = Dir("full");
  std::vector<uint64_t> seqs;
  auto log = OpenLog(&disk, dir, &seqs);
  ASSERT_TRUE(log.ok());
  ReplicaLog& l = **log;
  for (uint64_t s = 1; s <= 5; ++s) ASSERT_TRUE(l.Append(Entry(s)).ok());
  ASSERT_TRUE(l.Sync().ok());
  ASSERT_TRUE(l.Append(Entry(6)).ok());  // appended, not synced
  disk.full = true;
  EXPECT_EQ(l.Append(Entry(7)).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(l.Append(Entry(8)).code(), absl::StatusCode::kResourceExhausted);  // stays stopped
  EXPECT_EQ(l.Sync().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(l.synced_seq(), 5u);
  disk.full = false;  // space returns
  // Back to the last sync: 6 was never synced (a caller under `always` never acknowledged it).
  ASSERT_TRUE(l.Resume(/*keep_written=*/false).ok());
  EXPECT_EQ(l.last_seq(), 5u);
  ASSERT_TRUE(l.Append(Entry(6)).ok());
  ASSERT_TRUE(l.Sync().ok());
  // Back to the last whole record: 7 was written whole before the disk filled on 8.
  ASSERT_TRUE(l.Append(Entry(7)).ok());
  disk.full = true;
  EXPECT_EQ(l.Append(Entry(8)).code(), absl::StatusCode::kResourceExhausted);
  disk.full = false;
  ASSERT_TRUE(l.Resume(/*keep_written=*/true).ok());
  EXPECT_EQ(l.last_seq(), 7u);
  ASSERT_TRUE(l.Append(Entry(8)).ok());
  ASSERT_TRUE(l.Sync().ok());
  log->reset();
  ReplicaLog::Recovery rec;
  ASSERT_TRUE(OpenLog(&disk, dir, &seqs, &rec).ok());
  EXPECT_EQ(seqs, Range(1, 8));
  EXPECT_TRUE(rec.torn_file.empty());  // the half-written records went with Resume
}

// Power fails at random points on a disk that keeps only what was synced, plus a seeded part of
// the rest (all, none, a torn prefix, zeros after it). After each restart the log opens, its
// records are 1..k in order with every synced record among them, and it goes on from k.
TEST(ReplicaLogTest, EverySyncedRecordSurvivesPowerLossAndTheLogAlwaysOpens) {
  int torn = 0, lost_unsynced = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE(seed);
    storage::MemoryDisk disk(seed);
    std::mt19937_64 rng(seed);
    uint64_t synced = 0;
    for (int life = 0; life < 6; ++life) {
      std::vector<uint64_t> seqs;
      ReplicaLog::Recovery rec;
      auto log = OpenLog(&disk, "/data/shard0", &seqs, &rec);
      ASSERT_TRUE(log.ok()) << log.status();
      ASSERT_EQ(seqs, Range(1, rec.last_seq));
      ASSERT_GE(rec.last_seq, synced);
      torn += !rec.torn_file.empty();
      uint64_t next = rec.last_seq + 1;
      synced = rec.last_seq;  // what it replayed is on disk now (the cut tail synced away)
      const int records = 1 + static_cast<int>(rng() % 60);
      for (int i = 0; i < records; ++i) {
        const size_t bytes = rng() % 3 == 0 ? (rng() % (64 << 10)) : rng() % 200;
        ASSERT_TRUE((*log)->Append(Entry(next++, bytes)).ok());
        if (rng() % 8 == 0) {
          ASSERT_TRUE((*log)->Sync().ok());
          synced = (*log)->last_seq();
        }
      }
      lost_unsynced += (*log)->last_seq() > synced;
      disk.Crash();
    }
  }
  // The seeds exercise what they should: torn tails and unsynced records.
  EXPECT_GT(torn, 10);
  EXPECT_GT(lost_unsynced, 10);
}

}  // namespace
}  // namespace unloadkv::server
