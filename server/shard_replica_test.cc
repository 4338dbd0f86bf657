// A shard replica's refusals as a backup (every one changes nothing), its fence, and its
// commit rule as a primary without links.
#include "server/shard_replica.h"

#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "transport/backends/open_device.h"
#include "transport/storage/memory_disk.h"

namespace unloadkv::server {
namespace {

class ShardReplicaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    device_ = std::move(*backends::OpenDevice(backends::DeviceSpec()));
    engine_ = std::move(*engine::Engine::Create(device_.get(), engine::EngineOptions()));
    auto r = ShardReplica::Create(engine_.get(), 7, 4 << 20, false, &reaper_,
                                  [this](uint64_t peer) { closed_.push_back(peer); });
    ASSERT_TRUE(r.ok()) << r.status();
    replica_ = *r;
  }
  void TearDown() override {
    replica_.reset();
    reaper_.Drain();
  }

  proto::AttachRequest AttachAt(uint64_t epoch) {
    proto::AttachRequest a;
    a.set_shard(7);
    a.set_epoch(epoch);
    a.set_primary("p");
    a.set_arena_bytes(4 << 20);
    return a;
  }
  static proto::ReplicateRequest Put(uint64_t epoch, uint64_t seq, const std::string& key,
                                     uint64_t offset) {
    proto::ReplicateRequest r;
    r.set_shard(7);
    r.set_epoch(epoch);
    proto::ReplicationRecord* rec = r.add_records();
    rec->set_op(proto::ReplicationRecord::PUT);
    rec->set_seq(seq);
    rec->set_key(key);
    rec->set_offset(offset);
    rec->set_capacity(64);
    rec->set_size(10);
    rec->set_version(seq);
    return r;
  }

  Reaper reaper_;
  std::unique_ptr<rnic::Device> device_;
  std::unique_ptr<engine::Engine> engine_;
  std::shared_ptr<ShardReplica> replica_;
  std::vector<uint64_t> closed_;
};

