#include "tests/sim/sim_invariants.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "transport/rnic/device.h"

namespace unloadkv::world {
namespace {

// One node's region, writable by peers, and the bytes a peer writes into it.
class SimInvariantsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    device_ = fabric_.CreateDevice();
    memory_.assign(4096, 0);
    auto mr = device_->RegisterMemory(memory_.data(), memory_.size(),
                                      rnic::kLocalWrite | rnic::kRemoteWrite);
    ASSERT_TRUE(mr.ok()) << mr.status();
    mr_ = std::move(*mr);
  }
  uint64_t At(size_t offset) const { return mr_->address() + offset; }
  void Place(size_t offset, const std::string& bytes) {
    std::memcpy(memory_.data() + offset, bytes.data(), bytes.size());
  }

  sim::Fabric fabric_;
  std::unique_ptr<rnic::Device> device_;
  std::vector<char> memory_;
  std::unique_ptr<rnic::MemoryRegion> mr_;
  SimInvariants checks_{&fabric_};
};

TEST_F(SimInvariantsTest, CompletedWriteMustBeInPlace) {
  const std::string v = "value-1";
  checks_.WriteIssued("n1/7", 0, v.data(), v.size(), At(0), mr_->rkey());
  EXPECT_FALSE(checks_.WriteCompleted("n1/7", 0, v.data(), v.size(), At(0), mr_->rkey()));
  Place(0, v);
  EXPECT_TRUE(checks_.WriteCompleted("n1/7", 0, v.data(), v.size(), At(0), mr_->rkey()));
  // A destination no longer registered is not checked.
  checks_.WriteIssued("n1/7", 1, v.data(), v.size(), At(4090), mr_->rkey());
  EXPECT_TRUE(checks_.WriteCompleted("n1/7", 1, v.data(), v.size(), At(4090), mr_->rkey()));
  EXPECT_EQ(checks_.counts().writes_verified, 2u);
  EXPECT_EQ(checks_.counts().write_violations, 1u);
}

// The writer may reuse its buffer before the write completes (the SDK does once the PUT behind
// it is answered, which an unloaded write's ack can trail): the write is judged by the bytes
// it carried when issued (seeds 42 and 76 reported a false violation when it was not).
TEST_F(SimInvariantsTest, AWriteIsJudgedByTheBytesItCarriedWhenIssued) {
  std::string buffer = "first";
  checks_.WriteIssued("n1/7", 0, buffer.data(), buffer.size(), At(8), mr_->rkey());
  Place(8, buffer);
  buffer = "reuse";
  EXPECT_TRUE(checks_.WriteCompleted("n1/7", 0, buffer.data(), buffer.size(), At(8), mr_->rkey()));
  EXPECT_EQ(checks_.counts().write_violations, 0u);
}

// A slot rewritten by another connection after the write was issued (freed and granted again
// before the first writer learned its write completed) has nothing to show; one rewritten by
// a write issued before it does.
TEST_F(SimInvariantsTest, AnotherConnectionsLaterWriteExcusesTheDestination) {
  const std::string mine = "mine!", theirs = "their";
  checks_.WriteIssued("n2/4", 0, theirs.data(), theirs.size(), At(64), mr_->rkey());
  checks_.WriteIssued("n1/7", 0, mine.data(), mine.size(), At(64), mr_->rkey());
  Place(64, theirs);  // placed out of issue order: no excuse
  EXPECT_FALSE(checks_.WriteCompleted("n1/7", 0, mine.data(), mine.size(), At(64), mr_->rkey()));
  checks_.WriteIssued("n3/2", 0, theirs.data(), theirs.size(), At(66), mr_->rkey());
  EXPECT_TRUE(checks_.WriteCompleted("n1/7", 0, mine.data(), mine.size(), At(64), mr_->rkey()));
  EXPECT_EQ(checks_.counts().overwritten, 1u);
  EXPECT_EQ(checks_.counts().writes_verified, 1u);
  EXPECT_EQ(checks_.counts().write_violations, 1u);
}

TEST_F(SimInvariantsTest, MessageMustFollowTheWritesIssuedBeforeIt) {
  const std::string a = "aaaa", b = "bbbb";
  checks_.WriteIssued("n1/7", 0, a.data(), a.size(), At(0), mr_->rkey());
  checks_.MessageIssued("n1/7", 0, 1);
  checks_.WriteIssued("n1/7", 2, b.data(), b.size(), At(100), mr_->rkey());
  checks_.MessageIssued("n1/7", 1, 3);
  // Message 0 handed over before write 0 landed: a violation. Write 2 (after it) is not
  // required.
  EXPECT_FALSE(checks_.MessageDelivered("n1/7", 0));
  Place(0, a);
  EXPECT_FALSE(checks_.MessageDelivered("n1/7", 1));  // write 2 missing
  Place(100, b);
  checks_.MessageIssued("n1/7", 2, 4);
  EXPECT_TRUE(checks_.MessageDelivered("n1/7", 2));
  // Another connection's messages are its own.
  EXPECT_TRUE(checks_.MessageDelivered("n2/7", 0));
  EXPECT_EQ(checks_.counts().messages_checked, 3u);
  EXPECT_EQ(checks_.counts().order_violations, 2u);
  // Writes 0 and 2 never finished: each message checks every one issued before it.
  EXPECT_EQ(checks_.counts().writes_before_checked, 1u + 2u + 2u);
}

TEST_F(SimInvariantsTest, FinishedOrOverwrittenWritesAreNotRequired) {
  const std::string a = "aaaa", b = "bbbb", c = "cccc";
  checks_.WriteIssued("n1/7", 0, a.data(), a.size(), At(0), mr_->rkey());
  checks_.WriteIssued("n1/7", 1, b.data(), b.size(), At(2), mr_->rkey());  // overlaps write 0
  checks_.WriteIssued("n1/7", 2, c.data(), c.size(), At(200), mr_->rkey());
  checks_.MessageIssued("n1/7", 0, 3);
  Place(0, a);
  Place(2, b);                       // write 1 landed over write 0's last bytes
  checks_.WriteFinished("n1/7", 2);  // finished (invariant 1 covers it), not in memory here
  EXPECT_TRUE(checks_.MessageDelivered("n1/7", 0));
  EXPECT_EQ(checks_.counts().writes_before_checked, 1u);  // write 1 only
}

TEST_F(SimInvariantsTest, RefusalMustBeWhereTheNicRefuses) {
  EXPECT_TRUE(checks_.WriteRefused(64, At(4090), mr_->rkey(), 1));      // out of bounds
  EXPECT_TRUE(checks_.WriteRefused(64, At(0), mr_->rkey() ^ 0xff, 1));  // unknown key
  EXPECT_FALSE(checks_.WriteRefused(64, At(0), mr_->rkey(), 1));        // writable
  EXPECT_EQ(checks_.counts().refusals_checked, 3u);
  EXPECT_EQ(checks_.counts().refusal_violations, 1u);
}

}  // namespace
}  // namespace unloadkv::world
