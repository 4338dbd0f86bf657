// The checker itself: it accepts linearizable histories and rejects the classic violations,
// so a passing KV test means something.
#include "tests/kv/linearizability.h"

#include "gtest/gtest.h"

namespace unloadkv::testing {
namespace {

KvOp Put(int c, std::string v, int64_t a, int64_t b) {
  return {KvOp::kPut, "k", std::move(v), true, a, b, c};
}
KvOp Get(int c, std::optional<std::string> v, int64_t a, int64_t b) {
  return {KvOp::kGet, "k", std::move(v), true, a, b, c};
}
KvOp Del(int c, bool found, int64_t a, int64_t b) {
  return {KvOp::kDelete, "k", std::nullopt, found, a, b, c};
}

TEST(LinearizabilityTest, SequentialHistoryPasses) {
  EXPECT_TRUE(
      CheckLinearizable({Get(1, std::nullopt, 0, 1), Put(1, "a", 2, 3), Get(2, "a", 4, 5),
                         Del(1, true, 6, 7), Del(2, false, 8, 9), Get(1, std::nullopt, 10, 11)})
          .ok());
}

TEST(LinearizabilityTest, StaleReadAfterCompletedWriteFails) {
  absl::Status st = CheckLinearizable({Put(1, "a", 0, 1), Put(1, "b", 2, 3), Get(2, "a", 4, 5)});
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("client 2 get \"a\""), std::string::npos) << st;
}

TEST(LinearizabilityTest, ConcurrentOperationsMayTakeEitherOrder) {
  // The read overlaps both writes: either value, or the earlier state, is fine...
  EXPECT_TRUE(CheckLinearizable({Put(1, "a", 0, 10), Put(2, "b", 1, 11), Get(3, "a", 2, 12)}).ok());
  EXPECT_TRUE(CheckLinearizable({Put(1, "a", 0, 10), Put(2, "b", 1, 11), Get(3, "b", 2, 12)}).ok());
  // ...but two readers after both writes cannot disagree.
  EXPECT_FALSE(CheckLinearizable({Put(1, "a", 0, 10), Put(2, "b", 1, 11), Get(3, "a", 20, 21),
                                  Get(4, "b", 22, 23)})
                   .ok());
}

TEST(LinearizabilityTest, ValuesNeverWrittenAndDoubleDeletesFail) {
  EXPECT_FALSE(CheckLinearizable({Put(1, "a", 0, 1), Get(2, "z", 2, 3)}).ok());
  EXPECT_FALSE(CheckLinearizable({Put(1, "a", 0, 1), Del(1, true, 2, 3), Del(2, true, 4, 5)}).ok());
  // A read that goes back in time after another reader saw the new value.
  EXPECT_FALSE(CheckLinearizable(
                   {Put(1, "a", 0, 1), Put(1, "b", 2, 20), Get(2, "b", 3, 4), Get(3, "a", 5, 6)})
                   .ok());
}

TEST(LinearizabilityTest, UnknownOutcomesMayOrMayNotApply) {
  KvOp lost = Put(1, "x", 0, 0);
  lost.response_ns.reset();
  EXPECT_TRUE(CheckLinearizable({lost, Get(2, std::nullopt, 5, 6)}).ok());
  EXPECT_TRUE(CheckLinearizable({lost, Get(2, "x", 5, 6)}).ok());
  // But not before it was invoked.
  KvOp late = Put(1, "x", 10, 0);
  late.response_ns.reset();
  EXPECT_FALSE(CheckLinearizable({late, Get(2, "x", 5, 6)}).ok());
}

TEST(LinearizabilityTest, KeysAreCheckedIndependently) {
  KvOp other = Put(1, "a", 0, 1);
  other.key = "other";
  EXPECT_TRUE(CheckLinearizable({other, Get(2, std::nullopt, 2, 3)}).ok());
}

}  // namespace
}  // namespace unloadkv::testing