TEST_F(ShardReplicaTest, ABackupAppliesOnlyItsPrimarysRecordsInSequence) {
  proto::AttachRequest wrong_size = AttachAt(3);
  wrong_size.set_arena_bytes(8 << 20);
  EXPECT_EQ(replica_->Attach(wrong_size, 11).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(replica_->Attach(AttachAt(3), 11).ok());
  ASSERT_TRUE(replica_->Apply(Put(3, 1, "a", 0), 11).ok());
  // Another connection, a gap, a record repeated, a slot already in use: refused.
  EXPECT_EQ(replica_->Apply(Put(3, 2, "b", 64), 12).status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(replica_->Apply(Put(3, 3, "b", 64), 11).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(replica_->Apply(Put(3, 1, "b", 64), 11).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(replica_->Apply(Put(3, 2, "b", 0), 11).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(replica_->store().stats().keys, 1u);
  // The next record in sequence still applies: refusals changed nothing.
  absl::StatusOr<proto::ReplicateResponse> ok = replica_->Apply(Put(3, 2, "b", 64), 11);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->applied_seq(), 2u);
  EXPECT_EQ(replica_->store().stats().keys, 2u);
}

// Regression (cluster_sim seed 128): a backup attached with an empty snapshot lost the first
// live records to a network cut; it then took the next one as its first, acked it, and the
// primary counted the lost ones acked too. The snapshot now names the first live record, and
// the backup refuses any other (the primary then moves it back to joining).
TEST_F(ShardReplicaTest, ABackupRefusesAFirstLiveRecordOtherThanTheOneItsSnapshotNamed) {
  ASSERT_TRUE(replica_->Attach(AttachAt(3), 11).ok());
  proto::ReplicateRequest snapshot;
  snapshot.set_shard(7);
  snapshot.set_epoch(3);
  snapshot.set_snapshot(true);
  snapshot.set_next_seq(5);
  ASSERT_TRUE(replica_->Apply(snapshot, 11).ok());
  const absl::Status gap = replica_->Apply(Put(3, 6, "b", 64), 11).status();
  EXPECT_EQ(gap.code(), absl::StatusCode::kFailedPrecondition) << gap;
  EXPECT_NE(gap.message().find("expected 5"), absl::string_view::npos) << gap;
  EXPECT_EQ(replica_->store().stats().keys, 0u);
  absl::StatusOr<proto::ReplicateResponse> ok = replica_->Apply(Put(3, 5, "a", 0), 11);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->applied_seq(), 5u);
  // A snapshot request after live records is refused; a new attach starts over.
  EXPECT_EQ(replica_->Apply(snapshot, 11).status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(replica_->Attach(AttachAt(4), 12).ok());
  EXPECT_TRUE(replica_->Apply(Put(4, 9, "c", 0), 12).ok()) << "no snapshot said otherwise";
}

TEST_F(ShardReplicaTest, TheFenceRefusesOlderEpochsAndClosesTheOldPrimarysConnection) {
  ASSERT_TRUE(replica_->Attach(AttachAt(3), 11).ok());
  ASSERT_TRUE(replica_->Apply(Put(3, 1, "a", 0), 11).ok());
  replica_->RaiseFence(4);
  EXPECT_EQ(closed_, std::vector<uint64_t>{11});
  EXPECT_EQ(replica_->Apply(Put(3, 2, "b", 64), 11).status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(replica_->Attach(AttachAt(3), 12).status().code(), absl::StatusCode::kAborted);
  replica_->RaiseFence(2);  // never lowers
  EXPECT_EQ(replica_->fence(), 4u);
  // A primary of the new epoch attaches it afresh.
  ASSERT_TRUE(replica_->Attach(AttachAt(4), 13).ok());
  EXPECT_EQ(replica_->store().stats().keys, 0u);
  EXPECT_TRUE(replica_->Apply(Put(4, 1, "c", 0), 13).ok());
}

TEST_F(ShardReplicaTest, APrimaryWithoutBackupsCommitsAtOnceAndABackupRefusesWrites) {
  auto grant = replica_->store().GrantSlots(1, 10, 1);
  ASSERT_TRUE(grant.ok());
  auto m = replica_->store().PreparePut(1, "k", (*grant)[0].id, 10);
  ASSERT_TRUE(m.ok());
  absl::StatusOr<uint64_t> as_backup = absl::UnknownError("not called");
  replica_->Submit(*m, [&](absl::StatusOr<uint64_t> v) { as_backup = v; });
  EXPECT_EQ(as_backup.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(replica_->store().stats().arena_used_bytes, 0u);  // the prepared slot was freed

  replica_->BecomePrimary(1);
  grant = replica_->store().GrantSlots(1, 10, 1);
  m = replica_->store().PreparePut(1, "k", (*grant)[0].id, 10);
  absl::StatusOr<uint64_t> version = absl::UnknownError("not called");
  replica_->Submit(*m, [&](absl::StatusOr<uint64_t> v) { version = v; });
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_TRUE(replica_->store().Get("k").ok());
  absl::Status barrier = absl::UnknownError("not called");
  replica_->Barrier([&](absl::Status st) { barrier = st; });
  EXPECT_TRUE(barrier.ok());
}

// With a log: a write commits only once logged; a full disk fails writes with
// RESOURCE_EXHAUSTED, changing nothing, while reads go on; once space returns writes resume;
// a replica recovered from the log holds exactly the committed writes.
TEST_F(ShardReplicaTest, WithALogAWriteCommitsOnlyOnceLoggedAndAFullDiskRefusesWrites) {
  storage::MemoryDisk disk;
  ReplicaLog::Recovery rec;
  ASSERT_TRUE(replica_
                  ->RecoverAndLog(&disk, "/data/shard-7", *FsyncPolicy::Parse("always"),
                                  RealClock::Get(), &rec)
                  .ok());
  replica_->BecomePrimary(1);
  // Puts `key` = `value`; waits (bounded) for its callback.
  auto put = [&](const std::string& key, const std::string& value) -> absl::StatusOr<uint64_t> {
    auto grant = replica_->store().GrantSlots(1, static_cast<uint32_t>(value.size()), 1);
    if (!grant.ok()) return grant.status();
    std::memcpy(reinterpret_cast<char*>(replica_->arena_addr() + (*grant)[0].slot.offset),
                value.data(), value.size());
    auto m =
        replica_->store().PreparePut(1, key, (*grant)[0].id, static_cast<uint32_t>(value.size()));
    if (!m.ok()) return m.status();
    std::mutex mu;
    std::optional<absl::StatusOr<uint64_t>> got;
    replica_->Submit(*m, [&](absl::StatusOr<uint64_t> v) {
      std::lock_guard<std::mutex> l(mu);
      got = v;
    });
    for (int i = 0; i < 5000; ++i) {
      {
        std::lock_guard<std::mutex> l(mu);
        if (got.has_value()) return *got;
      }
      absl::SleepFor(absl::Milliseconds(1));
    }
    return absl::DeadlineExceededError("no callback in 5 s");
  };
  ASSERT_TRUE(put("a", "alpha").ok());
  ASSERT_TRUE(put("b", "beta").ok());
  disk.set_capacity(disk.used());  // full
  absl::StatusOr<uint64_t> refused = put("c", "gamma");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "log")) << refused.status();
  EXPECT_FALSE(replica_->store().Get("c").ok());  // changed nothing
  EXPECT_TRUE(replica_->store().Get("a").ok());   // reads go on
  disk.set_capacity(UINT64_MAX);
  absl::StatusOr<uint64_t> resumed = absl::UnknownError("");
  // The log tries again once a second.
  for (int i = 0; i < 60 && !resumed.ok(); ++i) {
    resumed = put("c", "gamma");
    if (!resumed.ok()) absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  replica_.reset();  // the log's last sync
  auto r = ShardReplica::Create(engine_.get(), 7, 4 << 20, false, &reaper_, [](uint64_t) {});
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE((*r)->RecoverAndLog(&disk, "/data/shard-7", *FsyncPolicy::Parse("always"),
                                  RealClock::Get(), &rec)
                  .ok());
  EXPECT_EQ((*r)->store().stats().keys, 3u);
  absl::StatusOr<KvStore::Value> c = (*r)->store().Get("c");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->bytes, "gamma");
  EXPECT_EQ((*r)->store().Get("a")->bytes, "alpha");
}

// Waits (bounded) for an asynchronous answer.
template <typename T>
class Answer {
 public:
  std::function<void(T)> Callback() {
    return [this](T v) {
      std::lock_guard<std::mutex> l(mu_);
      got_ = std::move(v);
    };
  }
  std::optional<T> Wait() {
    for (int i = 0; i < 5000; ++i) {
      {
        std::lock_guard<std::mutex> l(mu_);
        if (got_.has_value()) return got_;
      }
      absl::SleepFor(absl::Milliseconds(1));
    }
    return std::nullopt;
  }

 private:
  std::mutex mu_;
  std::optional<T> got_;
};

// A backup with a log logs the state a transfer brings and the live records after it, answers
// only once they are on disk, and a replica recovered from that log (after a power loss) holds
// them again; an attach starts a new state, and one cut short recovers as nothing to serve.
TEST_F(ShardReplicaTest, ABackupLogsItsTransferredStateAndRecordsAndRecoversThem) {
  using Reply = absl::StatusOr<proto::ReplicateResponse>;
  storage::MemoryDisk disk(3);
  const FsyncPolicy always = *FsyncPolicy::Parse("always");
  ASSERT_TRUE(
      replica_->RecoverAndLog(&disk, "/data/shard-7", always, RealClock::Get(), nullptr).ok());
  ASSERT_TRUE(replica_->Attach(AttachAt(3), 11).ok());
  auto value_at = [&](uint64_t offset, const std::string& v) {
    std::memcpy(reinterpret_cast<char*>(replica_->arena_addr() + offset), v.data(), v.size());
  };
  proto::ReplicateRequest snapshot = Put(3, 0, "s", 0);
  snapshot.set_snapshot(true);
  snapshot.set_snapshot_end(true);
  snapshot.set_next_seq(5);
  value_at(0, "snapshot!!");
  Answer<Reply> a1;
  replica_->Apply(snapshot, 11, a1.Callback());
  std::optional<Reply> r1 = a1.Wait();
  ASSERT_TRUE(r1.has_value() && r1->ok()) << (r1 ? r1->status().ToString() : "no answer");
  value_at(64, "live value");
  Answer<Reply> a2;
  replica_->Apply(Put(3, 5, "a", 64), 11, a2.Callback());
  std::optional<Reply> r2 = a2.Wait();
  ASSERT_TRUE(r2.has_value() && r2->ok()) << (r2 ? r2->status().ToString() : "no answer");
  EXPECT_EQ((*r2)->applied_seq(), 5u);
  EXPECT_GE(replica_->log()->stats().syncs, 2u);
  EXPECT_FALSE(replica_->recovered());  // attached: it follows a primary now

  auto restart = [&]() -> std::shared_ptr<ShardReplica> {
    replica_.reset();
    disk.Crash();  // what was not synced is lost; every answered record was
    auto r = ShardReplica::Create(engine_.get(), 7, 4 << 20, false, &reaper_, [](uint64_t) {});
    EXPECT_TRUE(r.ok());
    ReplicaLog::Recovery rec;
    EXPECT_TRUE((*r)->RecoverAndLog(&disk, "/data/shard-7", always, RealClock::Get(), &rec).ok());
    return *r;
  };
  replica_ = restart();
  EXPECT_TRUE(replica_->recovered());
  EXPECT_EQ(replica_->last_seq(), 5u);
  ASSERT_TRUE(replica_->store().Get("s").ok());
  EXPECT_EQ(replica_->store().Get("s")->bytes, "snapshot!!");
  EXPECT_EQ(replica_->store().Get("a")->bytes, "live value");
  // Promoted, it numbers its writes after what it holds.
  replica_->BecomePrimary(4);
  EXPECT_FALSE(replica_->recovered());
  EXPECT_EQ(replica_->last_seq(), 5u);

  // Attached again, by a newer primary: a new state, cut short by a crash.
  ASSERT_TRUE(replica_->Attach(AttachAt(5), 12).ok());
  proto::ReplicateRequest partial = Put(5, 0, "t", 128);
  partial.set_snapshot(true);
  partial.set_next_seq(9);
  Answer<Reply> a3;
  replica_->Apply(partial, 12, a3.Callback());
  ASSERT_TRUE(a3.Wait().has_value());
  replica_ = restart();
  EXPECT_FALSE(replica_->recovered());
  EXPECT_EQ(replica_->store().stats().keys, 0u);
  replica_.reset();  // its log's last sync, before the disk goes
}

// Attached with `delta`, a backup that holds a state keeps it and says where it stands (its
// last record, and its last write's seq and epoch); the primary may go on from there, or send
// a snapshot, which empties it first. Without `delta`, or with nothing to keep, it is emptied.
TEST_F(ShardReplicaTest, AnAttachForADeltaKeepsTheStateUntilASnapshotReplacesIt) {
  using Reply = absl::StatusOr<proto::ReplicateResponse>;
  storage::MemoryDisk disk(5);
  ASSERT_TRUE(replica_
                  ->RecoverAndLog(&disk, "/data/shard-7", *FsyncPolicy::Parse("always"),
                                  RealClock::Get(), nullptr)
                  .ok());
  auto apply = [&](const proto::ReplicateRequest& req, uint64_t peer) -> Reply {
    Answer<Reply> a;
    replica_->Apply(req, peer, a.Callback());
    std::optional<Reply> r = a.Wait();
    return r.has_value() ? *r : absl::DeadlineExceededError("no answer");
  };
  proto::AttachRequest delta = AttachAt(4);
  delta.set_delta(true);
  absl::StatusOr<proto::AttachResponse> empty = replica_->Attach(delta, 11);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->check_epoch(), 0u);  // nothing to keep
  proto::ReplicateRequest snapshot = Put(4, 0, "s", 0);
  snapshot.set_snapshot(true);
  snapshot.set_snapshot_end(true);
  snapshot.set_next_seq(5);
  ASSERT_TRUE(apply(snapshot, 11).ok());
  ASSERT_TRUE(apply(Put(4, 5, "a", 64), 11).ok());
  proto::ReplicateRequest barrier = Put(4, 6, "", 0);
  barrier.mutable_records(0)->set_op(proto::ReplicationRecord::NOOP);
  ASSERT_TRUE(apply(barrier, 11).ok());

  delta.set_epoch(5);
  absl::StatusOr<proto::AttachResponse> kept = replica_->Attach(delta, 12);
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->last_seq(), 6u);
  EXPECT_EQ(kept->check_seq(), 5u);
  EXPECT_EQ(kept->check_epoch(), 4u);
  EXPECT_TRUE(replica_->store().Get("a").ok());
  EXPECT_EQ(apply(Put(5, 8, "b", 128), 12).status().code(),
            absl::StatusCode::kFailedPrecondition);  // not right after 6
  Reply next = apply(Put(5, 7, "b", 128), 12);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(replica_->store().stats().keys, 3u);

  delta.set_epoch(6);
  ASSERT_TRUE(replica_->Attach(delta, 13).ok());
  proto::ReplicateRequest other = Put(6, 0, "t", 192);
  other.set_snapshot(true);
  other.set_snapshot_end(true);
  other.set_next_seq(3);
  ASSERT_TRUE(apply(other, 13).ok());
  EXPECT_EQ(replica_->store().stats().keys, 1u);  // the snapshot replaced the kept state
  EXPECT_TRUE(replica_->store().Get("t").ok());

  ASSERT_TRUE(apply(Put(6, 3, "u", 256), 13).ok());
  absl::StatusOr<proto::AttachResponse> full = replica_->Attach(AttachAt(7), 14);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->check_epoch(), 0u);
  EXPECT_EQ(replica_->store().stats().keys, 0u);
  replica_.reset();  // its log's last sync, before the disk goes
}

// A backup that applies a SPLIT record copies the keys of the range into its replica of the
// new shard (values at the same offsets) as that replica's whole state at the record's seq and
// epoch, and keeps its own state. Without a replica to copy into, or with a bad key, the record
// is refused and changes nothing.
TEST_F(ShardReplicaTest, ABackupCopiesTheRangeOfASplitIntoTheNewShardsReplica) {
  ASSERT_TRUE(replica_->Attach(AttachAt(3), 11).ok());
  char* arena = reinterpret_cast<char*>(replica_->arena_addr());
  const char* const keys[] = {"a", "m", "x"};
  for (int i = 0; i < 3; ++i) {
    std::memcpy(arena + 64 * i, absl::StrCat("value of ", keys[i]).data(), 10);
    ASSERT_TRUE(replica_->Apply(Put(3, i + 1, keys[i], 64 * i), 11).ok());
  }
  proto::ReplicateRequest split;
  split.set_shard(7);
  split.set_epoch(3);
  proto::ReplicationRecord* rec = split.add_records();
  rec->set_op(proto::ReplicationRecord::SPLIT);
  rec->set_seq(4);
  rec->set_key("m");
  rec->set_split_shard(9);
  const absl::Status no_target = replica_->Apply(split, 11).status();
  EXPECT_EQ(no_target.code(), absl::StatusCode::kFailedPrecondition) << no_target;
  auto made = ShardReplica::Create(engine_.get(), 9, 4 << 20, false, &reaper_, nullptr);
  ASSERT_TRUE(made.ok()) << made.status();
  std::shared_ptr<ShardReplica> target = *made;
  replica_->SetSplitTargets([target](uint32_t id) -> absl::StatusOr<std::shared_ptr<ShardReplica>> {
    if (id != 9) return absl::NotFoundError("no such shard");
    return target;
  });
  proto::ReplicateRequest bad = split;
  bad.mutable_records(0)->set_key("");
  EXPECT_EQ(replica_->Apply(bad, 11).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(target->store().stats().keys, 0u);
  absl::StatusOr<proto::ReplicateResponse> ok = replica_->Apply(split, 11);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->applied_seq(), 4u);
  EXPECT_EQ(replica_->store().stats().keys, 3u);  // its own state is unchanged
  EXPECT_EQ(target->store().stats().keys, 2u);
  EXPECT_EQ(target->store().Get("m")->bytes, "value of m");
  EXPECT_EQ(target->store().Get("x")->bytes, "value of x");
  EXPECT_FALSE(target->store().Get("a").ok());
  EXPECT_EQ(target->born_seq(), 4u);
  EXPECT_EQ(target->last_seq(), 4u);
  // A primary of the new shard attaching it with `delta` finds the state it was born with.
  proto::AttachRequest attach = AttachAt(4);
  attach.set_shard(9);
  attach.set_delta(true);
  absl::StatusOr<proto::AttachResponse> kept = target->Attach(attach, 21);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->last_seq(), 4u);
  EXPECT_EQ(kept->check_seq(), 4u);
  EXPECT_EQ(kept->check_epoch(), 3u);
  EXPECT_EQ(target->store().stats().keys, 2u);
  target.reset();
}

