// Slot allocation: classes, reuse, exhaustion, and refusal of foreign slots.
#include "server/slab_arena.h"

#include <map>
#include <random>
#include <set>

#include "gtest/gtest.h"

namespace unloadkv::server {
namespace {

TEST(SlabArenaTest, ClassesArePowersOfTwoFrom64BytesTo64KiB) {
  EXPECT_EQ(SlabArena::ClassOf(0), 0);
  EXPECT_EQ(SlabArena::ClassOf(64), 0);
  EXPECT_EQ(SlabArena::ClassOf(65), 1);
  EXPECT_EQ(SlabArena::ClassCapacity(SlabArena::ClassOf(4096)), 4096u);
  EXPECT_EQ(SlabArena::ClassOf(64 << 10), SlabArena::kClasses - 1);
  EXPECT_EQ(SlabArena::ClassOf((64 << 10) + 1), -1);
}

TEST(SlabArenaTest, SlotsAreDisjointAlignedAndReused) {
  SlabArena a(4 * SlabArena::kChunkBytes);
  std::set<uint64_t> seen;
  for (int i = 0; i < 100; ++i) {
    absl::StatusOr<Slot> s = a.Allocate(100);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->capacity, 128u);
    EXPECT_EQ(s->offset % 128, 0u);
    EXPECT_TRUE(seen.insert(s->offset).second);
  }
  EXPECT_EQ(a.used_bytes(), 100u * 128);
  ASSERT_TRUE(a.Free({*seen.begin(), 128}));
  absl::StatusOr<Slot> again = a.Allocate(128);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->offset, *seen.begin());
}

TEST(SlabArenaTest, ExhaustionIsAnErrorAndFreeingRecovers) {
  SlabArena a(2 * SlabArena::kChunkBytes);
  std::vector<Slot> big;
  for (int i = 0; i < 32; ++i) big.push_back(*a.Allocate(64 << 10));  // two chunks
  EXPECT_EQ(a.Allocate(64 << 10).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(a.Allocate(64).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(a.Allocate((64 << 10) + 1).status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(a.Free(big.back()));
  EXPECT_TRUE(a.Allocate(40000).ok());
}

TEST(SlabArenaTest, RefusesSlotsItDidNotHandOut) {
  SlabArena a(2 * SlabArena::kChunkBytes);
  Slot s = *a.Allocate(256);
  EXPECT_FALSE(a.Free({s.offset + 64, 256}));           // misaligned
  EXPECT_FALSE(a.Free({s.offset, 512}));                // wrong class
  EXPECT_FALSE(a.Free({SlabArena::kChunkBytes, 256}));  // unassigned chunk
  EXPECT_EQ(a.used_bytes(), 256u);
}

TEST(SlabArenaTest, RefusesDoubleFrees) {
  SlabArena a(2 * SlabArena::kChunkBytes);
  Slot s = *a.Allocate(256);
  Slot t = *a.Allocate(256);
  ASSERT_TRUE(a.Free(s));
  EXPECT_FALSE(a.Free(s));
  EXPECT_EQ(a.used_bytes(), 256u);
  ASSERT_TRUE(a.Free(t));
  EXPECT_FALSE(a.Free(t));  // its chunk went back to the pool
  EXPECT_EQ(a.used_bytes(), 0u);
}

// Fill a small arena with large values, delete them all: every chunk is free for any class.
TEST(SlabArenaTest, EmptiedChunksServeAnyClass) {
  SlabArena a(8 * SlabArena::kChunkBytes);
  std::vector<Slot> big;
  while (true) {
    absl::StatusOr<Slot> s = a.Allocate(60000);
    if (!s.ok()) break;
    big.push_back(*s);
  }
  EXPECT_EQ(big.size(), 8u * 16);
  EXPECT_EQ(a.free_bytes(), 0u);
  for (const Slot& s : big) ASSERT_TRUE(a.Free(s));
  EXPECT_EQ(a.pool_chunks(), 8u);
  EXPECT_EQ(a.free_bytes(), 8 * SlabArena::kChunkBytes);
  size_t tiny = 0;
  while (a.Allocate(10).ok()) ++tiny;
  EXPECT_EQ(tiny, 8 * SlabArena::kChunkBytes / 64);
}

// The free-bytes figures say exactly what an allocation can use.
TEST(SlabArenaTest, FreeBytesForCountsTheClassAndThePool) {
  SlabArena a(2 * SlabArena::kChunkBytes);
  Slot s = *a.Allocate(64 << 10);
  EXPECT_EQ(a.free_bytes_for(64 << 10), 15u * (64 << 10) + SlabArena::kChunkBytes);
  EXPECT_EQ(a.free_bytes_for(64), SlabArena::kChunkBytes);
  EXPECT_EQ(a.free_bytes(), 2 * SlabArena::kChunkBytes - (64 << 10));
  EXPECT_EQ(a.free_bytes_for((64 << 10) + 1), 0u);
  ASSERT_TRUE(a.Free(s));
  EXPECT_EQ(a.free_bytes_for(64), 2 * SlabArena::kChunkBytes);
}

// Property: under random allocations and frees of random sizes, an allocation fails only when
// neither the class's free slots nor the pool could hold it, and slots never overlap.
TEST(SlabArenaTest, RandomChurnNeverRefusesWhatFits) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 rng(seed);
    SlabArena a(6 * SlabArena::kChunkBytes);
    std::map<uint64_t, Slot> live;  // by offset
    std::vector<uint64_t> offsets;
    size_t used = 0;
    for (int step = 0; step < 20000; ++step) {
      const bool alloc = offsets.empty() || rng() % 100 < 55;
      if (alloc) {
        // Mostly small, sometimes large, so classes compete for chunks.
        const uint32_t size = rng() % 4 == 0 ? static_cast<uint32_t>(rng() % (64 << 10) + 1)
                                             : static_cast<uint32_t>(rng() % 2048);
        const uint32_t cap = SlabArena::ClassCapacity(SlabArena::ClassOf(size));
        const bool fits = a.free_bytes_for(size) >= cap;
        absl::StatusOr<Slot> s = a.Allocate(size);
        ASSERT_EQ(s.ok(), fits) << "seed " << seed << " step " << step << " size " << size << ": "
                                << s.status();
        if (!s.ok()) {
          ASSERT_EQ(s.status().code(), absl::StatusCode::kResourceExhausted);
          continue;
        }
        ASSERT_EQ(s->capacity, cap);
        ASSERT_LE(s->offset + s->capacity, 6 * SlabArena::kChunkBytes);
        auto next = live.lower_bound(s->offset);
        if (next != live.end()) ASSERT_LE(s->offset + s->capacity, next->first);
        if (next != live.begin()) {
          auto prev = std::prev(next);
          ASSERT_LE(prev->first + prev->second.capacity, s->offset);
        }
        live[s->offset] = *s;
        offsets.push_back(s->offset);
        used += s->capacity;
      } else {
        const size_t i = rng() % offsets.size();
        const uint64_t off = offsets[i];
        offsets[i] = offsets.back();
        offsets.pop_back();
        ASSERT_TRUE(a.Free(live[off]));
        used -= live[off].capacity;
        live.erase(off);
      }
      ASSERT_EQ(a.used_bytes(), used);
      ASSERT_EQ(a.free_bytes(), 6 * SlabArena::kChunkBytes - used);
    }
    for (const auto& [off, s] : live) ASSERT_TRUE(a.Free(s));
    EXPECT_EQ(a.pool_chunks(), 6u);
  }
}

}  // namespace
}  // namespace unloadkv::server

