// Memory windows a connection grants its peer (Connection::BindWindows, InvalidateWindow,
// SetStagedWriteCheck): both paths admit exactly what the NIC admits, on the soft RNIC and on
// the simulated fabric.
#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "transport/base/mutex.h"
#include "transport/engine/engine.h"
#include "transport/engine/engine_test_harness.h"

namespace unloadkv::engine {
namespace {

struct Setup {
  const char* backend;
  int lanes;
};

class EngineWindowTest : public ::testing::TestWithParam<Setup> {
 protected:
  static constexpr size_t kBytes = 1 << 20;

  void SetUp() override {
    const bool sim = std::string(GetParam().backend) == "sim";
    if (sim) {
      h_ = std::make_unique<SimHarness>();
    } else {
      h_ = std::make_unique<SoftHarness>();
    }
    EngineOptions o;
    o.staging_slots = 8;
    o.staging_lanes = GetParam().lanes;
    o.unload_workers = GetParam().lanes;
    o.metrics = &metrics_;
    o.modeled_huge_pages = sim;
    ea_ = std::move(*Engine::Create(&h_->a(), o));
    eb_ = std::move(*Engine::Create(&h_->b(), o));
    src_.assign(kBytes, 0);
    dst_.assign(kBytes, 0);
    src_mr_ = std::move(*ea_->RegisterMemory(src_.data(), kBytes, rnic::kLocalWrite));
    // The target's memory lends itself to windows only: no remote right of its own.
    dst_mr_ =
        std::move(*eb_->RegisterMemory(dst_.data(), kBytes, rnic::kLocalWrite | rnic::kMwBind));
    h_->Start(*ea_, *eb_);
  }

  void TearDown() override {
    pairs_.clear();
    windows_.clear();
    ea_.reset();
    eb_.reset();
  }

  // A connection from a to b whose a end writes on `path`; returns its index.
  int Connect(Path path) {
    Pair p;
    p.a = std::move(*ea_->CreateConnection(Only(path)));
    p.b = std::move(*eb_->CreateConnection(Only(Path::kOffload)));
    EXPECT_TRUE(p.a->Connect(p.b->local_info()).ok());
    EXPECT_TRUE(p.b->Connect(p.a->local_info()).ok());
    pairs_.push_back(std::move(p));
    return static_cast<int>(pairs_.size()) - 1;
  }
  Connection& A(int i) { return *pairs_[i].a; }
  Connection& B(int i) { return *pairs_[i].b; }

  // Binds a fresh window of b over [offset, offset + len) of dst_ on b's end of pair `i`;
  // returns its key once bound (0 on failure).
  uint32_t Grant(int i, size_t offset, size_t len) {
    windows_.push_back(std::move(*eb_->device()->AllocateWindow()));
    rnic::MemoryWindow* w = windows_.back().get();
    WindowGrant g{w, dst_mr_.get(), dst_mr_->address() + offset, len};
    auto done = std::make_shared<std::atomic<int>>(0);
    absl::Status st = B(i).BindWindows({&g, 1}, [done](absl::Status s) { *done = s.ok() ? 1 : 2; });
    EXPECT_TRUE(st.ok()) << st;
    if (!st.ok()) return 0;
    EXPECT_TRUE(h_->WaitUntil([&] { return done->load() != 0; }, absl::Seconds(10)));
    EXPECT_EQ(done->load(), 1);
    return w->rkey();
  }

  bool Invalidate(int i, uint32_t key) {
    auto done = std::make_shared<std::atomic<int>>(0);
    absl::Status st =
        B(i).InvalidateWindow(key, [done](absl::Status s) { *done = s.ok() ? 1 : 2; });
    EXPECT_TRUE(st.ok()) << st;
    return st.ok() && h_->WaitUntil([&] { return done->load() != 0; }, absl::Seconds(10)) &&
           done->load() == 1;
  }

  // Writes `len` bytes of `fill` from a's end of pair `i` to dst_ offset `offset` through `rkey`;
  // returns the write's status and path.
  WriteResult WriteThrough(int i, size_t offset, uint32_t len, uint32_t rkey, char fill) {
    std::memset(&src_[offset], fill, len);
    auto result = std::make_shared<WriteResult>();
    auto done = std::make_shared<std::atomic<bool>>(false);
    absl::Status st = A(i).Write(src_mr_->Sge(offset, len), dst_mr_->address() + offset, rkey,
                                 [result, done](const WriteResult& r) {
                                   *result = r;
                                   *done = true;
                                 });
    EXPECT_TRUE(st.ok()) << st;
    EXPECT_TRUE(h_->WaitUntil([&] { return done->load(); }, absl::Seconds(10)));
    return *result;
  }

