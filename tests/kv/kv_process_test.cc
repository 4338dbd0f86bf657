// kvserver and kvclient as real processes: the CLI, graceful shutdown, start-up errors, and the
// protocol's bad-input rules (forged, stale and foreign grants, oversized values, unknown
// methods, malformed frames, a client killed between its value write and its PUT).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "proto/kv.pb.h"
#include "proto/limits.h"
#include "tests/kv/process_harness.h"
#include "tests/kv/raw_connection.h"
#include "tests/support/subprocess.h"
#include "transport/base/logging.h"
#include "transport/rpc/bootstrap.h"

namespace unloadkv {
namespace {

using testing::Cli;
using testing::Output;
using testing::RunBinary;
using testing::Sample;
using testing::Scrape;
using testing::ServerProcess;
using testing::StatValue;

TEST(KvProcessTest, MetricsShowPerPathWritesMovingUnderLoad) {
  ServerProcess s({"--metrics=127.0.0.1:0"});
  const std::string url = s.metrics_address();
  ASSERT_FALSE(url.empty());
  const std::string offload = "unloadkv_value_writes_total{path=\"offload\"}";
  const std::string unload = "unloadkv_value_writes_total{path=\"unload\"}";
  const std::string unknown = "unloadkv_value_writes_total{path=\"unknown\"}";
  const std::string applied = "unloadkv_unload_applied_writes_total";
  std::string m0 = Scrape(url);
  ASSERT_EQ(Sample(m0, offload), 0) << m0;
  ASSERT_EQ(Sample(m0, unload), 0);
  for (const char* policy : {"offload", "unload"}) {
    Output load = Cli(s, {"load", "--ops=2000", "--in_flight=4", "--keys=200", "--read_fraction=0",
                          absl::StrCat("--policy=", policy)});
    ASSERT_EQ(load.exit_code, 0) << load.err;
  }
  std::string m1 = Scrape(url);
  // 4000 PUTs: each names its value write's path (unknown when it waited behind another).
  EXPECT_GT(Sample(m1, offload), 0) << m1;
  EXPECT_GT(Sample(m1, unload), 0) << m1;
  EXPECT_EQ(Sample(m1, offload) + Sample(m1, unload) + Sample(m1, unknown), 4000);
  // The target side counted exactly the unloaded writes it applied: the second run's 2000.
  EXPECT_EQ(Sample(m1, applied), 2000);
  EXPECT_EQ(Sample(m1, "unloadkv_rpc_requests_total{code=\"ok\",method=\"put\"}"), 4000);
  EXPECT_GT(Sample(m1, "unloadkv_arena_used_bytes"), 0);
  EXPECT_NE(m1.find("unloadkv_rpc_latency_seconds_bucket{method=\"put\""), std::string::npos);
}

TEST(KvProcessTest, CliRoundTripAndGracefulShutdown) {
  ServerProcess s;
  ASSERT_FALSE(s.address().empty());
  EXPECT_EQ(Cli(s, {"put", "greeting", "hello"}).out, "OK\n");
  EXPECT_EQ(Cli(s, {"put", "zeta", "last"}).exit_code, 0);
  EXPECT_EQ(Cli(s, {"get", "greeting"}).out, "hello\n");
  Output missing = Cli(s, {"get", "nobody"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(missing.err, "NOT_FOUND")) << missing.err;
  EXPECT_EQ(Cli(s, {"scan"}).out, "greeting\thello\nzeta\tlast\n");
  EXPECT_EQ(Cli(s, {"del", "zeta"}).exit_code, 0);
  Output stats = Cli(s, {"stats"});
  EXPECT_EQ(StatValue(stats.out, "keys"), 1u) << stats.out;
  Output load = Cli(s, {"load", "--ops=3000", "--in_flight=16", "--keys=100"});
  EXPECT_EQ(load.exit_code, 0) << load.err;
  EXPECT_TRUE(absl::StrContains(load.out, "value writes:")) << load.out;
  EXPECT_EQ(Cli(s, {"frobnicate"}).exit_code, 2);
  EXPECT_EQ(Cli(s, {"put", "only-key"}).exit_code, 2);
  const uint64_t keys = StatValue(Cli(s, {"stats"}).out, "keys");
  auto [code, rest] = s.Stop();
  EXPECT_EQ(code, 0);
  EXPECT_TRUE(absl::StrContains(rest, absl::StrCat("shut down cleanly (", keys, " keys held")))
      << rest;
}

TEST(KvProcessTest, StartupErrorsNameTheFix) {
  Output verbs =
      RunBinary("server/kvserver", {"--transport=verbs", "--listen=127.0.0.1:0", "--metrics="});
  EXPECT_NE(verbs.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(verbs.err, "--transport=soft")) << verbs.err;
  for (const char* bad : {"--transport=carrier-pigeon", "--arena_bytes=1", "--policy=fastest",
                          "--listen=nowhere", "--unload_workers=0", "--metrics=1.2.3"}) {
    Output o = RunBinary("server/kvserver", {"--metrics=", "--listen=127.0.0.1:0", bad});
    EXPECT_EQ(o.exit_code, 1) << bad;
    EXPECT_TRUE(absl::StrContains(o.err, "INVALID_ARGUMENT")) << bad << ": " << o.err;
  }
  ServerProcess s;
  Output busy = RunBinary("server/kvserver", {"--listen=" + s.address(), "--metrics="});
  EXPECT_EQ(busy.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(busy.err, "port in use")) << busy.err;
  Output unreachable = RunBinary("client/kvclient", {"--server=127.0.0.1:1", "stats"});
  EXPECT_EQ(unreachable.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(unreachable.err, "127.0.0.1:1")) << unreachable.err;
}

TEST(KvProcessTest, ForgedStaleAndForeignGrantsAndBadFramesChangeNothing) {
  SetMinLogLevel(LogLevel::kError);
  ServerProcess s;
  auto a = testing::RawConnection::Open(s.address());
  auto b = testing::RawConnection::Open(s.address());
  ASSERT_TRUE(a.ok() && b.ok());
  absl::StatusOr<proto::SlotGrant> g = (*a)->Grant(100);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->capacity(), 128u);
  ASSERT_TRUE((*a)->WriteValue(*g, "first").ok());
  ASSERT_TRUE((*a)->Put("k", g->grant_id(), 5).ok());
  // Stale (used), forged (never granted), foreign (b's grant named by a), oversized.
  EXPECT_EQ((*a)->Put("k", g->grant_id(), 5).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*a)->Put("k", 0xdeadbeef, 5).code(), absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<proto::SlotGrant> gb = (*b)->Grant(100);
  ASSERT_TRUE(gb.ok());
  ASSERT_TRUE((*b)->WriteValue(*gb, "second").ok());
  EXPECT_EQ((*a)->Put("k", gb->grant_id(), 6).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*b)->Put("k", gb->grant_id(), 129).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*b)->Put(std::string(257, 'k'), gb->grant_id(), 6).code(),
            absl::StatusCode::kInvalidArgument);
  // Limits on grants, unknown methods, unparsable payloads, frames that are not RPC frames.
  proto::GrantRequest too_big;
  too_big.set_size(proto::GrantRequest().size() + (64 << 10) + 1);
  too_big.set_count(1);
  EXPECT_EQ((*a)->Call(proto::GRANT, too_big).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*a)->Call(uint16_t{99}, "").status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ((*a)->Call(uint16_t{proto::GET}, "\xff\xff\xff").status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE((*a)->SendRaw("this is not an rpc frame").ok());
  ASSERT_TRUE((*a)->SendRaw(std::string(24, '\0')).ok());
  // Nothing above changed k, and both connections still work.
  proto::GetRequest get;
  get.set_key("k");
  for (auto* conn : {a->get(), b->get()}) {
    absl::StatusOr<std::string> bytes = conn->Call(proto::GET, get);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    proto::GetResponse resp;
    ASSERT_TRUE(resp.ParseFromString(*bytes));
    EXPECT_EQ(resp.value(), "first");
  }
}

// A PUT may carry its value inline (PutRequest.value): a malformed one is refused with why
// and changes nothing; well formed, it is stored, counted under path="inline" and read back;
// the SDK sends its small values so with the policy's ",inline:N" and larger ones through
// the engine.
TEST(KvProcessTest, InlinePutsAreCheckedStoredAndCounted) {
  SetMinLogLevel(LogLevel::kError);
  ServerProcess s({"--metrics=127.0.0.1:0"});
  auto a = testing::RawConnection::Open(s.address());
  ASSERT_TRUE(a.ok()) << a.status();
  auto inline_put = [](const std::string& key, const std::string& value) {
    proto::PutRequest r;
    r.set_key(key);
    r.set_value(value);
    r.set_value_size(static_cast<uint32_t>(value.size()));
    r.set_value_path(proto::INLINE);
    return r;
  };
  ASSERT_TRUE((*a)->Call(proto::PUT, inline_put("k", "carried inline")).ok());
  std::vector<std::pair<proto::PutRequest, std::string>> bad;
  bad.emplace_back(inline_put("k", std::string(proto::kMaxInlineValueBytes + 1, 'x')),
                   "inline values are at most 4096 bytes");
  bad.emplace_back(inline_put("k", "size lies"), "value_size says 99 bytes");
  bad.back().first.set_value_size(99);
  bad.emplace_back(inline_put("k", "and a grant"), "names no grant");
  bad.back().first.set_grant_id(7);
  bad.emplace_back(inline_put("k", "not a field record"), "merge: ");
  bad.back().first.set_merge_fields(true);
  bad.emplace_back(inline_put("", "no key"), "key");
  for (const auto& [req, why] : bad) {
    absl::Status st = (*a)->Call(proto::PUT, req).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << why << ": " << st;
    EXPECT_TRUE(absl::StrContains(st.message(), why)) << st;
  }
  proto::GetRequest get;
  get.set_key("k");
  absl::StatusOr<std::string> bytes = (*a)->Call(proto::GET, get);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  proto::GetResponse resp;
  ASSERT_TRUE(resp.ParseFromString(*bytes));
  EXPECT_EQ(resp.value(), "carried inline");

  const std::string url = s.metrics_address();
  const std::string inlined = "unloadkv_value_writes_total{path=\"inline\"}";
  auto engine_writes = [&](const std::string& m) {
    return Sample(m, "unloadkv_value_writes_total{path=\"offload\"}") +
           Sample(m, "unloadkv_value_writes_total{path=\"unload\"}") +
           Sample(m, "unloadkv_value_writes_total{path=\"unknown\"}");
  };
  EXPECT_EQ(Sample(Scrape(url), inlined), 1);
  // 100-byte values under inline:512 go inline; 1000-byte ones through the engine.
  Output small = Cli(s, {"load", "--ops=1000", "--in_flight=8", "--keys=100", "--read_fraction=0",
                         "--value_size=100", "--policy=adaptive,inline:512"});
  ASSERT_EQ(small.exit_code, 0) << small.err;
  std::string m = Scrape(url);
  EXPECT_EQ(Sample(m, inlined), 1001) << m;
  EXPECT_EQ(engine_writes(m), 0) << m;
  Output large = Cli(s, {"load", "--ops=1000", "--in_flight=8", "--keys=100", "--read_fraction=0",
                         "--value_size=1000", "--policy=adaptive,inline:512"});
  ASSERT_EQ(large.exit_code, 0) << large.err;
  m = Scrape(url);
  EXPECT_EQ(Sample(m, inlined), 1001) << m;
  EXPECT_EQ(engine_writes(m), 1000) << m;
  Output bad_policy = Cli(s, {"put", "k", "v", "--policy=adaptive,inline:5000"});
  EXPECT_NE(bad_policy.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(bad_policy.err, "POLICY,inline:N")) << bad_policy.err;
}

TEST(KvProcessTest, ClientKilledBetweenValueWriteAndPutLeavesNoTrace) {
  ServerProcess s;
  const uint64_t used_before = StatValue(Cli(s, {"stats"}).out, "arena_used_bytes");
  ASSERT_EQ(Cli(s, {"put", "victim", "old"}).exit_code, 0);
  pid_t child = fork();
  if (child == 0) {
    // A client that writes a new value into a granted slot and dies before its PUT.
    SetMinLogLevel(LogLevel::kError);
    auto raw = testing::RawConnection::Open(s.address());
    if (!raw.ok()) _exit(10);
    for (int i = 0; i < 8; ++i) {
      absl::StatusOr<proto::SlotGrant> g = (*raw)->Grant(3000);
      if (!g.ok() || !(*raw)->WriteValue(*g, std::string(3000, 'P')).ok()) _exit(11);
    }
    raise(SIGKILL);
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "child exit " << status;
  // The server notices the dead connection and returns its grants.
  std::string stats;
  for (int i = 0; i < 100; ++i) {
    stats = Cli(s, {"stats"}).out;
    if (StatValue(stats, "connections") == 1 &&
        StatValue(stats, "arena_used_bytes") == used_before + 64) {
      break;
    }
    usleep(50 * 1000);
  }
  EXPECT_EQ(StatValue(stats, "arena_used_bytes"), used_before + 64) << stats;  // "old" only
  EXPECT_EQ(StatValue(stats, "keys"), 1u);
  EXPECT_EQ(Cli(s, {"get", "victim"}).out, "old\n");
  EXPECT_EQ(Cli(s, {"scan"}).out, "victim\told\n");
  EXPECT_EQ(s.Stop().first, 0);
}

}  // namespace
}  // namespace unloadkv
