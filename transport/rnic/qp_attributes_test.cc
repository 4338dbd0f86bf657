#include "transport/rnic/qp_attributes.h"

#include "gtest/gtest.h"

namespace unloadkv::rnic {
namespace {

TEST(QpAttributesTest, RoundTripsThroughText) {
  QpAttributes a{"soft", "127.0.0.1:4791", 42, 7};
  absl::StatusOr<QpAttributes> b = DecodeQpAttributes(EncodeQpAttributes(a));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b, a);
}

TEST(QpAttributesTest, RejectsMalformedTextNamingTheField) {
  struct Case {
    const char* text;
    const char* mentions;
  } cases[] = {
      {"transport=soft address=a:1 qp_num=x psn=0", "qp_num"},
      {"transport=soft address=a:1 qp_num=1", "psn"},
      {"transport=soft address=a:1 qp_num=1 psn=0 color=red", "color"},
      {"transport=soft address=a:1 qp_num=1 psn=0 psn=1", "duplicate"},
      {"transport= address=a:1 qp_num=1 psn=0", "non-empty"},
      {"transport=soft address=a:1 qp_num=99999999999 psn=0", "qp_num"},
      {"garbage", "key=value"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<QpAttributes> r = DecodeQpAttributes(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_NE(r.status().message().find(c.mentions), absl::string_view::npos)
        << c.text << " -> " << r.status();
  }
  EXPECT_FALSE(DecodeQpAttributes(std::string(2000, 'a')).ok());
}

}  // namespace
}  // namespace unloadkv::rnic
