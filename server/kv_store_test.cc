// The store's rules: grants are per client and single-use, a value is invisible until its Put,
// refusals change nothing, a dropped client's grants come back, Scan is ordered and bounded.
#include "server/kv_store.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "proto/field_record.h"

namespace unloadkv::server {
namespace {

class KvStoreTest : public ::testing::Test {
 protected:
  KvStoreTest() : arena_(4 * SlabArena::kChunkBytes), store_(arena_.data(), arena_.size()) {}

  // What a client does: get a grant, write the value into the slot, Put.
  absl::StatusOr<uint64_t> PutValue(uint64_t client, const std::string& key,
                                    const std::string& value) {
    auto g = store_.GrantSlots(client, value.size(), 1);
    if (!g.ok()) return g.status();
    std::memcpy(arena_.data() + (*g)[0].slot.offset, value.data(), value.size());
    return store_.Put(client, key, (*g)[0].id, value.size());
  }

  // A grant holding `bytes`, written as a client would.
  uint64_t Written(uint64_t client, const std::string& bytes) {
    auto g = store_.GrantSlots(client, std::max<size_t>(bytes.size(), 1), 1);
    EXPECT_TRUE(g.ok()) << g.status();
    std::memcpy(arena_.data() + (*g)[0].slot.offset, bytes.data(), bytes.size());
    return (*g)[0].id;
  }
  absl::StatusOr<uint64_t> Merge(uint64_t client, const std::string& key,
                                 const std::string& update) {
    absl::StatusOr<KvStore::Mutation> m =
        store_.PrepareMerge(client, key, Written(client, update), update.size());
    if (!m.ok()) return m.status();
    store_.Commit(*m);
    return m->version;
  }
  static std::string Record(std::vector<std::pair<std::string, std::string>> fields) {
    std::string out;
    for (const auto& [n, v] : fields) proto::AppendField(n, v, &out);
    return out;
  }

