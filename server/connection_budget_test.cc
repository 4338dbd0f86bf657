// The --max_connections default: bounded by the shared receive queue and by memory, and the
// checks of an explicit value.
#include "server/connection_budget.h"

#include "gtest/gtest.h"

namespace unloadkv::server {
namespace {

engine::EngineOptions KvOptions() {
  engine::EngineOptions eo;
  eo.max_message_bytes = 68 << 10;
  return eo;
}

TEST(ConnectionBudgetTest, TheDefaultIsWhatTheSharedReceiveQueueHoldsWhenMemoryIsPlenty) {
  rnic::DeviceLimits limits;  // 16384 receives per SRQ
  const engine::EngineOptions eo = KvOptions();
  absl::StatusOr<ConnectionBudget> b = ResolveConnectionBudget(0, eo, limits, uint64_t{1} << 40);
  ASSERT_TRUE(b.ok()) << b.status();
  // The staging pool's SRQ is the tighter: 256 shared, 3 reserved per lane (2 credits, 1 ack).
  EXPECT_EQ(b->max_connections, (16384 - 256) / 3);
  EXPECT_NE(b->summary.find("what the node holds"), std::string::npos) << b->summary;
}

TEST(ConnectionBudgetTest, TheDefaultFitsTheWorstCaseInHalfOfMemAvailable) {
  rnic::DeviceLimits limits;
  limits.host_bytes_per_peer = 512 << 10;
  const engine::EngineOptions eo = KvOptions();
  const uint64_t available = uint64_t{4} << 30;
  absl::StatusOr<ConnectionBudget> b = ResolveConnectionBudget(0, eo, limits, available);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->bytes_per_connection, engine::Engine::MaxConnectionBytes(eo) + (512 << 10));
  const uint64_t worst = uint64_t(b->max_connections) * b->bytes_per_connection +
                         engine::Engine::SharedBufferBytes(eo);
  EXPECT_LE(worst, available / 2);
  EXPECT_GT(worst + b->bytes_per_connection, available / 2) << "one more would still fit";
  // No staging ring any more: reserved staging buffers (3 x 16 KiB), staging headers for the
  // largest window a peer may grant (128 KiB), 10 reserved message buffers and send slots
  // (68 KiB each), two 256 KiB stream buffers.
  EXPECT_LT(b->bytes_per_connection, uint64_t{3} << 19);
}

TEST(ConnectionBudgetTest, AnExplicitLimitAboveTheQueueIsRefusedNamingIt) {
  rnic::DeviceLimits limits;
  absl::StatusOr<ConnectionBudget> b =
      ResolveConnectionBudget(65536, KvOptions(), limits, uint64_t{1} << 40);
  ASSERT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("at most 5376 connections"), absl::string_view::npos)
      << b.status();
}

// A device with a small CQ (verbs reports max_cqe) bounds the connections too.
TEST(ConnectionBudgetTest, TheDevicesCompletionQueueBoundsTheDefault) {
  rnic::DeviceLimits limits;
  limits.max_cqe = 1 << 20;
  const engine::EngineOptions eo = KvOptions();
  absl::StatusOr<ConnectionBudget> b = ResolveConnectionBudget(0, eo, limits, uint64_t{1} << 40);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_LT(b->max_connections, (16384 - 256) / 3);
  EXPECT_EQ(static_cast<uint32_t>(b->max_connections),
            engine::Engine::MaxConnectionsPerWorker(eo, limits));
  EXPECT_NE(b->summary.find("CQ take"), std::string::npos) << b->summary;
}

TEST(ConnectionBudgetTest, AnExplicitLimitAboveMemoryIsKeptAndSaysSo) {
  rnic::DeviceLimits limits;
  absl::StatusOr<ConnectionBudget> b =
      ResolveConnectionBudget(5000, KvOptions(), limits, uint64_t{1} << 30);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->max_connections, 5000);
  EXPECT_NE(b->summary.find("more than the"), std::string::npos) << b->summary;
  b = ResolveConnectionBudget(100, KvOptions(), limits, uint64_t{1} << 30);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->summary, "100 (set)");
}

TEST(ConnectionBudgetTest, OutOfRangeOrNothingToHoldIsAnError) {
  rnic::DeviceLimits limits;
  EXPECT_FALSE(ResolveConnectionBudget(-1, KvOptions(), limits, uint64_t{1} << 40).ok());
  EXPECT_FALSE(ResolveConnectionBudget(65537, KvOptions(), limits, uint64_t{1} << 40).ok());
  absl::StatusOr<ConnectionBudget> none = ResolveConnectionBudget(0, KvOptions(), limits, 1 << 20);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kResourceExhausted) << none.status();
  // Memory unknown: the pre-set 256.
  absl::StatusOr<ConnectionBudget> unknown = ResolveConnectionBudget(0, KvOptions(), limits, 0);
  ASSERT_TRUE(unknown.ok());
  EXPECT_EQ(unknown->max_connections, 256);
}

TEST(ConnectionBudgetTest, MemAvailableIsRead) { EXPECT_GT(MemAvailableBytes(), 0u); }

}  // namespace
}  // namespace unloadkv::server
