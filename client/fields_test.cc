// EncodeFields / DecodeFields, the installed API's field records (client.h).
#include <string>

#include "absl/status/status.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "proto/field_record.h"

namespace unloadkv {
namespace {

TEST(FieldsTest, RoundTripKeepsOrderAndBytes) {
  const Fields fields = {{"name", "alice"}, {"", "empty name"}, {"bin", std::string("\0\xff", 2)}};
  const std::string record = EncodeFields(fields);
  absl::StatusOr<Fields> back = DecodeFields(record);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, fields);
  EXPECT_EQ(EncodeFields({}), "");
  EXPECT_EQ(DecodeFields("")->size(), 0u);
}

TEST(FieldsTest, IsTheServersEncoding) {
  std::string want;
  proto::AppendField("a", "1", &want);
  proto::AppendField("b", "22", &want);
  EXPECT_EQ(EncodeFields({{"a", "1"}, {"b", "22"}}), want);
}

TEST(FieldsTest, ALaterDuplicateReplacesTheValueInPlace) {
  EXPECT_EQ(EncodeFields({{"a", "1"}, {"b", "2"}, {"a", "3"}}),
            EncodeFields({{"a", "3"}, {"b", "2"}}));
}

TEST(FieldsTest, BytesThatAreNotARecordAreInvalidArgument) {
  std::string dup;
  proto::AppendField("a", "1", &dup);
  proto::AppendField("a", "2", &dup);
  for (const std::string& bad : {std::string("\x05\x00\x00\x00"
                                             "ab",
                                             6),
                                 std::string("\x01", 1), dup}) {
    absl::StatusOr<Fields> f = DecodeFields(bad);
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << f.status();
  }
}

}  // namespace
}  // namespace unloadkv