  std::vector<char> arena_;
  KvStore store_;
};

TEST_F(KvStoreTest, PutGetDeleteAndVersionsIncrease) {
  auto v1 = PutValue(1, "k", "one");
  ASSERT_TRUE(v1.ok());
  auto v2 = PutValue(1, "k", "two");
  ASSERT_TRUE(v2.ok());
  EXPECT_GT(*v2, *v1);
  auto got = store_.Get("k");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->bytes, "two");
  EXPECT_EQ(got->version, *v2);
  EXPECT_EQ(store_.stats().arena_used_bytes, 64u);  // the old slot was freed
  auto d = store_.Delete("k");
  ASSERT_TRUE(d.ok());
  EXPECT_GT(*d, *v2);
  EXPECT_EQ(store_.Get("k").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_.Delete("k").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_.stats().arena_used_bytes, 0u);
}

TEST_F(KvStoreTest, MeasureCountsLiveBytesAndFindsTheMedianKey) {
  EXPECT_EQ(store_.Measure().keys, 0u);
  EXPECT_EQ(store_.Measure().median_key, "");
  ASSERT_TRUE(PutValue(1, "a", std::string(100, 'x')).ok());
  EXPECT_EQ(store_.Measure().median_key, "");  // one key: nowhere to split
  ASSERT_TRUE(PutValue(1, "z", std::string(1, 'x')).ok());
  EXPECT_EQ(store_.Measure().median_key, "z");  // the halfway byte is in "a": the next key
  ASSERT_TRUE(store_.Delete("z").ok());
  ASSERT_TRUE(PutValue(1, "b", std::string(10, 'x')).ok());
  ASSERT_TRUE(PutValue(1, "c", std::string(10, 'x')).ok());
  ASSERT_TRUE(PutValue(1, "d", std::string(80, 'x')).ok());
  KvStore::Size size = store_.Measure();
  EXPECT_EQ(size.keys, 4u);
  EXPECT_EQ(size.live_bytes, 200u);
  EXPECT_EQ(size.median_key, "b");  // byte 101 of 200
  ASSERT_TRUE(store_.Delete("a").ok());
  ASSERT_TRUE(PutValue(1, "b", std::string(50, 'x')).ok());  // replaced, not added
  size = store_.Measure();
  EXPECT_EQ(size.keys, 3u);
  EXPECT_EQ(size.live_bytes, 140u);
  EXPECT_EQ(size.median_key, "d");  // 60 bytes before it, 80 in it
}

TEST_F(KvStoreTest, ForgedStaleAndForeignGrantsChangeNothing) {
  ASSERT_TRUE(PutValue(1, "k", "live").ok());
  auto g = store_.GrantSlots(1, 10, 2);
  ASSERT_TRUE(g.ok());
  std::memcpy(arena_.data() + (*g)[0].slot.offset, "forged", 6);
  KvStore::Stats before = store_.stats();
  // Unknown id, another client's grant, a size over the slot.
  EXPECT_EQ(store_.Put(1, "k", 999999, 6).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_.Put(2, "k", (*g)[0].id, 6).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_.Put(1, "k", (*g)[0].id, 65).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_.Put(1, std::string(257, 'x'), (*g)[0].id, 6).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_.Get("k")->bytes, "live");
  EXPECT_EQ(store_.stats().arena_used_bytes, before.arena_used_bytes);
  // Used once, then stale.
  ASSERT_TRUE(store_.Put(1, "k", (*g)[0].id, 6).ok());
  EXPECT_EQ(store_.Get("k")->bytes, "forged");
  EXPECT_EQ(store_.Put(1, "k2", (*g)[0].id, 6).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_.Get("k2").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(KvStoreTest, DroppedClientsGrantsAreFreedAndInvisible) {
  auto g = store_.GrantSlots(7, 1000, 5);
  ASSERT_TRUE(g.ok());
  std::memcpy(arena_.data() + (*g)[0].slot.offset, "partial", 7);  // written, never Put
  EXPECT_EQ(store_.stats().grants_outstanding, 5u);
  EXPECT_EQ(store_.DropClient(7), 5u);
  EXPECT_EQ(store_.stats().arena_used_bytes, 0u);
  EXPECT_EQ(store_.Put(7, "k", (*g)[0].id, 7).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_.stats().keys, 0u);
}

TEST_F(KvStoreTest, GrantLimitsAndArenaExhaustion) {
  EXPECT_EQ(store_.GrantSlots(1, 10, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_.GrantSlots(1, 10, 65).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_.GrantSlots(1, kMaxValueBytes + 1, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  for (int i = 0; i < 16; ++i) ASSERT_TRUE(store_.GrantSlots(1, 10, 64).ok());
  EXPECT_EQ(store_.GrantSlots(1, 10, 1).status().code(), absl::StatusCode::kResourceExhausted);
  // The three chunks left hold 48 slots of 64 KiB: a request larger than what is left gets
  // what is left, and one more gets nothing and changes nothing.
  EXPECT_EQ(store_.GrantSlots(2, 40000, 40)->size(), 40u);
  absl::StatusOr<std::vector<KvStore::Grant>> rest = store_.GrantSlots(3, 40000, 64);
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(rest->size(), 8u);
  const KvStore::Stats full = store_.stats();
  EXPECT_EQ(full.arena_used_bytes, full.arena_bytes - (SlabArena::kChunkBytes - 64 * 1024));
  EXPECT_EQ(store_.GrantSlots(4, 40000, 1).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(store_.stats().arena_used_bytes, full.arena_used_bytes);
  EXPECT_EQ(store_.stats().grants_outstanding, full.grants_outstanding);
}

TEST_F(KvStoreTest, ScanIsOrderedBoundedAndPaged) {
  for (char c = 'a'; c <= 'j'; ++c) ASSERT_TRUE(PutValue(1, std::string(1, c), "v").ok());
  auto r = store_.Scan("c", "g", 100);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->items.size(), 4u);
  EXPECT_EQ(r->items.front().first, "c");
  EXPECT_EQ(r->items.back().first, "f");
  EXPECT_FALSE(r->more);
  r = store_.Scan("", "", 3);
  ASSERT_EQ(r->items.size(), 3u);
  EXPECT_TRUE(r->more);
  r = store_.Scan("h", "", 3);
  EXPECT_EQ(r->items.size(), 3u);
  EXPECT_FALSE(r->more);
  EXPECT_EQ(store_.Scan("", "", 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_.Scan("", "", 1001).status().code(), absl::StatusCode::kInvalidArgument);
  // Large values: the byte budget stops a page early but never returns an empty page.
  std::string big(40000, 'x');
  ASSERT_TRUE(PutValue(1, "big1", big).ok());
  ASSERT_TRUE(PutValue(1, "big2", big).ok());
  r = store_.Scan("big", "c", 10);
  ASSERT_EQ(r->items.size(), 1u);
  EXPECT_TRUE(r->more);
}

TEST_F(KvStoreTest, APreparedWriteIsInvisibleUntilCommitted) {
  ASSERT_TRUE(PutValue(1, "k", "old").ok());
  auto g = store_.GrantSlots(1, 3, 1);
  ASSERT_TRUE(g.ok());
  std::memcpy(arena_.data() + (*g)[0].slot.offset, "new", 3);
  absl::StatusOr<KvStore::Mutation> m = store_.PreparePut(1, "k", (*g)[0].id, 3);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(store_.Get("k")->bytes, "old");
  // The grant is used up by the prepare.
  EXPECT_EQ(store_.PreparePut(1, "k", (*g)[0].id, 3).status().code(),
            absl::StatusCode::kFailedPrecondition);
  store_.Commit(*m);
  EXPECT_EQ(store_.Get("k")->bytes, "new");
  EXPECT_EQ(store_.Get("k")->version, m->version);

  absl::StatusOr<KvStore::Mutation> d = store_.PrepareDelete("k");
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(store_.Get("k").ok());
  store_.Commit(*d);
  EXPECT_EQ(store_.Get("k").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_.PrepareDelete("k").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_.stats().arena_used_bytes, 0u);
}

// A backup applying the primary's mutations holds the same keys, slots and versions, and can
// take over: its own allocations never land on a live slot.
TEST_F(KvStoreTest, AMirrorAppliesThePrimarysSlotsAndCanTakeOver) {
  std::vector<char> mirror_arena(arena_.size());
  KvStore mirror(mirror_arena.data(), mirror_arena.size());
  for (int i = 0; i < 200; ++i) {
    const std::string key = "k" + std::to_string(i % 50);
    auto g = store_.GrantSlots(1, 100 + i, 1);
    ASSERT_TRUE(g.ok());
    absl::StatusOr<KvStore::Mutation> m = store_.PreparePut(1, key, (*g)[0].id, 100 + i);
    ASSERT_TRUE(m.ok());
    ASSERT_TRUE(mirror.ApplyMirrored(*m).ok());
    store_.Commit(*m);
    if (i % 7 == 0) {
      absl::StatusOr<KvStore::Mutation> d = store_.PrepareDelete(key);
      ASSERT_TRUE(d.ok());
      ASSERT_TRUE(mirror.ApplyMirrored(*d).ok());
      store_.Commit(*d);
    }
  }
  std::vector<KvStore::Mutation> a = store_.Snapshot(), b = mirror.Snapshot();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].key, b[i].key);
    EXPECT_EQ(a[i].slot.offset, b[i].slot.offset);
    EXPECT_EQ(a[i].version, b[i].version);
  }
  EXPECT_EQ(mirror.version(), store_.version());
  EXPECT_EQ(mirror.stats().arena_used_bytes, store_.stats().arena_used_bytes);
  // A slot the mirror already holds is refused, changing nothing.
  EXPECT_EQ(mirror.ApplyMirrored(a[0]).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(mirror.stats().keys, a.size());
  // Promoted, it grants only free slots.
  std::set<uint64_t> live;
  for (const auto& m : b) live.insert(m.slot.offset);
  auto g = mirror.GrantSlots(9, 200, 64);
  ASSERT_TRUE(g.ok());
  for (const auto& grant : *g) EXPECT_EQ(live.count(grant.slot.offset), 0u);
  mirror.Clear();
  EXPECT_EQ(mirror.stats().keys, 0u);
  EXPECT_EQ(mirror.stats().arena_used_bytes, 0u);
}

// Two DELETEs of one key prepared before either commits: the first finds the key, the second
// learns at its commit that it did not (NOT_FOUND), never both OK.
TEST_F(KvStoreTest, ADeleteBehindAPendingDeleteIsDecidedAtCommit) {
  ASSERT_TRUE(PutValue(1, "k", "v").ok());
  absl::StatusOr<KvStore::Mutation> d1 = store_.PrepareDelete("k");
  absl::StatusOr<KvStore::Mutation> d2 = store_.PrepareDelete("k");
  ASSERT_TRUE(d1.ok());
  ASSERT_TRUE(d2.ok()) << "the answer depends on d1, which has not committed";
  EXPECT_TRUE(store_.Commit(*d1));
  EXPECT_FALSE(store_.Commit(*d2));
  // Nothing pending and nothing there: refused at once.
  EXPECT_EQ(store_.PrepareDelete("k").status().code(), absl::StatusCode::kNotFound);
  // A DELETE behind a pending PUT of a new key finds it.
  auto g = store_.GrantSlots(1, 1, 1);
  ASSERT_TRUE(g.ok());
  absl::StatusOr<KvStore::Mutation> p = store_.PreparePut(1, "n", (*g)[0].id, 1);
  absl::StatusOr<KvStore::Mutation> d3 = store_.PrepareDelete("n");
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(d3.ok());
  EXPECT_TRUE(store_.Commit(*p));
  EXPECT_TRUE(store_.Commit(*d3));
  EXPECT_EQ(store_.Get("n").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_.stats().arena_used_bytes, 0u);
}

}  // namespace
}  // namespace unloadkv::server

namespace unloadkv::server {
namespace {

TEST_F(KvStoreTest, AMergeReplacesNamedFieldsAndKeepsTheOthers) {
  // Onto no value: the update is the record.
  ASSERT_TRUE(Merge(1, "r", Record({{"a", "1"}, {"b", "2"}})).ok());
  auto v = Merge(1, "r", Record({{"b", "two"}, {"c", "3"}}));
  ASSERT_TRUE(v.ok()) << v.status();
  auto got = store_.Get("r");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->bytes, Record({{"a", "1"}, {"b", "two"}, {"c", "3"}}));
  EXPECT_EQ(got->version, *v);
  // Only the record's slot is held: the updates' slots and the old record's were freed.
  EXPECT_EQ(store_.stats().arena_used_bytes, 64u);
  EXPECT_EQ(store_.stats().grants_outstanding, 0u);
}

TEST_F(KvStoreTest, ABadMergeChangesNoValueAndSpendsItsGrant) {
  ASSERT_TRUE(PutValue(1, "plain", "not a record").ok());
  ASSERT_TRUE(Merge(1, "r", Record({{"a", "1"}})).ok());
  const KvStore::Stats before = store_.stats();
  EXPECT_EQ(Merge(1, "plain", Record({{"a", "1"}})).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Merge(1, "r", "\x05garbage").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_.Get("plain")->bytes, "not a record");
  EXPECT_EQ(store_.Get("r")->bytes, Record({{"a", "1"}}));
  const KvStore::Stats after = store_.stats();
  EXPECT_EQ(after.arena_used_bytes, before.arena_used_bytes);
  EXPECT_EQ(after.grants_outstanding, 0u);
  EXPECT_EQ(after.keys, before.keys);
  // A stale grant is refused as by PUT.
  EXPECT_EQ(store_.PrepareMerge(1, "r", 424242, 4).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(KvStoreTest, AMergeBuildsOnThePreparedWriteBeforeIt) {
  ASSERT_TRUE(Merge(1, "r", Record({{"a", "1"}, {"b", "1"}})).ok());
  const std::string put = Record({{"a", "2"}, {"b", "2"}});
  auto p = store_.PreparePut(1, "r", Written(1, put), put.size());
  ASSERT_TRUE(p.ok());
  const std::string update = Record({{"b", "3"}});
  auto m = store_.PrepareMerge(1, "r", Written(1, update), update.size());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(store_.Get("r")->bytes, Record({{"a", "1"}, {"b", "1"}}));  // neither visible yet
  store_.Commit(*p);
  store_.Commit(*m);
  EXPECT_EQ(store_.Get("r")->bytes, Record({{"a", "2"}, {"b", "3"}}));
}

// An inline PUT's merge (PrepareMergeCopy): the same merge without a grant, built on the
// prepared write before it; a bad update changes nothing and holds no slot.
TEST_F(KvStoreTest, AMergeOfAnUpdateTheServerHoldsNeedsNoGrant) {
  ASSERT_TRUE(Merge(1, "r", Record({{"a", "1"}, {"b", "1"}})).ok());
  auto p = store_.PrepareCopy("r", Record({{"a", "2"}, {"b", "2"}}), 0);
  ASSERT_TRUE(p.ok());
  auto m = store_.PrepareMergeCopy("r", Record({{"b", "3"}}));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_GT(m->version, p->version);
  store_.Commit(*p);
  store_.Commit(*m);
  EXPECT_EQ(store_.Get("r")->bytes, Record({{"a", "2"}, {"b", "3"}}));
  const KvStore::Stats before = store_.stats();
  EXPECT_EQ(store_.PrepareMergeCopy("r", "\x05garbage").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_.PrepareMergeCopy("", Record({{"a", "1"}})).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_.stats().arena_used_bytes, before.arena_used_bytes);
  EXPECT_EQ(store_.Get("r")->bytes, Record({{"a", "2"}, {"b", "3"}}));
}

}  // namespace
}  // namespace unloadkv::server
