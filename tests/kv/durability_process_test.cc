// A single kvserver with --data_dir, as a real process: acknowledged writes survive SIGKILL, a
// full disk refuses writes until space returns, a torn log tail is cut and reported, a corrupt
// log refuses to start naming the file and offset, and bad durability flags name the fix
// (docs/durability.md).
#include <sys/resource.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/kv/process_harness.h"
#include "transport/storage/posix_disk.h"

namespace unloadkv::testing {
namespace {

std::string DataDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(base != nullptr ? base : "/tmp") + "/durability/" + name;
  std::system(("rm -rf '" + dir + "'").c_str());
  return dir;
}

// The start-up line about durability (within the first 20 lines).
std::string DurabilityLine(ServerProcess& s) {
  for (int i = 0; i < 20; ++i) {
    const std::string line = s.NextLine();
    if (absl::StrContains(line, "durability:")) return line;
  }
  return "";
}

const std::string kSegment = "/shard-0/00000000000000000001.log";

TEST(DurabilityProcessTest, AcknowledgedWritesSurviveSigkill) {
  const std::string dir = DataDir("sigkill");
  std::string scan;
  {
    ServerProcess s({"--data_dir=" + dir, "--fsync=always", "--metrics=127.0.0.1:0"});
    ASSERT_FALSE(s.address().empty());
    EXPECT_TRUE(absl::StrContains(DurabilityLine(s), "fsync always; recovered 0 records"));
    Output load = Cli(s, {"load", "--ops=3000", "--in_flight=16", "--keys=300"});
    ASSERT_EQ(load.exit_code, 0) << load.err;
    ASSERT_EQ(Cli(s, {"put", "greeting", "hello"}).exit_code, 0);
    ASSERT_EQ(Cli(s, {"put", "gone", "soon"}).exit_code, 0);
    ASSERT_EQ(Cli(s, {"del", "gone"}).exit_code, 0);
    // The policy and the log's figures in STATS and /metrics.
    const std::string stats = Cli(s, {"stats"}).out;
    EXPECT_TRUE(absl::StrContains(stats, "fsync always\n")) << stats;
    // At least one record per key held, plus the deleted key's put and delete.
    EXPECT_GE(StatValue(stats, "log_records"), StatValue(stats, "keys") + 2) << stats;
    EXPECT_GE(StatValue(stats, "log_syncs"), 1u) << stats;
    EXPECT_TRUE(absl::StrContains(stats, "log_failure none\n")) << stats;
    const std::string metrics = Scrape(s.metrics_address());
    EXPECT_EQ(Sample(metrics, "unloadkv_log_fsync_policy{policy=\"always\"}"), 1) << metrics;
    EXPECT_EQ(Sample(metrics, "unloadkv_log_stopped"), 0);
    const std::string status = Scrape(s.metrics_address(), 5000, "/status.json");
    EXPECT_TRUE(absl::StrContains(status, "\"durability\":{\"fsync\":\"always\",\"log_records\":"))
        << status;
    EXPECT_TRUE(absl::StrContains(status, "\"failure\":null}")) << status;
    scan = Cli(s, {"scan", "--limit=1000"}).out;
    ASSERT_TRUE(absl::StrContains(scan, "greeting\thello\n")) << scan;
    s.Kill();  // SIGKILL: no shutdown path runs
  }
  ServerProcess again({"--data_dir=" + dir});
  const std::string line = DurabilityLine(again);
  EXPECT_TRUE(absl::StrContains(line, "recovered ")) << line;
  EXPECT_FALSE(absl::StrContains(line, "torn")) << line;  // every record was whole
  EXPECT_EQ(Cli(again, {"scan", "--limit=1000"}).out, scan);
  EXPECT_EQ(Cli(again, {"get", "greeting"}).out, "hello\n");
  EXPECT_EQ(Cli(again, {"get", "gone"}).exit_code, 1);
  // And it goes on: a write after the restart survives the next one.
  ASSERT_EQ(Cli(again, {"put", "greeting", "again"}).exit_code, 0);
  again.Kill();
  ServerProcess third({"--data_dir=" + dir});
  EXPECT_EQ(Cli(third, {"get", "greeting"}).out, "again\n");
}

// A full disk, as the test can make one: a file-size limit set on the running kvserver
// (prlimit(2)) just above its log segment's size. Writes are refused with RESOURCE_EXHAUSTED
// naming the log, and change nothing; reads go on; STATS, /metrics and /status.json say why.
// Lifting the limit (space returns), writes resume within the log's one-second retry, and
// after a SIGKILL exactly the acknowledged writes are back.
TEST(DurabilityProcessTest, AFullDiskRefusesWritesUntilSpaceReturns) {
  const std::string dir = DataDir("full");
  ServerProcess s({"--data_dir=" + dir, "--fsync=always", "--metrics=127.0.0.1:0"});
  ASSERT_FALSE(s.address().empty());
  ASSERT_EQ(Cli(s, {"put", "before", "kept"}).exit_code, 0);
  storage::PosixDisk disk;
  const uint64_t size = disk.ReadAll(dir + kSegment)->size();
  // The soft limit only: lowering the hard one could not be undone without privileges.
  rlimit limit{size + 16, RLIM_INFINITY};  // room for no more record
  ASSERT_EQ(prlimit(s.pid(), RLIMIT_FSIZE, &limit, nullptr), 0) << std::strerror(errno);
  Output refused = Cli(s, {"put", "during", "refused"});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(refused.err, "RESOURCE_EXHAUSTED")) << refused.err;
  EXPECT_TRUE(absl::StrContains(refused.err, "the shard's log")) << refused.err;
  EXPECT_EQ(Cli(s, {"get", "before"}).out, "kept\n");  // reads go on
  EXPECT_EQ(Cli(s, {"get", "during"}).exit_code, 1);   // the refused write changed nothing
  const std::string stats = Cli(s, {"stats"}).out;
  EXPECT_TRUE(absl::StrContains(stats, "log_failure RESOURCE_EXHAUSTED")) << stats;
  EXPECT_EQ(Sample(Scrape(s.metrics_address()), "unloadkv_log_stopped"), 1);
  const std::string status = Scrape(s.metrics_address(), 5000, "/status.json");
  EXPECT_TRUE(absl::StrContains(status, "\"failure\":\"RESOURCE_EXHAUSTED")) << status;
  // Space returns.
  limit.rlim_cur = RLIM_INFINITY;
  ASSERT_EQ(prlimit(s.pid(), RLIMIT_FSIZE, &limit, nullptr), 0) << std::strerror(errno);
  int code = 1;
  for (int i = 0; i < 100 && code != 0; ++i) {  // the log retries once a second: at most ~2 s
    code = Cli(s, {"put", "after", "resumed"}).exit_code;
    if (code != 0) absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_EQ(code, 0) << "writes did not resume once the limit was lifted";
  EXPECT_TRUE(absl::StrContains(Cli(s, {"stats"}).out, "log_failure none\n"));
  s.Kill();
  ServerProcess again({"--data_dir=" + dir});
  EXPECT_EQ(Cli(again, {"get", "before"}).out, "kept\n");
  EXPECT_EQ(Cli(again, {"get", "after"}).out, "resumed\n");
  EXPECT_EQ(Cli(again, {"get", "during"}).exit_code, 1);
}

// With a small --log_compact_mib, a log that grew by overwrites compacts: its older segments
// go, /metrics counts it, and a restart rebuilds exactly the keys acknowledged.
TEST(DurabilityProcessTest, ALogCompactsAndStillRecoversEveryKey) {
  const std::string dir = DataDir("compact");
  std::string scan;
  {
    ServerProcess s({"--data_dir=" + dir, "--log_compact_mib=1", "--metrics=127.0.0.1:0"});
    ASSERT_FALSE(s.address().empty());
    // 3000 writes of 1 KiB over 200 keys: about 3 MB of log for 200 KB of live values.
    Output load = Cli(s, {"load", "--ops=3000", "--in_flight=8", "--keys=200", "--value_size=1024",
                          "--read_fraction=0"});
    ASSERT_EQ(load.exit_code, 0) << load.err;
    const std::string metrics = Scrape(s.metrics_address());
    EXPECT_GE(Sample(metrics, "unloadkv_log_compactions_total"), 1) << metrics;
    EXPECT_GT(Sample(metrics, "unloadkv_log_compaction_seconds_total"), 0) << metrics;
    scan = Cli(s, {"scan", "--limit=1000"}).out;
    s.Kill();
  }
  storage::PosixDisk disk;
  const std::vector<std::string> files = *disk.List(dir + "/shard-0");
  ASSERT_FALSE(files.empty());
  EXPECT_TRUE(absl::EndsWith(files[0], ".base.log")) << files[0];  // the old segments went
  ServerProcess again({"--data_dir=" + dir});
  EXPECT_EQ(Cli(again, {"scan", "--limit=1000"}).out, scan);
}

TEST(DurabilityProcessTest, ATornTailIsCutAndACorruptLogRefusesToStart) {
  const std::string dir = DataDir("torn");
  {
    ServerProcess s({"--data_dir=" + dir});
    for (int i = 0; i < 5; ++i) {
      ASSERT_EQ(Cli(s, {"put", absl::StrCat("k", i), absl::StrCat("v", i)}).exit_code, 0);
    }
  }  // SIGTERM
  storage::PosixDisk disk;
  const std::string segment = dir + kSegment;
  std::string data = *disk.ReadAll(segment);
  ASSERT_TRUE(disk.Truncate(segment, data.size() - 3).ok());  // the last record torn
  {
    ServerProcess s({"--data_dir=" + dir});
    const std::string line = DurabilityLine(s);
    EXPECT_TRUE(absl::StrContains(line, "recovered 4 records")) << line;
    EXPECT_TRUE(absl::StrContains(line, "cut a torn tail of")) << line;
    EXPECT_TRUE(absl::StrContains(line, segment)) << line;
    EXPECT_EQ(Cli(s, {"get", "k3"}).out, "v3\n");
    EXPECT_EQ(Cli(s, {"get", "k4"}).exit_code, 1);  // the torn record: never acknowledged whole
  }
  // A flipped byte in the first record: not a torn tail.
  data = *disk.ReadAll(segment);
  data[20] ^= 0x01;
  ASSERT_TRUE(disk.Truncate(segment, 0).ok());
  ASSERT_TRUE((*disk.OpenForAppend(segment))->Append(data).ok());
  Output o =
      RunBinary("server/kvserver", {"--listen=127.0.0.1:0", "--metrics=", "--data_dir=" + dir});
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(o.err, "DATA_LOSS")) << o.err;
  EXPECT_TRUE(absl::StrContains(o.err, segment + ": corrupt log record at offset 0")) << o.err;
  EXPECT_EQ(*disk.ReadAll(segment), data);  // left as it was, for the operator
}