  bool DstHolds(size_t offset, size_t len, char byte) const {
    for (size_t k = 0; k < len; ++k) {
      if (dst_[offset + k] != byte) return false;
    }
    return true;
  }

  struct Pair {
    std::unique_ptr<Connection> a, b;
  };
  std::unique_ptr<Harness> h_;
  CountingMetrics metrics_;
  std::unique_ptr<Engine> ea_, eb_;
  std::vector<char> src_, dst_;
  std::unique_ptr<rnic::MemoryRegion> src_mr_, dst_mr_;
  std::vector<Pair> pairs_;
  std::vector<std::unique_ptr<rnic::MemoryWindow>> windows_;
};

TEST_P(EngineWindowTest, BothPathsWriteExactlyTheWindowAndNothingElse) {
  for (Path path : {Path::kOffload, Path::kUnload}) {
    SCOPED_TRACE(PathName(path));
    std::fill(dst_.begin(), dst_.end(), 0);
    const int i = Connect(path);
    const uint32_t key = Grant(i, 4096, 1024);
    ASSERT_NE(key, 0u);
    WriteResult in = WriteThrough(i, 4096, 1024, key, 'w');
    EXPECT_TRUE(in.ok()) << rnic::WcStatusName(in.status);
    EXPECT_EQ(in.path, path);
    EXPECT_TRUE(DstHolds(4096, 1024, 'w'));
    // One byte past the window, still in the region: refused as the NIC refuses it.
    WriteResult past = WriteThrough(i, 4096 + 1000, 25, key, 'x');
    EXPECT_EQ(past.status, rnic::WcStatus::kRemoteAccessError);
    EXPECT_TRUE(DstHolds(4096 + 1000, 24, 'w'));
    EXPECT_EQ(dst_[4096 + 1024], 0);
  }
}

TEST_P(EngineWindowTest, TheRegionsOwnKeyWritesNothingOnEitherPath) {
  for (Path path : {Path::kOffload, Path::kUnload}) {
    SCOPED_TRACE(PathName(path));
    const int i = Connect(path);
    WriteResult r = WriteThrough(i, 0, 64, dst_mr_->rkey(), 'r');
    EXPECT_EQ(r.status, rnic::WcStatus::kRemoteAccessError);
    EXPECT_TRUE(DstHolds(0, 64, 0));
  }
}

TEST_P(EngineWindowTest, AWindowOfAnotherConnectionWritesNothingOnEitherPath) {
  const int owner = Connect(Path::kOffload);
  const uint32_t key = Grant(owner, 8192, 4096);
  ASSERT_NE(key, 0u);
  for (Path path : {Path::kOffload, Path::kUnload}) {
    SCOPED_TRACE(PathName(path));
    const int thief = Connect(path);
    WriteResult r = WriteThrough(thief, 8192, 512, key, 's');
    EXPECT_EQ(r.status, rnic::WcStatus::kRemoteAccessError);
    EXPECT_TRUE(DstHolds(8192, 4096, 0));
  }
  // The owner still can.
  EXPECT_TRUE(WriteThrough(owner, 8192, 512, key, 'o').ok());
  EXPECT_EQ(metrics_.validation_failures[static_cast<int>(ValidationFailure::kWrongConnection)], 1u)
      << "the unload path refused it for another reason";
}

TEST_P(EngineWindowTest, AfterAnInvalidationNeitherPathWritesThroughTheKey) {
  for (Path path : {Path::kOffload, Path::kUnload}) {
    SCOPED_TRACE(PathName(path));
    std::fill(dst_.begin(), dst_.end(), 0);
    const int i = Connect(path);
    const uint32_t key = Grant(i, 0, 4096);
    ASSERT_TRUE(WriteThrough(i, 0, 100, key, 'a').ok());
    ASSERT_TRUE(Invalidate(i, key));
    EXPECT_EQ(WriteThrough(i, 200, 100, key, 'b').status, rnic::WcStatus::kRemoteAccessError);
    EXPECT_TRUE(DstHolds(200, 100, 0));
    // Invalidating it again is refused at once: it is bound on nothing here.
    EXPECT_FALSE(B(i).InvalidateWindow(key, [](absl::Status) {}).ok());
  }
}

// A message that invalidates a window (SendOptions::invalidate_rkey) ends it behind the writes
// posted before it, which land on both paths (on the unload path they travel the staging lanes
// and may be validated after the message arrived); the target's own InvalidateWindow of the key
// then only waits for them.
TEST_P(EngineWindowTest, APeersInvalidatingMessageEndsTheWindowBehindTheWritesBeforeIt) {
  for (Path path : {Path::kOffload, Path::kUnload}) {
    SCOPED_TRACE(PathName(path));
    std::fill(dst_.begin(), dst_.end(), 0);
    const int i = Connect(path);
    auto delivered = std::make_shared<std::atomic<int>>(0);
    B(i).SetMessageHandler([delivered](absl::Span<const char>) { ++*delivered; });
    const uint32_t key = Grant(i, 0, 4096);
    std::memset(&src_[0], 'a', 1000);
    auto landed = std::make_shared<std::atomic<int>>(0);
    for (int k = 0; k < 4; ++k) {
      ASSERT_TRUE(
          A(i).Write(src_mr_->Sge(k * 250, 250), dst_mr_->address() + k * 250, key,
                     [landed](const WriteResult& r) { landed->fetch_add(r.ok() ? 1 : 100); })
              .ok());
    }
    SendOptions end_it;
    end_it.invalidate_rkey = key;
    ASSERT_TRUE(A(i).Send("put", nullptr, end_it).ok());
    ASSERT_TRUE(h_->WaitUntil([&] { return delivered->load() == 1 && landed->load() == 4; },
                              absl::Seconds(10)))
        << "delivered " << delivered->load() << ", landed " << landed->load();
    EXPECT_TRUE(DstHolds(0, 1000, 'a'));
    ASSERT_TRUE(Invalidate(i, key));  // ended by the peer: no work request, writes drained
    EXPECT_EQ(WriteThrough(i, 2000, 100, key, 'b').status, rnic::WcStatus::kRemoteAccessError);
    EXPECT_TRUE(DstHolds(2000, 100, 0));
  }
}

// A write posted right behind the invalidating message is refused on both paths, even when its
// staged copy is validated before the message is delivered; nothing of it lands.
TEST_P(EngineWindowTest, AWriteBehindAnInvalidatingMessageWritesNothing) {
  for (Path path : {Path::kOffload, Path::kUnload}) {
    SCOPED_TRACE(PathName(path));
    std::fill(dst_.begin(), dst_.end(), 0);
    const int i = Connect(path);
    B(i).SetMessageHandler([](absl::Span<const char>) {});
    const uint32_t key = Grant(i, 0, 4096);
    SendOptions end_it;
    end_it.invalidate_rkey = key;
    ASSERT_TRUE(A(i).Send("put", nullptr, end_it).ok());
    EXPECT_EQ(WriteThrough(i, 100, 100, key, 'c').status, rnic::WcStatus::kRemoteAccessError);
    EXPECT_TRUE(DstHolds(0, 4096, 0));
  }
}

// A message invalidating a key its connection did not bind fails the connection, as on verbs.
TEST_P(EngineWindowTest, InvalidatingAnotherConnectionsWindowFailsTheConnection) {
  const int victim = Connect(Path::kOffload);
  const uint32_t key = Grant(victim, 0, 4096);
  const int thief = Connect(Path::kOffload);
  B(thief).SetMessageHandler([](absl::Span<const char>) {});
  SendOptions end_it;
  end_it.invalidate_rkey = key;
  ASSERT_TRUE(A(thief).Send("put", nullptr, end_it).ok());
  EXPECT_TRUE(h_->WaitUntil([&] { return A(thief).failed(); }, absl::Seconds(10)));
  // The victim's window still works.
  EXPECT_TRUE(WriteThrough(victim, 0, 64, key, 'v').ok());
  EXPECT_TRUE(DstHolds(0, 64, 'v'));
}

// What the application's check refuses is refused as the NIC refuses, and counted.
class DenyAbove : public StagedWriteCheck {
 public:
  explicit DenyAbove(uint64_t limit) : limit_(limit) {}
  rnic::AccessVerdict Check(uint32_t, uint64_t addr, uint64_t length) const override {
    return addr + length > limit_ ? rnic::AccessVerdict::kNoPermission : rnic::AccessVerdict::kOk;
  }