namespace unloadkv::server {
namespace {

// A mirror that reserves exactly the slots a primary allocated (and frees what it freed)
// ends in the same state: same used bytes, and the same next allocations.
TEST(SlabArenaReserveTest, AMirrorOfAllocationsMatchesThePrimary) {
  SlabArena primary(8 * SlabArena::kChunkBytes), mirror(8 * SlabArena::kChunkBytes);
  std::mt19937 rng(7);
  std::vector<Slot> live;
  for (int i = 0; i < 20000; ++i) {
    if (!live.empty() && rng() % 3 == 0) {
      const size_t at = rng() % live.size();
      ASSERT_TRUE(primary.Free(live[at]));
      ASSERT_TRUE(mirror.Free(live[at]));
      live[at] = live.back();
      live.pop_back();
      continue;
    }
    absl::StatusOr<Slot> s = primary.Allocate(1u << (6 + rng() % 8));
    if (!s.ok()) continue;
    ASSERT_TRUE(mirror.Reserve(*s)) << s->offset << " " << s->capacity;
    live.push_back(*s);
  }
  EXPECT_EQ(primary.used_bytes(), mirror.used_bytes());
  EXPECT_EQ(primary.free_bytes_for(64), mirror.free_bytes_for(64));
  // Promoted, the mirror allocates only free slots: none collides with a live one.
  std::set<uint64_t> taken;
  for (const Slot& s : live) taken.insert(s.offset);
  for (int i = 0; i < 1000; ++i) {
    absl::StatusOr<Slot> s = mirror.Allocate(64);
    if (!s.ok()) break;
    EXPECT_EQ(taken.count(s->offset), 0u);
    taken.insert(s->offset);
  }
}

TEST(SlabArenaReserveTest, RefusesWhatIsNotAFreeSlot) {
  SlabArena a(2 * SlabArena::kChunkBytes);
  EXPECT_FALSE(a.Reserve(Slot{0, 100}));                          // not a class
  EXPECT_FALSE(a.Reserve(Slot{32, 64}));                          // misaligned
  EXPECT_FALSE(a.Reserve(Slot{2 * SlabArena::kChunkBytes, 64}));  // outside
  ASSERT_TRUE(a.Reserve(Slot{128, 64}));
  EXPECT_FALSE(a.Reserve(Slot{128, 64}));    // in use
  EXPECT_FALSE(a.Reserve(Slot{1024, 512}));  // the chunk holds 64-byte slots
  EXPECT_EQ(a.used_bytes(), 64u);
  // The slots carved past on the way are free for Allocate.
  absl::StatusOr<Slot> s = a.Allocate(64);
  ASSERT_TRUE(s.ok());
  EXPECT_NE(s->offset, 128u);
  EXPECT_LT(s->offset, SlabArena::kChunkBytes);
}

}  // namespace
}  // namespace unloadkv::server
