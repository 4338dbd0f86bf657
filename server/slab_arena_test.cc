// Slot allocation: classes, reuse, exhaustion, and refusal of foreign slots.
#include "server/slab_arena.h"

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

}  // namespace
}  // namespace unloadkv::server