 private:
  uint64_t limit_;
};

TEST_P(EngineWindowTest, TheApplicationsCheckRefusesStagedWritesItDoesNotAdmit) {
  const int i = Connect(Path::kUnload);
  const uint32_t key = Grant(i, 0, 8192);
  B(i).SetStagedWriteCheck(std::make_shared<DenyAbove>(dst_mr_->address() + 4096));
  EXPECT_TRUE(WriteThrough(i, 0, 4096, key, 'k').ok());
  WriteResult r = WriteThrough(i, 4096, 64, key, 'n');
  EXPECT_EQ(r.status, rnic::WcStatus::kRemoteAccessError);
  EXPECT_EQ(r.path, Path::kUnload);
  EXPECT_TRUE(DstHolds(4096, 64, 0));
  EXPECT_EQ(metrics_.validation_failures[static_cast<int>(ValidationFailure::kNotGranted)], 1u);
}

TEST_P(EngineWindowTest, AFailedConnectionFailsItsWindowWorkAndForgetsItsKeys) {
  const int i = Connect(Path::kUnload);
  const uint32_t key = Grant(i, 0, 4096);
  // A refused write fails the connection (both ends).
  ASSERT_EQ(WriteThrough(i, 0, 8, dst_mr_->rkey(), 'z').status, rnic::WcStatus::kRemoteAccessError);
  ASSERT_TRUE(h_->WaitUntil([&] { return B(i).failed(); }, absl::Seconds(10)));
  EXPECT_FALSE(B(i).InvalidateWindow(key, [](absl::Status) {}).ok());
  windows_.push_back(std::move(*eb_->device()->AllocateWindow()));
  WindowGrant g{windows_.back().get(), dst_mr_.get(), dst_mr_->address(), 64};
  EXPECT_FALSE(B(i).BindWindows({&g, 1}, [](absl::Status) {}).ok());
  // The old key names nothing for a new connection either.
  const int j = Connect(Path::kUnload);
  EXPECT_EQ(WriteThrough(j, 0, 8, key, 'q').status, rnic::WcStatus::kRemoteAccessError);
}

// An invalidation's callback means no byte through the key lands afterwards, even while
// staged writes through it are being validated and copied on worker threads: a stream of
// unloaded writes into the window, invalidated in the middle; the range is snapshotted in the
// callback and must not change after it.
TEST_P(EngineWindowTest, NoStagedWriteLandsAfterTheInvalidationCompleted) {
  const int i = Connect(Path::kUnload);
  const uint32_t key = Grant(i, 0, 256 << 10);
  auto issued = std::make_shared<std::atomic<int>>(0);
  auto finished = std::make_shared<std::atomic<int>>(0);
  constexpr int kWrites = 400;
  constexpr uint32_t kLen = 8192;
  for (int n = 0; n < kWrites; ++n) {
    const size_t off = (n % 32) * kLen;
    std::memset(&src_[off], 1 + n % 100, kLen);
    if (!A(i).Write(src_mr_->Sge(off, kLen), dst_mr_->address() + off, key,
                    [finished](const WriteResult&) { ++*finished; })
             .ok()) {
      break;
    }
    ++*issued;
    if (n == kWrites / 4) {
      auto snapshot = std::make_shared<std::vector<char>>();
      auto done = std::make_shared<std::atomic<bool>>(false);
      char* dst = dst_.data();
      ASSERT_TRUE(B(i).InvalidateWindow(key,
                                        [snapshot, done, dst](absl::Status) {
                                          snapshot->assign(dst, dst + (256 << 10));
                                          *done = true;
                                        })
                      .ok());
      ASSERT_TRUE(h_->WaitUntil([&] { return done->load(); }, absl::Seconds(10)));
      ASSERT_TRUE(
          h_->WaitUntil([&] { return finished->load() == issued->load(); }, absl::Seconds(20)));
      EXPECT_EQ(std::memcmp(snapshot->data(), dst_.data(), snapshot->size()), 0)
          << "a staged write landed after the invalidation completed";
      return;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, EngineWindowTest,
                         ::testing::Values(Setup{"soft", 1}, Setup{"soft", 2}, Setup{"sim", 1},
                                           Setup{"sim", 2}),
                         [](const ::testing::TestParamInfo<Setup>& info) {
                           return std::string(info.param.backend) + "_" +
                                  std::to_string(info.param.lanes) + "lanes";
                         });

}  // namespace
}  // namespace unloadkv::engine
