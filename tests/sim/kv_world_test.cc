#include "tests/sim/kv_world.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace unloadkv::world {
namespace {

KvWorldOptions SmallWorld() {
  KvWorldOptions o;
  o.server.arena_bytes = 64 << 20;
  o.server.unload_workers = 2;
  return o;
}

TEST(KvWorldTest, TheRealServerAnswersAnEmbeddedClientInVirtualTime) {
  auto world = KvWorld::Create(SmallWorld());
  ASSERT_TRUE(world.ok()) << world.status();
  ClientOptions co;
  co.policy = "unload";
  auto client = (*world)->Connect(co);
  ASSERT_TRUE(client.ok()) << client.status();
  const int64_t t0 = (*world)->now_ns();
  ASSERT_TRUE((*client)->Put("a", "apple").ok());
  ASSERT_TRUE((*client)->Put("b", std::string(3000, 'b')).ok());
  EXPECT_GT((*world)->now_ns(), t0);  // the round trips took modeled time
  EXPECT_EQ(*(*client)->Get("a"), "apple");
  EXPECT_EQ(*(*client)->Get("b"), std::string(3000, 'b'));
  EXPECT_EQ((*client)->Get("c").status().code(), absl::StatusCode::kNotFound);
  auto page = (*client)->Scan("", "", 10);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->items.size(), 2u);
  EXPECT_EQ(page->items[0].first, "a");
  ASSERT_TRUE((*client)->Delete("a").ok());
  EXPECT_EQ((*client)->Get("a").status().code(), absl::StatusCode::kNotFound);
  // The unload policy sent both values through the staging ring and a server worker.
  EXPECT_EQ((*client)->write_stats().unload, 2u);
  EXPECT_EQ((*world)->server().stats().keys, 1u);
  EXPECT_GT((*world)->server_stats().cpu_busy_ns, 0u);
}

// Threads that block in synchronous calls, as YCSB's do: one trace of what every thread saw
// and when (virtual time), which must be the same on every run.
std::string RunThreadsOnce(const std::string& policy) {
  auto world = KvWorld::Create(SmallWorld());
  EXPECT_TRUE(world.ok()) << world.status();
  std::vector<std::unique_ptr<Client>> clients;
  for (int c = 0; c < 4; ++c) {
    ClientOptions co;
    co.policy = policy;
    auto client = (*world)->Connect(co);
    EXPECT_TRUE(client.ok()) << client.status();
    clients.push_back(std::move(*client));
  }
  std::vector<std::string> traces(clients.size());
  std::vector<std::function<void()>> bodies;
  for (size_t c = 0; c < clients.size(); ++c) {
    bodies.push_back([&, c] {
      for (int i = 0; i < 50; ++i) {
        const std::string key = absl::StrCat("k", (c * 7 + i) % 20);
        const std::string value = absl::StrCat("v", c, "-", i);
        EXPECT_TRUE(clients[c]->Put(key, value).ok());
        absl::StatusOr<std::string> got = clients[c]->Get(key);
        ASSERT_TRUE(got.ok()) << got.status();
        // Another thread may have written the key in between; it wrote some thread's value.
        EXPECT_EQ(got->substr(0, 1), "v");
        absl::StrAppend(&traces[c], (*world)->now_ns(), ":", *got, " ");
      }
    });
  }
  EXPECT_TRUE((*world)->RunThreads(std::move(bodies)).ok());
  std::string all;
  for (const std::string& t : traces) absl::StrAppend(&all, t, "\n");
  clients.clear();
  return all;
}

TEST(KvWorldTest, BlockingThreadsRunDeterministically) {
  for (const char* policy : {"offload", "adaptive"}) {
    const std::string first = RunThreadsOnce(policy);
    EXPECT_EQ(RunThreadsOnce(policy), first) << policy;
  }
}

TEST(KvWorldTest, RefusesAnEmbeddingWithoutADevice) {
  KvServerEmbedding e;
  KvServerOptions o;
  o.embedding = &e;
  EXPECT_EQ(KvServer::Start(o).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace unloadkv::world
