#include "client/not_sent.h"

#include "gtest/gtest.h"

namespace unloadkv::client_internal {
namespace {

TEST(NotSentTest, MarksAFailureKeepingItsCodeAndMessage) {
  const absl::Status lost = absl::UnavailableError("connection to kvserver at x lost");
  EXPECT_FALSE(WasNotSent(lost));
  const absl::Status marked = NotSent(lost);
  EXPECT_TRUE(WasNotSent(marked));
  EXPECT_EQ(marked.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(marked.message(), lost.message());
  const absl::Status copy = marked;  // the mark travels with copies of the status
  EXPECT_TRUE(WasNotSent(copy));
}

TEST(NotSentTest, NeverMarksSuccess) {
  EXPECT_TRUE(NotSent(absl::OkStatus()).ok());
  EXPECT_FALSE(WasNotSent(NotSent(absl::OkStatus())));
}

}  // namespace
}  // namespace unloadkv::client_internal
