// Memory protection against a compromised client (docs/security.md, "Memory protection"), with
// a real kvserver on the soft RNIC and attackers that hold a client's secret: every grant is a
// memory window onto exactly its slot on its own connection, and the unload workers check
// staged writes against the same grants. Each attack runs on both paths (an offload-only and
// an unload-only attacker) and must be refused with kRemoteAccessError, the victim's value and
// the arena's usage unchanged:
//
//   * a forged grant: the attacker's own window key at another connection's published slot;
//   * another connection's stolen key, at its published slot and at its unpublished one;
//   * guessed keys: neighbours of a live key, and random ones;
//   * a write through the grant after the PUT that spent it (the server or the PUT ending it);
//   * a PUT that ends another connection's window (SEND_WITH_INVALIDATE of its stolen key);
//   * a write through an old grant's key after the client reconnected.
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "tests/kv/process_harness.h"
#include "tests/kv/raw_connection.h"
#include "tests/support/test_auth.h"
#include "transport/base/logging.h"

namespace unloadkv {
namespace {

using testing::RawConnection;
using testing::ServerProcess;

constexpr uint32_t kSlot = 200;

class MemoryProtectionTest : public ::testing::TestWithParam<engine::Path> {
 protected:
  void SetUp() override {
    SetMinLogLevel(LogLevel::kError);
    auth_ = testing::WriteTestAuthFile({});
    server_ = std::make_unique<ServerProcess>(
        std::vector<std::string>{"--auth_file=" + auth_, "--metrics=127.0.0.1:0"});
    ASSERT_FALSE(server_->address().empty()) << "kvserver did not start";
    creds_ = rpc::Credentials{testing::kTestClientUser,
                              testing::SecretOf(auth_, testing::kTestClientUser)};
    // The victim: one value published, one slot written and not yet published.
    victim_ = Open(engine::Path::kOffload);
    ASSERT_NE(victim_, nullptr);
    absl::StatusOr<proto::SlotGrant> g = victim_->Grant(kSlot);
    ASSERT_TRUE(g.ok()) << g.status();
    published_ = *g;
    ASSERT_TRUE(victim_->WriteValue(published_, kValue).ok());
    ASSERT_TRUE(victim_->Put("victim", published_.grant_id(), kValue.size()).ok());
    g = victim_->Grant(kSlot);
    ASSERT_TRUE(g.ok()) << g.status();
    pending_ = *g;
    ASSERT_TRUE(victim_->WriteValue(pending_, kPending).ok());
    before_ = Usage();
  }

