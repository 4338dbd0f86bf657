// GrantWindows against a demotion racing a GRANT: a window bound after the shard's RevokeShard
// would outlive the primary role (and its connection would never be closed), so Bind refuses
// grants made before a revocation it did not see.
#include "server/grant_windows.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "server/kv_store.h"
#include "transport/engine/engine.h"
#include "transport/engine/engine_test_harness.h"

namespace unloadkv::server {
namespace {

class GrantWindowsTest : public ::testing::Test {
 protected:
  static constexpr size_t kBytes = 1 << 20;
  static constexpr uint64_t kClient = 7;
  static constexpr uint32_t kShard = 3;

  void SetUp() override {
    engine::EngineOptions o;
    o.staging_slots = 8;
    ea_ = std::move(*engine::Engine::Create(&h_.a(), o));
    eb_ = std::move(*engine::Engine::Create(&h_.b(), o));
    arena_.assign(kBytes, 0);
    mr_ = std::move(*eb_->RegisterMemory(arena_.data(), kBytes, rnic::kLocalWrite | rnic::kMwBind));
    h_.Start(*ea_, *eb_);
    a_ = std::move(*ea_->CreateConnection(engine::Only(engine::Path::kOffload)));
    b_ = std::move(*eb_->CreateConnection(engine::Only(engine::Path::kOffload)));
    ASSERT_TRUE(a_->Connect(b_->local_info()).ok());
    ASSERT_TRUE(b_->Connect(a_->local_info()).ok());
    windows_ = std::make_unique<GrantWindows>(&h_.b());
  }

  void TearDown() override {
    windows_.reset();
    a_.reset();
    b_.reset();
    mr_.reset();
    ea_.reset();
    eb_.reset();
  }

  absl::StatusOr<std::vector<uint32_t>> Bind(uint64_t generation,
                                             std::vector<KvStore::Grant>* grants) {
    *grants = *store_.GrantSlots(kClient, 64, 2);
    absl::StatusOr<std::vector<uint32_t>> out = absl::UnknownError("done never ran");
    windows_->Bind(b_, kClient, kShard, generation, store_, *grants, *mr_,
                   [&out](absl::StatusOr<std::vector<uint32_t>> keys) { out = std::move(keys); });
    return out;
  }

  engine::SoftHarness h_;
  std::unique_ptr<engine::Engine> ea_, eb_;
  std::vector<char> arena_;
  std::unique_ptr<rnic::MemoryRegion> mr_;
  std::shared_ptr<engine::Connection> a_, b_;
  KvStore store_{arena_.data(), kBytes};
  std::unique_ptr<GrantWindows> windows_;
};

TEST_F(GrantWindowsTest, BindsAtTheCurrentGenerationAndARevocationClosesTheHolder) {
  std::vector<KvStore::Grant> grants;
  absl::StatusOr<std::vector<uint32_t>> keys = Bind(windows_->Generation(kShard), &grants);
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(keys->size(), 2u);
  EXPECT_EQ(windows_->LiveWindows(kShard).size(), 2u);
  windows_->RevokeShard(kShard);
  EXPECT_EQ(windows_->Generation(kShard), 1u);
  EXPECT_TRUE(windows_->LiveWindows(kShard).empty());
  EXPECT_TRUE(b_->failed());  // closed: the holder of windows into a demoted shard
}

TEST_F(GrantWindowsTest, GrantsMadeBeforeARevocationAreRefusedAndRevoked) {
  // The handler read the generation and saw the shard primary; then the shard was demoted
  // (RevokeShard found no windows to close) before Bind ran.
  const uint64_t generation = windows_->Generation(kShard);
  windows_->RevokeShard(kShard);
  std::vector<KvStore::Grant> grants;
  absl::StatusOr<std::vector<uint32_t>> keys = Bind(generation, &grants);
  EXPECT_EQ(keys.status().code(), absl::StatusCode::kUnavailable) << keys.status();
  EXPECT_TRUE(windows_->LiveWindows(kShard).empty());
  for (const KvStore::Grant& g : grants) {
    EXPECT_FALSE(store_.RevokeGrant(kClient, g.id)) << "grant " << g.id << " still held";
  }
  EXPECT_FALSE(b_->failed());  // nothing to close: the connection serves on
  // Another shard's generation is its own.
  EXPECT_EQ(windows_->Generation(kShard + 1), 0u);
}

}  // namespace
}  // namespace unloadkv::server