// As primary: from BeginSplit on, writes of the keys that move are refused ABORTED (nothing
// applied), the others go on; EndSplit ends the refusal. A key outside the range is no split.
TEST_F(ShardReplicaTest, APrimarySplittingRefusesWritesOfTheRangeThatMovesOnly) {
  replica_->BecomePrimary(1);
  replica_->SetRange("", "");
  auto submit = [this](const std::string& key) {
    auto grant = replica_->store().GrantSlots(1, 10, 1);
    EXPECT_TRUE(grant.ok());
    auto m = replica_->store().PreparePut(1, key, (*grant)[0].id, 10);
    EXPECT_TRUE(m.ok());
    absl::StatusOr<uint64_t> version = absl::UnknownError("not done");
    replica_->Submit(*m, [&](absl::StatusOr<uint64_t> v) { version = v; });
    return version.status();
  };
  std::optional<absl::StatusOr<uint64_t>> split;
  replica_->BeginSplit("m", 9, [&](absl::StatusOr<uint64_t> seq) { split = seq; });
  ASSERT_TRUE(split.has_value());
  ASSERT_TRUE(split->ok()) << split->status();  // no backups: it committed at once
  EXPECT_TRUE(replica_->splitting());
  EXPECT_TRUE(submit("a").ok());
  const absl::Status refused = submit("q");
  EXPECT_EQ(refused.code(), absl::StatusCode::kAborted) << refused;
  EXPECT_FALSE(replica_->store().Get("q").ok());
  std::optional<absl::StatusOr<uint64_t>> second;
  replica_->BeginSplit("t", 10, [&](absl::StatusOr<uint64_t> seq) { second = seq; });
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->status().code(), absl::StatusCode::kFailedPrecondition);  // one at a time
  replica_->EndSplit();
  EXPECT_TRUE(submit("q").ok());
  replica_->SetRange("", "m");
  std::optional<absl::StatusOr<uint64_t>> outside;
  replica_->BeginSplit("x", 9, [&](absl::StatusOr<uint64_t> seq) { outside = seq; });
  ASSERT_TRUE(outside.has_value());
  EXPECT_EQ(outside->status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(replica_->splitting());
}

}  // namespace
}  // namespace unloadkv::server
