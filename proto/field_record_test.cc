#include "proto/field_record.h"

#include <string>

#include "gtest/gtest.h"

namespace unloadkv::proto {
namespace {

std::string Record(std::initializer_list<std::pair<const char*, const char*>> fields) {
  std::string out;
  for (const auto& [n, v] : fields) AppendField(n, v, &out);
  return out;
}

TEST(FieldRecordTest, RoundTrips) {
  const std::string r = Record({{"field0", "alpha"}, {"field1", ""}, {"", "empty name"}});
  absl::StatusOr<FieldViews> f = DecodeFieldRecord(r);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->size(), 3u);
  EXPECT_EQ((*f)[0].first, "field0");
  EXPECT_EQ((*f)[0].second, "alpha");
  EXPECT_EQ((*f)[1].second, "");
  EXPECT_EQ((*f)[2].first, "");
  EXPECT_TRUE(DecodeFieldRecord("")->empty());
}

TEST(FieldRecordTest, RefusesTruncatedAndDuplicateFields) {
  const std::string r = Record({{"a", "1"}, {"b", "2"}});
  const size_t first = Record({{"a", "1"}}).size();  // a cut there is a whole record
  for (size_t cut = 1; cut < r.size(); ++cut) {
    if (cut == first) continue;
    EXPECT_EQ(DecodeFieldRecord(r.substr(0, cut)).status().code(), absl::StatusCode::kDataLoss)
        << cut;
  }
  absl::Status dup = DecodeFieldRecord(Record({{"a", "1"}, {"a", "2"}})).status();
  EXPECT_EQ(dup.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(dup.message().find("'a' twice"), absl::string_view::npos) << dup;
  // Past 16 fields names are checked by hashing; the same rule.
  std::string many;
  for (int i = 0; i < 20; ++i) AppendField("f" + std::to_string(i), "v", &many);
  EXPECT_EQ(DecodeFieldRecord(many)->size(), 20u);
  AppendField("f3", "again", &many);
  EXPECT_EQ(DecodeFieldRecord(many).status().code(), absl::StatusCode::kDataLoss);
  // A length that runs past the end, however large.
  EXPECT_FALSE(DecodeFieldRecord(std::string("\xff\xff\xff\xff", 4)).ok());
}

TEST(FieldRecordTest, MergeReplacesInPlaceKeepsOthersAppendsNew) {
  absl::StatusOr<std::string> m =
      MergeFieldRecords(Record({{"f0", "old0"}, {"f1", "old1"}, {"f2", "old2"}}),
                        Record({{"f3", "new3"}, {"f1", "new1"}}));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(*m, Record({{"f0", "old0"}, {"f1", "new1"}, {"f2", "old2"}, {"f3", "new3"}}));
  // Onto nothing: the patch itself.
  EXPECT_EQ(*MergeFieldRecords("", Record({{"x", "1"}})), Record({{"x", "1"}}));
}

TEST(FieldRecordTest, MergeNamesTheSideThatDoesNotDecode) {
  absl::Status base = MergeFieldRecords("\x01", Record({{"a", "1"}})).status();
  EXPECT_EQ(base.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(base.message().find("stored value"), absl::string_view::npos) << base;
  absl::Status patch = MergeFieldRecords(Record({{"a", "1"}}), "\x01").status();
  EXPECT_NE(patch.message().find("update"), absl::string_view::npos) << patch;
}

}  // namespace
}  // namespace unloadkv::proto
