#include "transport/rnic/region_table.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace unloadkv::rnic {
namespace {

class RegionTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    table_.Insert(1, {1000, 100, kRemoteWrite | kLocalWrite});
    table_.Insert(2, {5000, 50, kRemoteRead});
  }
  RegionTable table_;
};

TEST_F(RegionTableTest, AllowsAccessInsideRegionWithPermission) {
  EXPECT_EQ(table_.Check(1, 1000, 100, kRemoteWrite), AccessVerdict::kOk);
  EXPECT_EQ(table_.Check(1, 1099, 1, kRemoteWrite), AccessVerdict::kOk);
  EXPECT_EQ(table_.Check(2, 5010, 40, kRemoteRead), AccessVerdict::kOk);
}

TEST_F(RegionTableTest, RefusesUnknownKeyMissingPermissionAndOutOfBounds) {
  EXPECT_EQ(table_.Check(3, 1000, 1, kRemoteWrite), AccessVerdict::kUnknownKey);
  EXPECT_EQ(table_.Check(2, 5000, 1, kRemoteWrite), AccessVerdict::kNoPermission);
  EXPECT_EQ(table_.Check(1, 1000, 1, kRemoteRead), AccessVerdict::kNoPermission);
  EXPECT_EQ(table_.Check(1, 999, 1, kRemoteWrite), AccessVerdict::kOutOfBounds);
  EXPECT_EQ(table_.Check(1, 1000, 101, kRemoteWrite), AccessVerdict::kOutOfBounds);
  EXPECT_EQ(table_.Check(1, 1100, 1, kRemoteWrite), AccessVerdict::kOutOfBounds);
}

TEST_F(RegionTableTest, RefusesRangesThatWrapAroundTheAddressSpace) {
  EXPECT_EQ(table_.Check(1, 1050, UINT64_MAX, kRemoteWrite), AccessVerdict::kOutOfBounds);
  EXPECT_EQ(table_.Check(1, UINT64_MAX, 2, kRemoteWrite), AccessVerdict::kOutOfBounds);
}

TEST_F(RegionTableTest, AWindowWorksOnlyThroughWhatItIsBoundToAndIsNoLocalKey) {
  table_.Insert(9, {1010, 20, kRemoteWrite, /*bound_to=*/7, /*region_key=*/1});
  EXPECT_EQ(table_.Check(9, 1010, 20, kRemoteWrite, 7), AccessVerdict::kOk);
  EXPECT_EQ(table_.Check(9, 1010, 20, kRemoteWrite, 8), AccessVerdict::kWrongQp);
  EXPECT_EQ(table_.Check(9, 1010, 20, kRemoteWrite), AccessVerdict::kWrongQp);
  EXPECT_EQ(table_.Check(9, 1009, 2, kRemoteWrite, 7), AccessVerdict::kOutOfBounds);
  EXPECT_EQ(table_.Check(9, 1010, 21, kRemoteWrite, 7), AccessVerdict::kOutOfBounds);
  EXPECT_EQ(table_.Check(9, 1010, 4, kRemoteRead, 7), AccessVerdict::kNoPermission);
  EXPECT_EQ(table_.CheckLocal(9, 1010, 4, 0), AccessVerdict::kUnknownKey);
  EXPECT_EQ(table_.CheckLocal(1, 1010, 4, kLocalWrite), AccessVerdict::kOk);
  // A region's key works through anything.
  EXPECT_EQ(table_.Check(1, 1010, 4, kRemoteWrite, 8), AccessVerdict::kOk);
}

TEST_F(RegionTableTest, ZeroLengthIsAlwaysAllowedAsInTheInfinibandSpec) {
  EXPECT_EQ(table_.Check(77, 0, 0, kRemoteWrite), AccessVerdict::kOk);
}

TEST_F(RegionTableTest, ErasedKeyIsUnknown) {
  table_.Erase(1);
  EXPECT_EQ(table_.Check(1, 1000, 1, kRemoteWrite), AccessVerdict::kUnknownKey);
}

}  // namespace
}  // namespace unloadkv::rnic
