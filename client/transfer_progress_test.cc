#include "client/transfer_progress.h"

#include "gtest/gtest.h"

namespace unloadkv {
namespace {

TEST(TransferProgressTest, ReadsTheThreeSeriesOfEachTransfer) {
  const std::string text =
      "# HELP unloadkv_transfer_bytes Value bytes ...\n"
      "# TYPE unloadkv_transfer_bytes gauge\n"
      "unloadkv_transfer_bytes{backup=\"n3\",shard=\"2\"} 268435456\n"
      "unloadkv_transfer_sent_bytes{backup=\"n3\",shard=\"2\"} 67108864\n"
      "unloadkv_transfer_seconds{shard=\"2\",backup=\"n3\"} 0.5\n"
      "unloadkv_keys 10\n"
      // Another transfer missing its seconds: skipped.
      "unloadkv_transfer_bytes{backup=\"n4\",shard=\"1\"} 100\n"
      "unloadkv_transfer_sent_bytes{backup=\"n4\",shard=\"1\"} 1\n";
  const std::vector<TransferProgress> t = ParseTransfers(text, "n1");
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].shard, 2u);
  EXPECT_EQ(t[0].from, "n1");
  EXPECT_EQ(t[0].to, "n3");
  EXPECT_DOUBLE_EQ(t[0].bytes, 268435456);
  EXPECT_DOUBLE_EQ(t[0].sent_bytes, 67108864);
  EXPECT_DOUBLE_EQ(t[0].seconds, 0.5);
  // A quarter in 0.5 s: three quarters left take 1.5 s.
  EXPECT_DOUBLE_EQ(t[0].EtaSeconds(), 1.5);
}

TEST(TransferProgressTest, NoEtaBeforeAnythingWasAcknowledged) {
  TransferProgress t;
  t.bytes = 100;
  t.seconds = 3;
  EXPECT_LT(t.EtaSeconds(), 0);
}

TEST(TransferProgressTest, SkipsWhatDoesNotParse) {
  const std::string text =
      "unloadkv_transfer_bytes{backup=\"n3\",shard=\"x\"} 1\n"           // shard not a number
      "unloadkv_transfer_bytes{backup=\"n3\",shard=\"1\" 1\n"            // no closing brace
      "unloadkv_transfer_bytes{backup=\"n3,shard=\"1\"} 1\n"             // value runs on
      "unloadkv_transfer_bytes{backup=\"n3\",shard=\"1\"} -5\n"          // negative
      "unloadkv_transfer_bytes{backup=\"n3\",shard=\"1\"} NaN\n"         // not a number
      "unloadkv_transfer_bytes{backup=\"n3\",shard=\"1\"} +Inf\n"        // not finite
      "unloadkv_transfer_bytes{backup=\"\",shard=\"1\"} 1\n"             // no backup
      "unloadkv_transfer_bytes{backup=\"n\\\"3\",shard=\"1\"} 7 1700\n"  // escaped, timestamp
      "unloadkv_transfer_sent_bytes{backup=\"n\\\"3\",shard=\"1\"} 0\n"
      "unloadkv_transfer_seconds{backup=\"n\\\"3\",shard=\"1\"} 2\n"
      "\n{}\"=\n";
  const std::vector<TransferProgress> t = ParseTransfers(text, "n1");
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].to, "n\"3");
  EXPECT_DOUBLE_EQ(t[0].bytes, 7);
}

}  // namespace
}  // namespace unloadkv
