#include "client/cluster_status.h"

#include "gtest/gtest.h"

namespace unloadkv {
namespace {

cluster::ClusterView TwoShards() {
  cluster::ClusterView v;
  v.revision = 12;
  v.replicas = 2;
  v.shards = 2;
  v.shard_list.resize(2);
  v.shard_list[0] = {0, "", "m\x01", 3, "n1", {"n2"}, {}, 5};
  v.shard_list[1] = {1, "m\x01", "", 0, "", {}, {"n3"}, 6};
  v.shard_list[0].handover_to = "n2";  // a planned move of its primary's role
  v.shard_list[0].merge_with = 1;      // a merge asked
  v.shard_list[1].split_at = "t";      // a split asked
  v.shard_list[1].split_id = 2;
  v.nodes["n1"] = {"n1", "127.0.0.1:7001", "127.0.0.1:9001"};
  v.nodes["n2"] = {"n2", "127.0.0.1:7002", ""};
  return v;
}

TEST(ClusterStatusTest, TableHasOneLinePerShardWithItsState) {
  const std::string t = ClusterStatusTable(TwoShards());
  EXPECT_NE(t.find("[-inf, m\\x01)"), std::string::npos) << t;
  EXPECT_NE(t.find("[m\\x01, +inf)"), std::string::npos) << t;
  EXPECT_NE(t.find("serving"), std::string::npos) << t;
  EXPECT_NE(t.find("no-primary"), std::string::npos) << t;
  EXPECT_NE(t.find("(joining: n3)"), std::string::npos) << t;
  EXPECT_NE(t.find("(primary moving to n2)"), std::string::npos) << t;
  EXPECT_NE(t.find("(splitting at t into shard 2)"), std::string::npos) << t;
  EXPECT_NE(t.find("(merging shard 1 in)"), std::string::npos) << t;
  EXPECT_NE(t.find("nodes: 2 live"), std::string::npos) << t;
}

TEST(ClusterStatusTest, JsonNamesEveryFieldAndEscapesKeyBytes) {
  const std::string j = ClusterStatusJson(TwoShards());
  EXPECT_EQ(j,
            "{\"revision\":12,\"replicas\":2,\"shards\":["
            "{\"id\":0,\"start\":\"\",\"end\":\"m\\u0001\",\"epoch\":3,\"primary\":\"n1\","
            "\"backups\":[\"n2\"],\"joining\":[],\"handover_to\":\"n2\",\"split_at\":\"\",\"split_"
            "id\":0,\"merge_with\":1,"
            "\"state\":\"serving\"},"
            "{\"id\":1,\"start\":\"m\\u0001\",\"end\":\"\",\"epoch\":0,\"primary\":\"\","
            "\"backups\":[],\"joining\":[\"n3\"],\"handover_to\":\"\",\"split_at\":\"t\","
            "\"split_id\":2,\"merge_with\":0,\"state\":\"no-primary\"}],"
            "\"nodes\":[{\"name\":\"n1\",\"rpc_address\":\"127.0.0.1:7001\","
            "\"metrics_address\":\"127.0.0.1:9001\"},{\"name\":\"n2\",\"rpc_address\":"
            "\"127.0.0.1:7002\",\"metrics_address\":\"\"}],\"placement\":{\"auto_rebalance\":false,"
            "\"max_shard_bytes\":0,\"placer\":\"\"},\"transfers\":[]}");
}

TEST(ClusterStatusTest, PlacementPolicyPlacerAndShardSizes) {
  cluster::ClusterView v = TwoShards();
  EXPECT_NE(ClusterStatusTable(v).find("placement: by the operator"), std::string::npos);
  v.policy = {true, 1 << 20};
  v.placer = "n2";
  v.loads[0] = {0, "n1", 3, 17, 4096, "k"};
  const std::string t = ClusterStatusTable(v);
  EXPECT_NE(t.find("placement: automatic, shards split above 1048576 live bytes, placer n2"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("shard 0: 17 keys, 4096 live bytes (measured by n1)"), std::string::npos) << t;
  const std::string j = ClusterStatusJson(v);
  EXPECT_NE(j.find("\"state\":\"serving\",\"keys\":17,\"live_bytes\":4096}"), std::string::npos)
      << j;
  EXPECT_NE(j.find("\"placement\":{\"auto_rebalance\":true,\"max_shard_bytes\":1048576,"
                   "\"placer\":\"n2\"}"),
            std::string::npos)
      << j;
}

TEST(ClusterStatusTest, TransfersInFlightWithBytesAndEta) {
  TransferProgress t;
  t.shard = 1;
  t.from = "n1";
  t.to = "n3";
  t.bytes = 4 << 20;
  t.sent_bytes = 1 << 20;
  t.seconds = 2;
  const std::string table = ClusterStatusTable(TwoShards(), {t});
  EXPECT_NE(table.find("transfers in flight:\n  shard 1 n1 -> n3: 1.0 of 4.0 MiB (25%), 2.0 s, "
                       "ETA 6.0 s\n"),
            std::string::npos)
      << table;
  const std::string json = ClusterStatusJson(TwoShards(), {t});
  EXPECT_NE(json.find("\"transfers\":[{\"shard\":1,\"from\":\"n1\",\"to\":\"n3\",\"bytes\":"
                      "4194304,\"sent_bytes\":1048576,\"seconds\":2.000,\"eta_seconds\":6.000}]"),
            std::string::npos)
      << json;
}

}  // namespace
}  // namespace unloadkv