  std::unique_ptr<RawConnection> Open(engine::Path path) {
    absl::StatusOr<std::unique_ptr<RawConnection>> c =
        RawConnection::Open(server_->address(), &creds_, path);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  // An attacker on the path under test writes `bytes` at `addr` under `rkey`: must be refused.
  void ExpectRefused(uint64_t addr, uint32_t rkey, const std::string& what) {
    std::unique_ptr<RawConnection> a = Open(GetParam());
    ASSERT_NE(a, nullptr);
    absl::StatusOr<engine::WriteResult> r = a->WriteRaw(addr, rkey, "EVIL-BYTES-" + what);
    ASSERT_TRUE(r.ok()) << what << ": " << r.status();
    EXPECT_EQ(r->status, rnic::WcStatus::kRemoteAccessError)
        << what << ": " << rnic::WcStatusName(r->status);
    EXPECT_EQ(r->path, GetParam()) << what;
  }

  absl::StatusOr<std::unique_ptr<Client>> Sdk() {
    ClientOptions o;
    o.server = server_->address();
    o.auth_file = auth_;
    o.user = testing::kTestClientUser;
    return Client::Connect(o);
  }
  std::string Get(const std::string& key) {
    absl::StatusOr<std::unique_ptr<Client>> c = Sdk();
    if (!c.ok()) return "(no client: " + std::string(c.status().message()) + ")";
    absl::StatusOr<std::string> v = (*c)->Get(key);
    return v.ok() ? *v : "(" + std::string(v.status().message()) + ")";
  }
  // The arena's usage (bytes of live values and outstanding grants) and the keys (STATS).
  std::pair<uint64_t, uint64_t> Usage() {
    absl::StatusOr<std::unique_ptr<Client>> c = Sdk();
    if (!c.ok()) return {0, 0};
    absl::StatusOr<ServerStats> st = (*c)->Stats();
    EXPECT_TRUE(st.ok()) << st.status();
    return st.ok() ? std::make_pair(st->arena_used_bytes, st->keys)
                   : std::make_pair(uint64_t{0}, uint64_t{0});
  }

  const std::string kValue = "victim-value-published";
  const std::string kPending = "victim-value-pending";
  std::string auth_;
  rpc::Credentials creds_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<RawConnection> victim_;
  proto::SlotGrant published_, pending_;
  std::pair<uint64_t, uint64_t> before_;
};

TEST_P(MemoryProtectionTest, AForgedGrantWritesNothing) {
  std::unique_ptr<RawConnection> a = Open(GetParam());
  ASSERT_NE(a, nullptr);
  absl::StatusOr<proto::SlotGrant> own = a->Grant(kSlot);
  ASSERT_TRUE(own.ok()) << own.status();
  // Its own key is good for its own slot only.
  absl::StatusOr<engine::WriteResult> r = a->WriteRaw(published_.addr(), own->rkey(), "EVIL");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, rnic::WcStatus::kRemoteAccessError) << rnic::WcStatusName(r->status);
  EXPECT_EQ(Get("victim"), kValue);
}

TEST_P(MemoryProtectionTest, StolenKeysWriteNothingOnAnotherConnection) {
  ExpectRefused(published_.addr(), published_.rkey(), "published");
  ExpectRefused(pending_.addr(), pending_.rkey(), "pending");
  EXPECT_EQ(Get("victim"), kValue);
  // The victim's pending slot is intact: publishing it shows its own bytes.
  ASSERT_TRUE(victim_->Put("pending", pending_.grant_id(), kPending.size()).ok());
  EXPECT_EQ(Get("pending"), kPending);
}

TEST_P(MemoryProtectionTest, GuessedKeysWriteNothing) {
  // Neighbours of a live key (what a counter would give next) and random ones.
  std::vector<uint32_t> guesses;
  for (int d = 1; d <= 8; ++d) {
    guesses.push_back(pending_.rkey() + d);
    guesses.push_back(pending_.rkey() - d);
  }
  std::mt19937 rng(12345);
  for (int i = 0; i < 16; ++i) guesses.push_back(static_cast<uint32_t>(rng()));
  for (uint32_t k : guesses) ExpectRefused(pending_.addr(), k, absl::StrCat("key ", k));
  EXPECT_EQ(Get("victim"), kValue);
  EXPECT_EQ(Usage(), before_) << "a refused write changed the arena's usage";
}

// Whether the server ends the window (a PUT sent plainly) or the PUT does (SEND_WITH_INVALIDATE,
// as the SDK sends it), the grant's key writes nothing once its PUT was answered.
TEST_P(MemoryProtectionTest, AWriteAfterThePutThatSpentTheGrantWritesNothing) {
  for (bool put_ends_it : {false, true}) {
    SCOPED_TRACE(put_ends_it ? "the PUT ends the window" : "the server ends the window");
    std::unique_ptr<RawConnection> c = Open(GetParam());
    ASSERT_NE(c, nullptr);
    absl::StatusOr<proto::SlotGrant> g = c->Grant(kSlot);
    ASSERT_TRUE(g.ok()) << g.status();
    ASSERT_TRUE(g->window());
    ASSERT_TRUE(c->WriteValue(*g, "first").ok());
    ASSERT_TRUE(c->Put("mine", g->grant_id(), 5, put_ends_it ? g->rkey() : 0).ok());
    absl::StatusOr<engine::WriteResult> r = c->WriteRaw(g->addr(), g->rkey(), "later");
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, rnic::WcStatus::kRemoteAccessError) << rnic::WcStatusName(r->status);
    EXPECT_EQ(r->path, GetParam());
    EXPECT_EQ(Get("mine"), "first");
  }
}

// A PUT that tries to end another connection's window (its stolen key) fails its own
// connection and ends nothing: the victim still writes and publishes through its grant.
TEST_P(MemoryProtectionTest, APutEndingAnotherConnectionsWindowEndsNothing) {
  std::unique_ptr<RawConnection> a = Open(GetParam());
  ASSERT_NE(a, nullptr);
  absl::StatusOr<proto::SlotGrant> own = a->Grant(kSlot);
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_FALSE(a->Put("theirs", own->grant_id(), 0, pending_.rkey()).ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!a->failed() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_TRUE(a->failed());
  ASSERT_TRUE(victim_->WriteValue(pending_, kPending).ok());
  ASSERT_TRUE(victim_->Put("pending", pending_.grant_id(), kPending.size()).ok());
  EXPECT_EQ(Get("pending"), kPending);
  EXPECT_EQ(Get("victim"), kValue);
}

TEST_P(MemoryProtectionTest, AnOldGrantsKeyWritesNothingAfterReconnecting) {
  const uint64_t addr = pending_.addr();
  const uint32_t key = pending_.rkey();
  victim_.reset();  // its grants end with its connection
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (Usage().first >= before_.first && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  const std::pair<uint64_t, uint64_t> after_close = Usage();
  EXPECT_LT(after_close.first, before_.first) << "the closed connection's grant was not revoked";
  ExpectRefused(addr, key, "after reconnecting");
  EXPECT_EQ(Usage(), after_close);
  EXPECT_EQ(Get("victim"), kValue);
}

INSTANTIATE_TEST_SUITE_P(Paths, MemoryProtectionTest,
                         ::testing::Values(engine::Path::kOffload, engine::Path::kUnload),
                         [](const ::testing::TestParamInfo<engine::Path>& p) {
                           return std::string(engine::PathName(p.param));
                         });

}  // namespace
}  // namespace unloadkv
