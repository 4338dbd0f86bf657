#include "client/value_policy.h"

#include "gtest/gtest.h"

namespace unloadkv::client_internal {
namespace {

TEST(ValuePolicyTest, AnEnginePolicyAloneInlinesNothing) {
  absl::StatusOr<ValuePolicy> p = ParseValuePolicy("split:0.25");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->engine_policy, "split:0.25");
  EXPECT_EQ(p->inline_bytes, 0u);
}

TEST(ValuePolicyTest, TheInlineSuffixSetsTheLimit) {
  absl::StatusOr<ValuePolicy> p = ParseValuePolicy("adaptive,inline:512");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->engine_policy, "adaptive");
  EXPECT_EQ(p->inline_bytes, 512u);
  p = ParseValuePolicy("unload,inline:4096");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->inline_bytes, 4096u);
}

TEST(ValuePolicyTest, ABadSuffixSaysTheGrammar) {
  for (const char* bad : {"adaptive,", "adaptive,inline:", "adaptive,inline:4097",
                          "adaptive,inline:-1", "adaptive,inline:+5", "adaptive,inline:1x",
                          "adaptive,inline:1,inline:2", "adaptive,zip:3"}) {
    absl::StatusOr<ValuePolicy> p = ParseValuePolicy(bad);
    ASSERT_FALSE(p.ok()) << bad;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(p.status().message().find("POLICY,inline:N"), absl::string_view::npos) << bad;
  }
}

}  // namespace
}  // namespace unloadkv::client_internal