TEST(DurabilityProcessTest, BadDurabilityFlagsNameTheFix) {
  struct Case {
    std::vector<std::string> flags;
    const char* code;
    const char* fix;
  };
  // A data dir a single node wrote is not a cluster node's.
  const std::string owned = DataDir("owned");
  storage::PosixDisk disk;
  ASSERT_TRUE(disk.CreateDirs(owned).ok());
  ASSERT_TRUE((*disk.OpenForAppend(owned + "/OWNER"))->Append("a single node (no --etcd)\n").ok());
  const std::vector<Case> cases = {
      {{"--fsync=sometimes"}, "INVALID_ARGUMENT", "always, interval:MS"},
      {{"--fsync=interval:0"}, "INVALID_ARGUMENT", "1 <= MS <= 60000"},
      {{"--data_dir=relative/dir"}, "INVALID_ARGUMENT", "absolute path"},
      {{"--log_compact_mib=2000000"}, "INVALID_ARGUMENT", "at most 1048576 (1 TiB), or 0"},
      {{"--data_dir=" + owned, "--etcd=127.0.0.1:1", "--cluster=c", "--node=n", "--insecure"},
       "FAILED_PRECONDITION",
       "holds the data of a single node (no --etcd) (its OWNER file), not of node n of cluster c"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"--listen=127.0.0.1:0", "--metrics="};
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    Output o = RunBinary("server/kvserver", args);
    EXPECT_EQ(o.exit_code, 1) << c.flags[0];
    EXPECT_TRUE(absl::StrContains(o.err, c.code)) << c.flags[0] << ": " << o.err;
    EXPECT_TRUE(absl::StrContains(o.err, c.fix)) << c.flags[0] << ": " << o.err;
  }
}

}  // namespace
}  // namespace unloadkv::testing
