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

TEST(ValuePolicyTest, WithoutTheSuffixAdaptiveInlinesOnSoftOnly) {
  absl::StatusOr<ValuePolicy> adaptive = ParseValuePolicy("adaptive");
  ASSERT_TRUE(adaptive.ok()) << adaptive.status();
  EXPECT_EQ(InlineBytesOn(*adaptive, "soft"), 4096u);
  EXPECT_EQ(InlineBytesOn(*adaptive, "verbs"), 0u);
  EXPECT_EQ(InlineBytesOn(*adaptive, "sim"), 0u);
  for (const char* fixed : {"offload", "unload", "split:0.5", "unload_after:8"}) {
    absl::StatusOr<ValuePolicy> p = ParseValuePolicy(fixed);
    ASSERT_TRUE(p.ok()) << fixed;
    EXPECT_EQ(InlineBytesOn(*p, "soft"), 0u) << fixed;
  }
  // The suffix holds on every transport, 0 included.
  for (const char* transport : {"soft", "verbs", "sim"}) {
    EXPECT_EQ(InlineBytesOn(*ParseValuePolicy("adaptive,inline:0"), transport), 0u);
    EXPECT_EQ(InlineBytesOn(*ParseValuePolicy("offload,inline:64"), transport), 64u);
  }
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
