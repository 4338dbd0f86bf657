// The write engine's invariants (engine.h), on the soft RNIC and on the simulated fabric.
#include "transport/engine/engine.h"

#include <sys/resource.h>

#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "transport/base/logging.h"
#include "transport/base/mutex.h"
#include "transport/engine/adaptive_policy.h"
#include "transport/engine/engine_internal.h"
#include "transport/engine/engine_test_harness.h"
#include "transport/sim/fabric.h"
#include "transport/soft/soft_device.h"

namespace unloadkv::engine {
namespace {

// Offloads every write and asks for every write's latency.
class ObservingPolicy : public PathPolicy {
 public:
  absl::string_view name() const override { return "observing"; }
  Decision Decide(uint64_t, uint32_t, bool) override {
    Decision d;
    d.observe = true;
    return d;
  }
  void Observe(const Decision&, const WriteTiming&) override { ++observed; }
  void Unobserved(const Decision&) override { ++unobserved; }
  std::atomic<int> observed{0}, unobserved{0};
};

// Offloads every write, observed, and records when each was decided and whether it waited.
class DecisionTimingPolicy : public PathPolicy {
 public:
  absl::string_view name() const override { return "decision timing"; }
  Decision Decide(uint64_t, uint32_t, bool) override {
    decided_after_a_completion += observed > 0;
    Decision d;
    d.observe = true;
    return d;
  }
  void Observe(const Decision&, const WriteTiming& t) override {
    ++observed;
    waited += t.waited;
  }
  // Called under the connection's lock, one at a time; read after the writes completed.
  int observed = 0, waited = 0, decided_after_a_completion = 0;
};

// Backend ("soft" or "sim") and staging lanes per connection (as many unload workers), and
// the soft devices' ports (each engine worker on one of its own; the tests' connections on
// the last port, their memory registered through the first).
struct Setup {
  const char* backend;
  int lanes;
  int ports = 1;
};

class EngineTest : public ::testing::TestWithParam<Setup> {
 protected:
  static constexpr size_t kBytes = 8 << 20;

  void SetUp() override {
    if (std::string(GetParam().backend) == "soft") {
      h_ = std::make_unique<SoftHarness>(GetParam().ports);
    } else {
      h_ = std::make_unique<SimHarness>();
    }
    EngineOptions o;
    o.staging_slots = 8;
    o.staging_lanes = lanes();
    o.unload_workers = lanes();
    o.metrics = &metrics_;
    o.modeled_huge_pages = std::string(GetParam().backend) == "sim";
    o.checks = checks_;
    ea_ = std::move(*Engine::Create(&h_->a(), o));
    eb_ = std::move(*Engine::Create(&h_->b(), o));
    src_.assign(kBytes, 0);
    dst_.assign(kBytes, 0);
    src_mr_ = std::move(*ea_->RegisterMemory(src_.data(), kBytes, rnic::kLocalWrite));
    dst_mr_ = std::move(
        *eb_->RegisterMemory(dst_.data(), kBytes, rnic::kLocalWrite | rnic::kRemoteWrite));
    h_->Start(*ea_, *eb_);
    // Connections go to workers in turn: the next ones are on the last port.
    for (int i = 1; i < GetParam().ports; ++i) {
      ASSERT_TRUE(ea_->CreateConnection(Only(Path::kOffload)).ok());
      ASSERT_TRUE(eb_->CreateConnection(Only(Path::kOffload)).ok());
    }
  }

  void TearDown() override {
    ca_.reset();
    cb_.reset();
    ea_.reset();
    eb_.reset();
  }

  void Connect(std::unique_ptr<PathPolicy> policy) {
    ca_ = std::move(*ea_->CreateConnection(std::move(policy)));
    cb_ = std::move(*eb_->CreateConnection(Only(Path::kOffload)));
    ASSERT_TRUE(ca_->Connect(cb_->local_info()).ok());
    ASSERT_TRUE(cb_->Connect(ca_->local_info()).ok());
  }

  uint64_t Dst(size_t off) const { return dst_mr_->address() + off; }
  int lanes() const { return GetParam().lanes; }

  // Writes n blocks of `bytes` from src_ (block i filled with 1 + i % 127) to consecutive
  // blocks at `dst` in region `rkey`, all posted before any completes; waits for every
  // callback and returns how many reported success on the unload path. (The counters are
  // shared with the callbacks, which may outlive a call that timed out.)
  int WriteBlocksAndWait(int n, uint32_t bytes, uint64_t dst, uint32_t rkey) {
    auto done = std::make_shared<std::atomic<int>>(0);
    auto unloaded = std::make_shared<std::atomic<int>>(0);
    for (int i = 0; i < n; ++i) {
      std::memset(&src_[size_t(i) * bytes], 1 + i % 127, bytes);
      EXPECT_TRUE(ca_->Write(src_mr_->Sge(size_t(i) * bytes, bytes), dst + uint64_t(i) * bytes,
                             rkey,
                             [done, unloaded](const WriteResult& r) {
                               *unloaded += r.ok() && r.path == Path::kUnload;
                               ++*done;
                             })
                      .ok());
    }
    EXPECT_TRUE(h_->WaitUntil([&] { return done->load() == n; }, absl::Seconds(20)));
    return unloaded->load();
  }

  std::unique_ptr<Harness> h_;
  CountingMetrics metrics_;
  InvariantChecks* checks_ = nullptr;  // EngineOptions::checks of both engines
  std::unique_ptr<Engine> ea_, eb_;
  std::vector<char> src_, dst_;
  std::unique_ptr<rnic::MemoryRegion> src_mr_, dst_mr_;
  std::unique_ptr<Connection> ca_, cb_;
};

TEST_P(EngineTest, CompletionMeansVisibleOnBothPaths) {
  for (Path path : {Path::kOffload, Path::kUnload}) {
    SCOPED_TRACE(PathName(path));
    Connect(Only(path));
    constexpr int kWrites = 200;
    std::atomic<int> done{0}, bad{0};
    std::mt19937 rng(1);
    for (int i = 0; i < kWrites; ++i) {
      size_t off = (rng() % 2000) * 4096;
      uint32_t len = 1 + rng() % 4000;
      for (uint32_t k = 0; k < len; ++k) src_[off + k] = static_cast<char>(rng());
      ASSERT_TRUE(ca_->Write(src_mr_->Sge(off, len), Dst(off), dst_mr_->rkey(),
                             [&, off, len, path](const WriteResult& r) {
                               if (!r.ok() || r.path != path ||
                                   std::memcmp(&src_[off], &dst_[off], len) != 0) {
                                 ++bad;
                               }
                               ++done;
                             })
                      .ok());
      ASSERT_TRUE(h_->WaitUntil([&] { return done.load() == i + 1; }, absl::Seconds(10)));
    }
    EXPECT_EQ(bad.load(), 0) << "a completed write was not visible, failed or took another path";
  }
}

// Close is a fence: once the target closed its end, nothing the initiator writes afterwards
// lands in the target's memory, on either path, and every such write fails.
TEST_P(EngineTest, AfterTheTargetClosesTheConnectionNoWriteLands) {
  for (Path path : {Path::kOffload, Path::kUnload}) {
    SCOPED_TRACE(PathName(path));
    std::fill(dst_.begin(), dst_.end(), 0);
    Connect(Only(path));
    // One write through first: the connection works.
    ASSERT_EQ(WriteBlocksAndWait(1, 512, Dst(0), dst_mr_->rkey()), path == Path::kUnload ? 1 : 0);
    ASSERT_EQ(dst_[0], 1);
    cb_->Close();
    cb_->Close();  // idempotent
    EXPECT_TRUE(cb_->failed());
    auto done = std::make_shared<std::atomic<int>>(0);
    auto succeeded = std::make_shared<std::atomic<int>>(0);
    std::memset(&src_[0], 0x5a, 4096);
    constexpr int kWrites = 20;
    for (int i = 0; i < kWrites; ++i) {
      absl::Status st = ca_->Write(src_mr_->Sge(0, 4096), Dst(size_t(i + 1) * 4096),
                                   dst_mr_->rkey(), [done, succeeded](const WriteResult& r) {
                                     *succeeded += r.ok();
                                     ++*done;
                                   });
      if (!st.ok()) ++*done;  // the initiator already knows the connection failed
    }
    ASSERT_TRUE(h_->WaitUntil([&] { return done->load() == kWrites; }, absl::Seconds(20)));
    EXPECT_EQ(succeeded->load(), 0);
    for (int i = 0; i < kWrites; ++i) {
      EXPECT_EQ(dst_[size_t(i + 1) * 4096], 0) << "write " << i << " landed after Close";
    }
    ca_.reset();
    cb_.reset();
  }
}

TEST_P(EngineTest, CallbacksFollowPostOrderAndLaterWritesNeverOvertakeEarlierOnes) {
  // Alternate paths on writes to one 8-byte counter; each write carries its own index.
  Connect(std::make_unique<ScriptedPolicy>(std::vector<Path>{Path::kUnload, Path::kOffload,
                                                             Path::kUnload, Path::kUnload,
                                                             Path::kOffload, Path::kOffload}));
  constexpr int kWrites = 300;
  std::vector<int> order;
  Mutex mu;
  std::atomic<int> done{0}, regressions{0};
  for (int i = 0; i < kWrites; ++i) {
    // Bursts of five, sometimes leaving two in flight, so some writes overlap in-flight unloaded
    // ones (and must follow them) while others find the ring empty and really go offload.
    if (i % 5 == 0 && i > 0) {
      int keep = (i % 10 == 0) ? 0 : 2;  // alternately drain, and leave two in flight
      ASSERT_TRUE(h_->WaitUntil([&] { return done.load() >= i - keep; }, absl::Seconds(10)));
    }
    uint64_t v = i + 1;
    std::memcpy(&src_[i * 8], &v, 8);
    ASSERT_TRUE(ca_->Write(src_mr_->Sge(i * 8, 8), Dst(0), dst_mr_->rkey(),
                           [&, i](const WriteResult& r) {
                             uint64_t seen;
                             std::memcpy(&seen, &dst_[0], 8);
                             // Visible, and never older than this write.
                             if (!r.ok() || seen < static_cast<uint64_t>(i + 1)) ++regressions;
                             {
                               MutexLock l(&mu);
                               order.push_back(i);
                             }
                             ++done;  // last: the test may end as soon as it sees this
                           })
                    .ok());
  }
  ASSERT_TRUE(h_->WaitUntil([&] { return done.load() == kWrites; }, absl::Seconds(20)));
  EXPECT_EQ(regressions.load(), 0);
  for (int i = 0; i < kWrites; ++i) ASSERT_EQ(order[i], i) << "callbacks out of post order";
  uint64_t last;
  std::memcpy(&last, &dst_[0], 8);
  EXPECT_EQ(last, static_cast<uint64_t>(kWrites)) << "an earlier write landed after a later one";
  EXPECT_GT(metrics_.writes[0].load(), 0u);
  EXPECT_GT(metrics_.writes[1].load(), 0u);
  // Both engines share metrics_: the target applied every unloaded write the initiator posted.
  EXPECT_EQ(metrics_.staged_writes_applied.load(),
            metrics_.writes[static_cast<int>(Path::kUnload)].load());
}

TEST_P(EngineTest, MessageAfterWriteIsDeliveredAfterTheWriteIsVisible) {
  for (Path path : {Path::kUnload, Path::kOffload}) {
    SCOPED_TRACE(PathName(path));
    Connect(Only(path));
    std::atomic<int> delivered{0}, stale{0};
    // The message names (offset, value) of each write posted before it.
    cb_->SetMessageHandler([&](absl::Span<const char> m) {
      for (size_t k = 0; k + 16 <= m.size(); k += 16) {
        uint64_t off, expect;
        std::memcpy(&off, m.data() + k, 8);
        std::memcpy(&expect, m.data() + k + 8, 8);
        uint64_t seen;
        std::memcpy(&seen, &dst_[off], 8);
        if (seen != expect) ++stale;
      }
      ++delivered;
    });
    constexpr int kRounds = 100;
    for (int i = 0; i < kRounds; ++i) {
      // One to four writes (over the lanes when there are several), then the message.
      char msg[64];
      const int writes = 1 + i % 4;
      for (int w = 0; w < writes; ++w) {
        uint64_t off = ((i % 25) * 4 + w) * 4096,
                 value = 1000 + i + (path == Path::kOffload ? 7777 : 0);
        std::memcpy(&src_[off], &value, 8);
        ASSERT_TRUE(ca_->Write(src_mr_->Sge(off, 8), Dst(off), dst_mr_->rkey(), nullptr).ok());
        std::memcpy(msg + 16 * w, &off, 8);
        std::memcpy(msg + 16 * w + 8, &value, 8);
      }
      // No wait for the writes: the message alone must see them.
      ASSERT_TRUE(ca_->Send(absl::MakeConstSpan(msg, 16 * writes), nullptr).ok());
      ASSERT_TRUE(h_->WaitUntil([&] { return delivered.load() == i + 1; }, absl::Seconds(10)));
    }
    EXPECT_EQ(stale.load(), 0) << "a message overtook the write posted before it";
  }
}

// Records what the engines report to EngineOptions::checks, and at each delivery whether the
// writes issued before the message (and not yet finished) hold their bytes: the hooks a
// simulation's invariant checks rely on (tests/sim/sim_invariants.h). Any thread.
class RecordingChecks : public InvariantChecks {
 public:
  bool WriteCompleted(const std::string& connection, uint64_t op, const void*, size_t, uint64_t,
                      uint32_t) override {
    MutexLock l(&mu_);
    events_.push_back(absl::StrCat("completed ", connection, " op ", op));
    return true;
  }
  bool WriteRefused(size_t, uint64_t, uint32_t, uint32_t) override { return true; }
  void WriteIssued(const std::string& connection, uint64_t op, const void* local, size_t length,
                   uint64_t remote_addr, uint32_t) override {
    MutexLock l(&mu_);
    events_.push_back(absl::StrCat("write ", connection, " op ", op));
    pending_[{connection, op}] = {remote_addr,
                                  std::string(static_cast<const char*>(local), length)};
  }
  void WriteFinished(const std::string& connection, uint64_t op) override {
    MutexLock l(&mu_);
    events_.push_back(absl::StrCat("finished ", connection, " op ", op));
    pending_.erase({connection, op});
  }
  void MessageIssued(const std::string& connection, uint64_t message, uint64_t op) override {
    MutexLock l(&mu_);
    events_.push_back(absl::StrCat("message ", connection, " #", message, " op ", op));
    message_op_[{connection, message}] = op;
  }
  bool MessageDelivered(const std::string& connection, uint64_t message) override {
    MutexLock l(&mu_);
    int missing = 0;
    const uint64_t before = message_op_[{connection, message}];
    for (const auto& [key, w] : pending_) {
      if (key.first == connection && key.second < before &&
          std::memcmp(reinterpret_cast<const void*>(w.first), w.second.data(), w.second.size()) !=
              0) {
        ++missing;
      }
    }
    events_.push_back(absl::StrCat("delivered ", connection, " #", message, " missing ", missing));
    return missing == 0;
  }
  std::vector<std::string> events() {
    MutexLock l(&mu_);
    return events_;
  }

 private:
  Mutex mu_;
  std::vector<std::string> events_ ABSL_GUARDED_BY(mu_);
  using Key = std::pair<std::string, uint64_t>;  // (connection, op or message number)
  std::map<Key, std::pair<uint64_t, std::string>> pending_ ABSL_GUARDED_BY(mu_);  // addr, bytes
  std::map<Key, uint64_t> message_op_ ABSL_GUARDED_BY(mu_);
};

// The fixture's engines report to a RecordingChecks.
class EngineChecksTest : public EngineTest {
 protected:
  void SetUp() override {
    checks_ = &recording_;
    EngineTest::SetUp();
  }
  // This connection's events of `kind` ("write", "message", ...), its name replaced by "c".
  std::vector<std::string> Events(const std::string& kind) {
    const rnic::QpAttributes& qp = ca_->local_info().qp;
    const std::string name = absl::StrCat(" ", qp.address, "/", qp.qp_num, " ");
    std::vector<std::string> out;
    for (std::string e : recording_.events()) {
      const size_t at = e.find(name);
      if (e.rfind(kind + " ", 0) != 0 || at == std::string::npos) continue;
      out.push_back(e.replace(at, name.size(), " c "));
    }
    return out;
  }
  RecordingChecks recording_;  // outlives the engines (TearDown)
};

TEST_P(EngineChecksTest, EveryWriteAndMessageIsReportedUnderOneConnectionName) {
  for (Path path : {Path::kUnload, Path::kOffload}) {
    SCOPED_TRACE(PathName(path));
    Connect(Only(path));
    std::atomic<int> delivered{0};
    cb_->SetMessageHandler([&](absl::Span<const char>) { ++delivered; });
    // Write, write, message, write, message (ops 0..4), and a signaled message (op 5), whose
    // completion retires every write before it.
    for (int i = 0; i < 3; ++i) {
      const uint64_t off = uint64_t(i) * 4096;
      std::memset(&src_[off], 'a' + i + (path == Path::kOffload ? 10 : 0), 64);
      ASSERT_TRUE(ca_->Write(src_mr_->Sge(off, 64), Dst(off), dst_mr_->rkey(), nullptr).ok());
      if (i >= 1) ASSERT_TRUE(ca_->Send(absl::MakeConstSpan("m", 1), nullptr).ok());
    }
    std::atomic<bool> sent{false};
    ASSERT_TRUE(ca_->Send(absl::MakeConstSpan("m", 1), [&](rnic::WcStatus) { sent = true; }).ok());
    ASSERT_TRUE(
        h_->WaitUntil([&] { return delivered.load() == 3 && sent.load(); }, absl::Seconds(10)));
    EXPECT_EQ(Events("write"),
              (std::vector<std::string>{"write c op 0", "write c op 1", "write c op 3"}));
    EXPECT_EQ(Events("message"), (std::vector<std::string>{"message c #0 op 2", "message c #1 op 4",
                                                           "message c #2 op 5"}));
    EXPECT_EQ(Events("finished"),
              (std::vector<std::string>{"finished c op 0", "finished c op 1", "finished c op 3"}));
    // The receiving end names the sender's connection, and the writes issued before each
    // message were in place when it reached the handler.
    EXPECT_EQ(Events("delivered"),
              (std::vector<std::string>{"delivered c #0 missing 0", "delivered c #1 missing 0",
                                        "delivered c #2 missing 0"}));
  }
}

TEST_P(EngineTest, RefusedWritesFailTheSameWayOnBothPathsAndWriteNothing) {
  std::vector<char> ro(1 << 20, 0);
  auto ro_mr =
      std::move(*eb_->RegisterMemory(ro.data(), ro.size(), rnic::kLocalWrite | rnic::kRemoteRead));
  struct Case {
    const char* name;
    uint32_t rkey;
    uint64_t addr;
  } cases[] = {
      {"unknown rkey", dst_mr_->rkey() ^ 0x1234, Dst(0)},
      {"no remote write", ro_mr->rkey(), ro_mr->address()},
      {"past the end", dst_mr_->rkey(), Dst(kBytes - 16)},
  };
  constexpr size_t kSecond = 1 << 20;  // where the write after the refused one goes
  for (Path path : {Path::kOffload, Path::kUnload}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(absl::StrCat(PathName(path), ": ", c.name));
      Connect(Only(path));
      std::vector<char> dst_before = dst_, ro_before = ro;
      std::atomic<int> done{0};
      WriteResult first, second;
      std::memset(src_.data(), 'Z', 64);
      ASSERT_TRUE(ca_->Write(src_mr_->Sge(0, 64), c.addr, c.rkey,
                             [&](const WriteResult& r) {
                               first = r;
                               ++done;
                             })
                      .ok());
      absl::Status st =
          ca_->Write(src_mr_->Sge(0, 64), Dst(kSecond), dst_mr_->rkey(), [&](const WriteResult& r) {
            second = r;
            ++done;
          });
      int expected = st.ok() ? 2 : 1;
      ASSERT_TRUE(h_->WaitUntil([&] { return done.load() == expected; }, absl::Seconds(10)));
      EXPECT_EQ(first.status, rnic::WcStatus::kRemoteAccessError);
      if (st.ok()) {
        EXPECT_EQ(second.status, rnic::WcStatus::kFlushed) << "later work must not succeed";
      }
      ASSERT_TRUE(h_->WaitUntil([&] { return ca_->failed(); }, absl::Seconds(10)));
      EXPECT_FALSE(ca_->Write(src_mr_->Sge(0, 8), Dst(0), dst_mr_->rkey(), nullptr).ok());
      // The refused write wrote nothing. The later one reported kFlushed; with one lane it took
      // the refused write's QP and wrote nothing either, with several it may have been placed
      // by another lane first (as an offloaded write may be: engine.h, rule 3).
      if (lanes() > 1)
        std::copy(dst_.begin() + kSecond, dst_.begin() + kSecond + 64,
                  dst_before.begin() + kSecond);
      EXPECT_TRUE(dst_ == dst_before && ro == ro_before) << "a refused write changed memory";
    }
  }
  EXPECT_GT(metrics_.validation_failures[static_cast<int>(ValidationFailure::kUnknownKey)], 0u);
  EXPECT_GT(metrics_.validation_failures[static_cast<int>(ValidationFailure::kNoPermission)], 0u);
  EXPECT_GT(metrics_.validation_failures[static_cast<int>(ValidationFailure::kOutOfBounds)], 0u);
}

TEST_P(EngineTest, FullRingWaitsAndNeverOverflows) {
  Connect(Only(Path::kUnload));
  constexpr int kWrites = 500;  // far more than the 8 staging slots
  EXPECT_EQ(WriteBlocksAndWait(kWrites, 512, Dst(0), dst_mr_->rkey()), kWrites);
  const uint32_t slots = 8 * lanes();
  EXPECT_LE(metrics_.ring_used_max.load(), slots);
  EXPECT_EQ(metrics_.ring_used_max.load(), slots) << "the ring was never full: test too weak";
  EXPECT_EQ(std::memcmp(src_.data(), dst_.data(), kWrites * 512), 0);
}

TEST_P(EngineTest, FullRingFallsBackToOffloadWhenThePolicySaysSo) {
  Connect(std::make_unique<AdaptivePolicy>());
  constexpr int kWrites = 2000;
  std::atomic<int> done{0}, ok{0};
  for (int i = 0; i < kWrites; ++i) {
    size_t off = (i * 7919 % 2000) * 4096;
    ASSERT_TRUE(ca_->Write(src_mr_->Sge(off, 64), Dst(off), dst_mr_->rkey(),
                           [&](const WriteResult& r) {
                             ok += r.ok();
                             ++done;
                           })
                    .ok());
  }
  ASSERT_TRUE(h_->WaitUntil([&] { return done.load() == kWrites; }, absl::Seconds(20)));
  EXPECT_EQ(ok.load(), kWrites);
  EXPECT_LE(metrics_.ring_used_max.load(), 8u * lanes());
}

TEST_P(EngineTest, MessagesFlowBothWaysWithoutStalling) {
  // Each side sends messages and acks; send-queue accounting must count both (a miscount once
  // made every send after the first ack look like a full queue).
  Connect(Only(Path::kOffload));
  std::atomic<int> at_b{0}, at_a{0};
  cb_->SetMessageHandler([&](absl::Span<const char> m) {
    ++at_b;
    ASSERT_TRUE(cb_->Send(m, nullptr).ok());  // echo back from inside the handler
  });
  ca_->SetMessageHandler([&](absl::Span<const char>) { ++at_a; });
  constexpr int kMessages = 300;
  for (int i = 0; i < kMessages; ++i) {
    std::string m = absl::StrCat("ping ", i);
    ASSERT_TRUE(ca_->Send(m, nullptr).ok());
    if (i % 16 == 15) {
      ASSERT_TRUE(h_->WaitUntil([&] { return at_a.load() == i + 1; }, absl::Seconds(10)))
          << "stalled after " << at_a.load() << " replies";
    }
  }
  ASSERT_TRUE(h_->WaitUntil([&] { return at_a.load() == kMessages; }, absl::Seconds(10)));
  EXPECT_EQ(at_b.load(), kMessages);
}

TEST_P(EngineTest, UnsignaledMessagesGiveTheirSlotsBackAndHoldNoCallbackBack) {
  // Messages without a callback go unsignaled; only a later signaled completion returns their
  // send slots. Many times the slot count must flow, with unloaded writes (finished by the
  // engine's ack, not a main-QP completion) between them whose callbacks must not wait.
  Connect(Only(Path::kUnload));
  std::atomic<int> delivered{0}, written{0}, bad{0};
  cb_->SetMessageHandler([&](absl::Span<const char>) { ++delivered; });
  constexpr int kRounds = 400;  // > 10x EngineOptions::message_slots
  for (int i = 0; i < kRounds; ++i) {
    std::string m = absl::StrCat("m", i);
    ASSERT_TRUE(ca_->Send(m, nullptr).ok());
    const size_t off = size_t(i) * 64;
    src_[off] = static_cast<char>(i);
    ASSERT_TRUE(ca_->Write(src_mr_->Sge(off, 64), Dst(off), dst_mr_->rkey(),
                           [&, off](const WriteResult& r) {
                             if (!r.ok() || dst_[off] != src_[off]) ++bad;
                             ++written;
                           })
                    .ok());
    // One at a time: a write's callback held behind a quiet message would stall here.
    ASSERT_TRUE(h_->WaitUntil([&] { return written.load() == i + 1; }, absl::Seconds(10)))
        << "write " << i << " never completed\n a: " << ca_->DebugState()
        << "\n b: " << cb_->DebugState();
  }
  ASSERT_TRUE(h_->WaitUntil([&] { return delivered.load() == kRounds; }, absl::Seconds(10)))
      << "delivered " << delivered.load();
  EXPECT_EQ(bad.load(), 0);
  // And a message with a callback still reports its completion.
  std::atomic<int> sent{0};
  ASSERT_TRUE(
      ca_->Send("last", [&](rnic::WcStatus s) { sent = s == rnic::WcStatus::kSuccess ? 1 : 2; })
          .ok());
  ASSERT_TRUE(h_->WaitUntil([&] { return sent.load() != 0; }, absl::Seconds(10)));
  EXPECT_EQ(sent.load(), 1);
  // (The handler counts on this frame: let it see the last message before the frame goes.)
  ASSERT_TRUE(h_->WaitUntil([&] { return delivered.load() == kRounds + 1; }, absl::Seconds(10)));
  // It was signaled, so it retired every quiet message before it.
  const Connection::QueueState q = ca_->queue_state();
  EXPECT_EQ(q.free_message_slots, SendReserve(EngineOptions()));
  EXPECT_EQ(q.lent_message_slots, 0u);
  EXPECT_EQ(q.outstanding_send_wrs, 0u);
}

TEST_P(EngineTest, LazyWritesCompleteWhenTheAnswerToALaterMessageArrives) {
  // The KV pattern: a lazy value write, a request behind it, an answer. Most lazy writes go
  // unsignaled and complete through the answer's acknowledgment; every few stay signaled.
  Connect(Only(Path::kOffload));
  std::atomic<int> answers{0}, written{0}, bad{0};
  cb_->SetMessageHandler(
      [&](absl::Span<const char> m) { ASSERT_TRUE(cb_->Send(m, nullptr).ok()); });
  ca_->SetMessageHandler([&](absl::Span<const char>) { ++answers; });
  WriteOptions lazy;
  lazy.lazy_completion = true;
  constexpr int kRounds = 200;
  for (int i = 0; i < kRounds; ++i) {
    const size_t off = size_t(i) * 128;
    for (int k = 0; k < 128; ++k) src_[off + k] = static_cast<char>(i + k);
    ASSERT_TRUE(ca_->Write(
                       src_mr_->Sge(off, 128), Dst(off), dst_mr_->rkey(),
                       [&, off](const WriteResult& r) {
                         if (!r.ok() || std::memcmp(&src_[off], &dst_[off], 128) != 0) ++bad;
                         ++written;
                       },
                       nullptr, lazy)
                    .ok());
    ASSERT_TRUE(ca_->Send("request", nullptr).ok());
    ASSERT_TRUE(h_->WaitUntil([&] { return answers.load() == i + 1 && written.load() == i + 1; },
                              absl::Seconds(10)))
        << "round " << i << ": " << answers.load() << " answers, " << written.load()
        << " writes completed";
  }
  EXPECT_EQ(bad.load(), 0) << "a lazy write's callback came before its bytes were visible";
  const uint64_t sampled = metrics_.latency_samples[static_cast<int>(Path::kOffload)].load();
  EXPECT_EQ(metrics_.writes[static_cast<int>(Path::kOffload)].load(), uint64_t{kRounds});
  EXPECT_GT(sampled, 0u) << "no lazy write stayed signaled: the policy would learn nothing";
  EXPECT_LT(sampled, uint64_t{kRounds} / 2) << "lazy writes were not posted unsignaled";
}

TEST_P(EngineTest, LazyWritesWhoseLatencyThePolicyAsksForAreAllObserved) {
  auto owned = std::make_unique<ObservingPolicy>();
  ObservingPolicy* policy = owned.get();
  Connect(std::move(owned));
  WriteOptions lazy;
  lazy.lazy_completion = true;
  constexpr int kWrites = 40;
  std::atomic<int> written{0}, bad{0};
  for (int i = 0; i < kWrites; ++i) {
    const size_t off = size_t(i) * 64;
    src_[off] = static_cast<char>('a' + i % 26);
    ASSERT_TRUE(ca_->Write(
                       src_mr_->Sge(off, 64), Dst(off), dst_mr_->rkey(),
                       [&](const WriteResult& r) {
                         if (!r.ok()) ++bad;
                         ++written;
                       },
                       nullptr, lazy)
                    .ok());
  }
  // Nothing else is sent: an unsignaled write would never complete.
  ASSERT_TRUE(h_->WaitUntil([&] { return written.load() == kWrites; }, absl::Seconds(10)))
      << written.load() << " of " << kWrites << " lazy writes completed";
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(metrics_.latency_samples[static_cast<int>(Path::kOffload)].load(), uint64_t{kWrites});
  EXPECT_EQ(policy->observed.load(), kWrites);
  EXPECT_EQ(policy->unobserved.load(), 0);
}

// A write that cannot be posted when submitted (the send queue is full) is decided when its
// turn comes, after earlier writes completed: a backlogged connection's policy decides with
// what it learned meanwhile, and is told the write waited.
TEST_P(EngineTest, AWriteIsDecidedWhenItMayBePostedNotWhenSubmitted) {
  auto owned = std::make_unique<DecisionTimingPolicy>();
  DecisionTimingPolicy* policy = owned.get();
  Connect(std::move(owned));
  constexpr int kWrites = 2000;  // far more than the send queue holds
  std::atomic<int> written{0}, bad{0};
  {
    // Nothing reaches the NIC before the batch ends, so the send queue fills and stays full.
    Connection::Batch batch = ca_->BeginBatch();
    for (int i = 0; i < kWrites; ++i) {
      ASSERT_TRUE(ca_->Write(src_mr_->Sge(size_t(i) * 64, 64), Dst(size_t(i) * 64), dst_mr_->rkey(),
                             [&](const WriteResult& r) {
                               if (!r.ok()) ++bad;
                               ++written;
                             })
                      .ok());
    }
  }
  ASSERT_TRUE(h_->WaitUntil([&] { return written.load() == kWrites; }, absl::Seconds(20)))
      << written.load() << " of " << kWrites << " writes completed";
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(policy->observed, kWrites);
  EXPECT_GT(policy->waited, 0) << "no write waited for the send queue";
  EXPECT_LT(policy->waited, kWrites) << "the first writes went at once";
  // Exactly the writes that waited were decided after something completed.
  EXPECT_EQ(policy->decided_after_a_completion, policy->waited);
}

TEST_P(EngineTest, ALazyWriteWithNothingAnsweredCompletesWithTheNextSignaledOne) {
  Connect(Only(Path::kOffload));
  WriteOptions lazy;
  lazy.lazy_completion = true;
  std::vector<int> order;
  Mutex mu;
  auto record = [&](int id) {
    return [&, id](const WriteResult& r) {
      MutexLock l(&mu);
      order.push_back(r.ok() ? id : -id);
    };
  };
  src_[0] = 'a';
  src_[64] = 'b';
  ASSERT_TRUE(
      ca_->Write(src_mr_->Sge(0, 64), Dst(0), dst_mr_->rkey(), record(1), nullptr, lazy).ok());
  ASSERT_TRUE(ca_->Write(src_mr_->Sge(64, 64), Dst(64), dst_mr_->rkey(), record(2)).ok());
  ASSERT_TRUE(h_->WaitUntil(
      [&] {
        MutexLock l(&mu);
        return order.size() == 2;
      },
      absl::Seconds(10)));
  MutexLock l(&mu);
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_EQ(dst_[0], 'a');
  EXPECT_EQ(dst_[64], 'b');
}

TEST_P(EngineTest, ABatchPostsNothingUntilItEndsAndKeepsPostOrder) {
  for (Path path : {Path::kOffload, Path::kUnload}) {
    SCOPED_TRACE(PathName(path));
    Connect(Only(path));
    std::atomic<int> delivered{0}, stale{0}, written{0};
    cb_->SetMessageHandler([&](absl::Span<const char> m) {
      if (m.size() != 1 || dst_[4096] != m[0]) ++stale;
      ++delivered;
    });
    src_[4096] = path == Path::kOffload ? 'o' : 'u';
    {
      Connection::Batch batch = ca_->BeginBatch();
      ASSERT_TRUE(ca_->Write(src_mr_->Sge(4096, 1), Dst(4096), dst_mr_->rkey(),
                             [&](const WriteResult& r) { written = r.ok() ? 1 : 2; })
                      .ok());
      ASSERT_TRUE(ca_->Send(absl::MakeConstSpan(&src_[4096], 1), nullptr).ok());
      if (path == Path::kOffload) {
        // Unloaded writes use the staging QP, which a batch does not hold back.
        absl::SleepFor(absl::Milliseconds(20));
        EXPECT_FALSE(h_->WaitUntil([&] { return delivered.load() > 0; }, absl::Milliseconds(20)))
            << "the message went out before the batch ended";
      }
    }
    ASSERT_TRUE(h_->WaitUntil([&] { return delivered.load() == 1 && written.load() != 0; },
                              absl::Seconds(10)));
    EXPECT_EQ(written.load(), 1);
    EXPECT_EQ(stale.load(), 0) << "the message overtook the write before it";
  }
}

// A peer speaking the engine protocol badly: raw QPs on device a() connected to an engine
// connection on b().
class RawPeer {
 public:
  // With `take_acks`, the staging QPs have receives posted for the engine's acks (which return
  // message credits), and the main QP four for the messages its four credits allow; otherwise
  // those wait forever.
  RawPeer(rnic::Device& dev, Connection& engine_side, int lanes, bool take_acks = false)
      : lanes_(lanes) {
    cq_ = std::move(*dev.CreateCompletionQueue(256));
    rnic::QpConfig cfg;
    cfg.send_cq = cq_.get();
    cfg.recv_cq = cq_.get();
    // Like an engine's QPs: what the engine sends beyond the receives posted here waits (RNR)
    // instead of failing the connection after a second, which a slow run (TSan) can reach
    // before the test has seen what it checks.
    cfg.rnr_timeout = absl::InfiniteDuration();
    qp_ = std::move(*dev.CreateQueuePair(cfg));
    for (int k = 0; k < lanes; ++k) stages_.push_back(std::move(*dev.CreateQueuePair(cfg)));
    buf_.assign(kSendArea + kSendSlots * kSendSlotBytes, 0);
    mr_ = std::move(
        *dev.RegisterMemory(buf_.data(), buf_.size(), rnic::kLocalWrite | rnic::kRemoteWrite));
    ConnectionInfo mine;
    mine.qp = qp_->local_attributes();
    for (const auto& s : stages_) mine.staging.push_back({s->qp_num(), s->local_attributes().psn});
    mine.staging_slots = 4;
    mine.staging_credits = 2;
    mine.slot_bytes = 4096;
    mine.message_slots = 4;
    mine.message_credits = 4;
    mine.max_message_bytes = 4096;
    for (int r = 0; take_acks && r < 4; ++r) {
      EXPECT_TRUE(
          qp_->PostRecv(rnic::MakeRecv(kMessageRecvId + r, mr_->Sge(MessageOffset(r), 5120))).ok());
    }
    for (size_t k = 0; take_acks && k < stages_.size(); ++k) {
      for (int r = 0; r < kAckRecvs; ++r) PostAckRecv(k * kAckRecvs + r);
    }
    EXPECT_TRUE(engine_side.Connect(mine).ok());
    const ConnectionInfo& theirs = engine_side.local_info();
    credits_ = theirs.message_credits;
    EXPECT_TRUE(qp_->Connect(theirs.qp).ok());
    EXPECT_EQ(theirs.staging.size(), stages_.size());
    for (size_t k = 0; k < stages_.size() && k < theirs.staging.size(); ++k) {
      rnic::QpAttributes stage = theirs.qp;
      stage.qp_num = theirs.staging[k].qp_num;
      stage.psn = theirs.staging[k].psn;
      EXPECT_TRUE(stages_[k]->Connect(stage).ok());
    }
  }
  uint32_t header_bytes() const { return MessageHeaderBytes(lanes_); }
  // Message credits the engine has granted and Send has not used yet, as of the last
  // PollCredits. Send does not check them: a test may send beyond them on purpose.
  int64_t credits() const { return credits_; }
  // Takes what arrived: message credits returned by acks (whose receives are posted again)
  // and by the engine's messages (whose receives are not: the peer takes no more than four).
  void PollCredits() {
    rnic::WorkCompletion wc[16];
    for (int n; (n = cq_->Poll(absl::MakeSpan(wc))) > 0;) {
      for (int i = 0; i < n; ++i) {
        const rnic::WorkCompletion& c = wc[i];
        if (c.status != rnic::WcStatus::kSuccess) continue;
        uint32_t returned = 0;
        if (c.wr_id >= kAckRecvId) {
          const size_t index = c.wr_id - kAckRecvId;
          std::memcpy(&returned, buf_.data() + AckOffset(index) + 20, 4);
          PostAckRecv(index);
        } else if (c.wr_id >= kMessageRecvId) {
          std::memcpy(&returned, buf_.data() + MessageOffset(c.wr_id - kMessageRecvId) + 8, 4);
        }
        credits_ += returned;
      }
    }
  }
  // Sends a message with the given engine header fields (no unloaded writes before it) and
  // payload; `length` counts header and payload bytes sent (at most kSendSlotBytes). Each of
  // the first kSendSlots messages has a buffer of its own: the NIC may still be reading an
  // earlier one.
  void Send(uint64_t seen, uint32_t credits, const std::string& payload, uint32_t length) {
    ASSERT_LT(sends_, kSendSlots);
    ASSERT_LE(length, kSendSlotBytes);
    const size_t off = kSendArea + size_t(sends_++) * kSendSlotBytes;
    char* p = buf_.data() + off;
    std::memcpy(p, &seen, 8);
    std::memcpy(p + 8, &credits, 4);
    std::memset(p + 12, 0, header_bytes() - 12);
    std::memcpy(p + header_bytes(), payload.data(), payload.size());
    rnic::SendWorkRequest wr = rnic::MakeSendWithImm(1, mr_->Sge(off, length), kImmMessage);
    EXPECT_TRUE(qp_->PostSend(wr).ok());
    --credits_;
  }
  // Sends a staged write on lane `lane`: its header (sequence `seq`, destination) and payload.
  void SendStaged(int lane, uint64_t seq, uint64_t remote_addr, uint32_t rkey,
                  const std::string& payload) {
    ASSERT_LT(sends_, kSendSlots);
    ASSERT_LE(kStagingHeaderSize + payload.size(), kSendSlotBytes);
    const size_t off = kSendArea + size_t(sends_++) * kSendSlotBytes;
    char* p = buf_.data() + off;
    EncodeStagingHeader({static_cast<uint32_t>(payload.size()), seq, remote_addr, rkey}, p);
    std::memcpy(p + kStagingHeaderSize, payload.data(), payload.size());
    rnic::SendWorkRequest wr =
        rnic::MakeSendWithImm(3, mr_->Sge(off, kStagingHeaderSize + payload.size()), kImmStaged);
    EXPECT_TRUE(stages_[lane]->PostSend(wr).ok());
  }
  // Sends an ack on staging lane `lane`: staged writes applied, staging credit limit, status,
  // message credits returned.
  void SendAck(int lane, uint64_t applied, uint64_t limit, uint32_t status, uint32_t credits) {
    char* p = buf_.data() + 12288;
    std::memcpy(p, &applied, 8);
    std::memcpy(p + 8, &limit, 8);
    std::memcpy(p + 16, &status, 4);
    std::memcpy(p + 20, &credits, 4);
    rnic::SendWorkRequest wr = rnic::MakeSendWithImm(2, mr_->Sge(12288, kAckBytes), kImmAck);
    EXPECT_TRUE(stages_[lane]->PostSend(wr).ok());
  }

 private:
  static constexpr size_t kSendArea = 1 << 16;  // below: ack payloads and receive buffers
  static constexpr int kSendSlots = 256;
  static constexpr uint32_t kSendSlotBytes = 256;
  static constexpr int kAckRecvs = 64;  // per lane
  static constexpr uint64_t kMessageRecvId = 200;
  static constexpr uint64_t kAckRecvId = 1000;  // + lane * kAckRecvs + index
  static size_t MessageOffset(size_t r) { return 40960 + r * 5120; }
  static size_t AckOffset(size_t index) { return 32768 + index * kAckBytes; }
  void PostAckRecv(size_t index) {
    EXPECT_TRUE(
        stages_[index / kAckRecvs]
            ->PostRecv(rnic::MakeRecv(kAckRecvId + index, mr_->Sge(AckOffset(index), kAckBytes)))
            .ok());
  }
  int lanes_;
  int sends_ = 0;
  int64_t credits_ = 0;
  std::unique_ptr<rnic::CompletionQueue> cq_;
  std::unique_ptr<rnic::QueuePair> qp_;
  std::vector<std::unique_ptr<rnic::QueuePair>> stages_;
  std::vector<char> buf_;
  std::unique_ptr<rnic::MemoryRegion> mr_;
};

TEST_P(EngineTest, ForgedMessageHeadersFailTheConnectionAndDeliverNothing) {
  struct Case {
    const char* name;
    uint64_t seen;
    uint32_t credits;
    uint32_t length;  // bytes sent: header + payload
    bool fails;
  };
  const uint32_t header = MessageHeaderBytes(lanes());
  const Case cases[] = {
      {"well formed", 0, 0, header + 5, false},
      {"acknowledges messages never sent", 3, 0, header + 5, true},
      {"returns credits never taken", 0, 1000, header + 5, true},
      {"shorter than the header", 0, 0, header - 1, true},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    cb_ = std::move(*eb_->CreateConnection(Only(Path::kOffload)));
    std::atomic<int> delivered{0};
    cb_->SetMessageHandler([&](absl::Span<const char> m) {
      if (std::string(m.data(), m.size()) == "hello") ++delivered;
    });
    RawPeer peer(h_->a(), *cb_, lanes());
    peer.Send(k.seen, k.credits, "hello", k.length);
    if (k.fails) {
      ASSERT_TRUE(h_->WaitUntil([&] { return cb_->failed(); }, absl::Seconds(10)));
      EXPECT_EQ(delivered.load(), 0);
    } else {
      ASSERT_TRUE(h_->WaitUntil([&] { return delivered.load() == 1; }, absl::Seconds(10)));
      EXPECT_FALSE(cb_->failed());
    }
    cb_->SetMessageHandler(nullptr);
    cb_.reset();
  }
}

// The peer's ring may be larger than this engine's: every slot of it gets its own outgoing
// header (a header buffer sized by the local ring once overflowed under ASan).
TEST_P(EngineTest, UnloadsIntoAPeerRingLargerThanItsOwn) {
  EngineOptions big;
  big.staging_slots = 64;
  big.staging_lanes = lanes();
  big.unload_workers = lanes();
  std::unique_ptr<Engine> eb_big = std::move(*Engine::Create(&h_->c(), big));
  auto dst_mr = std::move(
      *eb_big->RegisterMemory(dst_.data(), kBytes, rnic::kLocalWrite | rnic::kRemoteWrite));
  h_->Start(*ea_, *eb_big);
  ca_ = std::move(*ea_->CreateConnection(Only(Path::kUnload)));
  auto cb = std::move(*eb_big->CreateConnection(Only(Path::kOffload)));
  ASSERT_TRUE(ca_->Connect(cb->local_info()).ok());
  ASSERT_TRUE(cb->Connect(ca_->local_info()).ok());
  constexpr int kWrites = 400;
  EXPECT_EQ(WriteBlocksAndWait(kWrites, 256, dst_mr->address(), dst_mr->rkey()), kWrites);
  EXPECT_EQ(std::memcmp(src_.data(), dst_.data(), kWrites * 256), 0);
  EXPECT_GT(metrics_.ring_used_max.load(), 8u * lanes()) << "never beyond the local ring size";
  ca_.reset();
  cb.reset();
}

TEST_P(EngineTest, ForgedAcksFailTheConnection) {
  struct Case {
    const char* name;
    uint64_t applied, limit;
    uint32_t credits;
    bool fails;
  };
  // The engine side starts with the raw peer's 2 staging credits, of its staging_slots 4.
  const Case cases[] = {
      {"well formed", 0, 2, 0, false},
      {"grants more credits", 0, 4, 0, false},
      {"acknowledges staged writes never posted", 5, 6, 0, true},
      {"returns credits never taken", 0, 2, 1000, true},
      {"takes staging credits back", 0, 1, 0, true},
      {"grants more than its staging_slots", 0, 5, 0, true},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    cb_ = std::move(*eb_->CreateConnection(Only(Path::kOffload)));
    std::atomic<int> delivered{0};
    cb_->SetMessageHandler([&](absl::Span<const char>) { ++delivered; });
    RawPeer peer(h_->a(), *cb_, lanes());
    peer.SendAck(lanes() - 1, k.applied, k.limit, 0, k.credits);
    if (k.fails) {
      ASSERT_TRUE(h_->WaitUntil([&] { return cb_->failed(); }, absl::Seconds(10)));
    } else {
      // A message sent after the ack arrives (the QPs are independent, so give the ack time).
      peer.Send(0, 0, "hello", MessageHeaderBytes(lanes()) + 5);
      ASSERT_TRUE(h_->WaitUntil([&] { return delivered.load() == 1; }, absl::Seconds(10)));
      h_->WaitUntil([] { return false; }, absl::Milliseconds(50));
      EXPECT_FALSE(cb_->failed());
    }
    cb_->SetMessageHandler(nullptr);
    cb_.reset();
  }
}

// Message receive buffers come from one pool per worker: many connections exchanging messages
// touch a few buffers each (their credits), not message_slots each, and give everything back
// when they close.
TEST_P(EngineTest, ManyConnectionsShareTheWorkersMessageBuffers) {
  constexpr int kConns = 40, kMessages = 24;
  struct Pair {
    std::unique_ptr<Connection> a, b;
    std::atomic<int> delivered{0}, out_of_order{0};
  };
  std::vector<std::unique_ptr<Pair>> pairs;
  for (int i = 0; i < kConns; ++i) {
    auto p = std::make_unique<Pair>();
    p->a = std::move(*ea_->CreateConnection(Only(Path::kOffload)));
    p->b = std::move(*eb_->CreateConnection(Only(Path::kOffload)));
    ASSERT_TRUE(p->a->Connect(p->b->local_info()).ok());
    ASSERT_TRUE(p->b->Connect(p->a->local_info()).ok());
    Pair* raw = p.get();
    p->b->SetMessageHandler([raw](absl::Span<const char> m) {
      if (std::string(m.data(), m.size()) != absl::StrCat(raw->delivered.load())) {
        ++raw->out_of_order;
      }
      ++raw->delivered;
    });
    pairs.push_back(std::move(p));
  }
  EXPECT_EQ(eb_->pooled_buffers().connections, static_cast<uint32_t>(kConns));
  // Every connection sends in bursts of 4, all connections at once.
  for (int m = 0; m < kMessages; m += 4) {
    for (auto& p : pairs) {
      for (int k = m; k < m + 4; ++k) ASSERT_TRUE(p->a->Send(absl::StrCat(k), nullptr).ok());
    }
    ASSERT_TRUE(h_->WaitUntil(
        [&] {
          for (auto& p : pairs) {
            if (p->delivered.load() < m + 4) return false;
          }
          return true;
        },
        absl::Seconds(20)));
  }
  for (auto& p : pairs) {
    EXPECT_EQ(p->delivered.load(), kMessages);
    EXPECT_EQ(p->out_of_order.load(), 0);
    EXPECT_FALSE(p->b->failed());
  }
  const EngineOptions o;
  const Engine::PooledBuffers used = eb_->pooled_buffers();
  EXPECT_LE(used.touched, kConns * o.min_message_credits + o.shared_message_buffers * lanes());
  EXPECT_LT(used.touched, kConns * o.message_slots / 4) << "buffers per connection, not pooled";
  EXPECT_LE(used.lent, o.shared_message_buffers * lanes());
  // Sized for max_connections_per_worker, the pools register only the chunks they used.
  EXPECT_LE(used.registered, used.touched + LazyRegion::kChunkItems * lanes());
  EXPECT_LT(used.registered, used.capacity);
  const Engine::PooledBuffers sent = ea_->pooled_buffers();
  EXPECT_GE(sent.send_slots_touched, kConns * SendReserve(o));
  EXPECT_LE(sent.send_slots_registered,
            sent.send_slots_touched + LazyRegion::kChunkItems * lanes());
  EXPECT_LT(sent.send_slots_registered, sent.send_slots_capacity);
  for (auto& p : pairs) p->b->SetMessageHandler(nullptr);
  pairs.clear();
  // A worker may hold a closed connection's state until its current batch ends.
  ASSERT_TRUE(h_->WaitUntil(
      [&] {
        return ea_->pooled_buffers().connections == 0 && eb_->pooled_buffers().connections == 0;
      },
      absl::Seconds(10)));
  EXPECT_EQ(eb_->pooled_buffers().lent, 0u) << "closed connections kept borrowed buffers";
  EXPECT_EQ(ea_->pooled_buffers().send_slots_lent, 0u);
}

// Staged writes of every connection a worker serves land in its one staging pool: many
// connections unloading at once touch their reserves and the shared buffers, not a ring
// each, every write is visible when its callback says so, and everything comes back on close.
TEST_P(EngineTest, ManyConnectionsShareTheWorkersStagingPool) {
  constexpr int kConns = 80, kWrites = 16;
  constexpr uint32_t kBytes = 512;
  struct Pair {
    std::unique_ptr<Connection> a, b;
  };
  std::vector<Pair> pairs(kConns);
  for (Pair& p : pairs) {
    p.a = std::move(*ea_->CreateConnection(Only(Path::kUnload)));
    p.b = std::move(*eb_->CreateConnection(Only(Path::kOffload)));
    ASSERT_TRUE(p.a->Connect(p.b->local_info()).ok());
    ASSERT_TRUE(p.b->Connect(p.a->local_info()).ok());
  }
  EXPECT_EQ(eb_->pooled_buffers().staging_lanes, static_cast<uint32_t>(kConns * lanes()));
  for (size_t i = 0; i < src_.size(); ++i) src_[i] = static_cast<char>(i * 13 + 5);
  std::atomic<int> done{0}, ok{0}, unloaded{0};
  // Every connection writes its own blocks, all connections at once.
  for (int w = 0; w < kWrites; ++w) {
    for (int i = 0; i < kConns; ++i) {
      const size_t off = (size_t(i) * kWrites + w) * kBytes;
      ASSERT_TRUE(pairs[i]
                      .a
                      ->Write(src_mr_->Sge(off, kBytes), Dst(off), dst_mr_->rkey(),
                              [&, off](const WriteResult& r) {
                                ok += r.ok() && std::memcmp(src_.data() + off, dst_.data() + off,
                                                            kBytes) == 0;
                                unloaded += r.path == Path::kUnload;
                                ++done;
                              })
                      .ok());
    }
  }
  ASSERT_TRUE(h_->WaitUntil([&] { return done.load() == kConns * kWrites; }, absl::Seconds(30)));
  EXPECT_EQ(ok.load(), kConns * kWrites) << "a callback came before its bytes were visible";
  EXPECT_EQ(unloaded.load(), kConns * kWrites);
  EngineOptions o;
  o.staging_slots = 8;  // as the fixture's
  const Engine::PooledBuffers used = eb_->pooled_buffers();
  const uint32_t reserves = kConns * lanes() * (o.min_staging_credits + 1);
  EXPECT_LE(used.staging_touched, reserves + o.shared_staging_buffers * lanes());
  EXPECT_LT(used.staging_touched, kConns * lanes() * o.staging_slots)
      << "as many staging buffers as a ring per connection: not pooled";
  EXPECT_LE(used.staging_registered, used.staging_touched + LazyRegion::kChunkItems * lanes());
  EXPECT_LT(used.staging_registered, used.staging_capacity);
  for (Pair& p : pairs) {
    EXPECT_FALSE(p.a->failed());
    EXPECT_FALSE(p.b->failed());
  }
  pairs.clear();
  ASSERT_TRUE(h_->WaitUntil(
      [&] {
        return ea_->pooled_buffers().staging_lanes == 0 && eb_->pooled_buffers().staging_lanes == 0;
      },
      absl::Seconds(10)));
  EXPECT_EQ(eb_->pooled_buffers().staging_lent, 0u) << "closed connections kept borrowed buffers";
  EXPECT_EQ(ea_->pooled_buffers().staging_lent, 0u) << "ack units not given back";
}

// A peer that sends staged writes beyond the staging credits it was granted (here: 200 at
// once on a window of min_staging_credits, which grows only with acks sent after each batch)
// fails its own
// connection at the first one, and nothing from it on is applied; another connection of the
// same worker goes on unloading.
TEST_P(EngineTest, APeerStagingBeyondItsCreditsFailsAloneAndOthersProceed) {
  Connect(Only(Path::kUnload));
  auto flooded = std::move(*eb_->CreateConnection(Only(Path::kOffload)));
  ASSERT_LT(flooded->local_info().staging_credits, 10u);
  constexpr int kFlood = 200;
  {
    RawPeer peer(h_->a(), *flooded, lanes(), /*take_acks=*/true);
    for (int seq = 0; seq < kFlood; ++seq) {
      peer.SendStaged(0, seq, Dst(seq * 64), dst_mr_->rkey(), std::string(64, 'S'));
    }
    ASSERT_TRUE(h_->WaitUntil([&] { return flooded->failed(); }, absl::Seconds(10)))
        << flooded->DebugState();
    // Applied in order: a prefix, the first one within the initial credit, none after it.
    int applied = 0;
    while (applied < kFlood && dst_[applied * 64] == 'S') ++applied;
    EXPECT_GE(applied, 1) << "the staged write within the credit was not applied";
    EXPECT_LT(applied, kFlood);
    for (int seq = applied; seq < kFlood; ++seq) {
      ASSERT_EQ(dst_[seq * 64], 0) << "staged write " << seq << " applied after a refusal";
    }
    EXPECT_GT(metrics_.validation_failures[static_cast<int>(ValidationFailure::kBadSequence)], 0u);
    flooded.reset();
  }
  constexpr int kWrites = 200;
  EXPECT_EQ(WriteBlocksAndWait(kWrites, 256, Dst(1 << 20), dst_mr_->rkey()), kWrites)
      << ca_->DebugState() << "\n"
      << cb_->DebugState();
  EXPECT_EQ(std::memcmp(src_.data(), dst_.data() + (1 << 20), kWrites * 256), 0);
  EXPECT_FALSE(cb_->failed());
}

// A connection whose peer keeps many messages in flight borrows credits from the pool beyond
// its reserve, and gives them back once its peer sends one at a time.
TEST_P(EngineTest, ABusyConnectionBorrowsCreditsAndGivesThemBack) {
  // Slots touched by connections before this one (SetUp's, on a device with several ports).
  const uint32_t touched_before = ea_->pooled_buffers().send_slots_touched;
  Connect(Only(Path::kOffload));
  std::atomic<int> delivered{0};
  std::atomic<uint32_t> lent_max{0}, send_lent_max{0};
  Engine* ea = ea_.get();
  Engine* eb = eb_.get();
  cb_->SetMessageHandler([&](absl::Span<const char>) {
    const uint32_t lent = eb->pooled_buffers().lent;
    if (lent > lent_max.load()) lent_max = lent;
    const uint32_t send_lent = ea->pooled_buffers().send_slots_lent;
    if (send_lent > send_lent_max.load()) send_lent_max = send_lent;
    ++delivered;
  });
  constexpr int kBurst = 400;
  for (int i = 0; i < kBurst; ++i) ASSERT_TRUE(ca_->Send("burst", nullptr).ok());
  ASSERT_TRUE(h_->WaitUntil([&] { return delivered.load() == kBurst; }, absl::Seconds(20)))
      << cb_->DebugState();
  const EngineOptions o;
  EXPECT_GT(lent_max.load(), 0u) << "a busy connection never got more than its reserve";
  EXPECT_LE(lent_max.load(), o.message_slots - o.min_message_credits);
  // Whether the sender borrowed send slots shows in its pool's high-water mark: a slot goes back
  // when the peer's NIC acknowledges the message, which may be before the peer's handler runs,
  // so the handler's sample may never see one lent.
  const Engine::PooledBuffers sender = ea_->pooled_buffers();
  ASSERT_EQ(sender.connections, 1u);
  EXPECT_GT(sender.send_slots_touched - touched_before, SendReserve(o))
      << "the sender never used more than its own send slots";
  EXPECT_LE(sender.send_slots_touched - touched_before, o.message_slots);
  EXPECT_LE(send_lent_max.load(), o.message_slots - SendReserve(o));
  // The level comes down by one per level's worth of messages: 32 + 31 + ... + 3 at most.
  constexpr int kTrickle = 600;
  for (int i = 0; i < kTrickle; ++i) {
    ASSERT_TRUE(ca_->Send("trickle", nullptr).ok());
    ASSERT_TRUE(
        h_->WaitUntil([&] { return delivered.load() == kBurst + i + 1; }, absl::Seconds(10)));
  }
  EXPECT_EQ(eb_->pooled_buffers().lent, 0u) << cb_->DebugState();
  EXPECT_EQ(ea_->pooled_buffers().send_slots_lent, 0u) << ca_->DebugState();
  EXPECT_FALSE(cb_->failed());
  cb_->SetMessageHandler(nullptr);
}

// A peer that sends messages it has no credits for fails its own connection; the buffers it
// took go back, and another connection of the same worker delivers all its messages.
TEST_P(EngineTest, APeerSendingBeyondItsCreditsFailsAloneAndOthersProceed) {
  Connect(Only(Path::kOffload));
  std::atomic<int> delivered{0};
  cb_->SetMessageHandler([&](absl::Span<const char>) { ++delivered; });
  auto flooded = std::move(*eb_->CreateConnection(Only(Path::kOffload)));
  {
    RawPeer peer(h_->a(), *flooded, lanes());
    for (int i = 0; i < 200; ++i) peer.Send(0, 0, "flood", peer.header_bytes() + 5);
    constexpr int kMessages = 100;
    for (int i = 0; i < kMessages; ++i) ASSERT_TRUE(ca_->Send("fair", nullptr).ok());
    ASSERT_TRUE(h_->WaitUntil([&] { return flooded->failed(); }, absl::Seconds(10)))
        << flooded->DebugState();
    ASSERT_TRUE(h_->WaitUntil([&] { return delivered.load() == kMessages; }, absl::Seconds(20)))
        << "delivered " << delivered.load() << "; " << cb_->DebugState();
    EXPECT_FALSE(cb_->failed());
    flooded.reset();
  }
  ASSERT_TRUE(
      h_->WaitUntil([&] { return eb_->pooled_buffers().connections == 1; }, absl::Seconds(10)))
      << "the flooded connection never left the pool";
  cb_->SetMessageHandler(nullptr);
}

// A peer that keeps sending requests but takes none of the answers: with
// throttle_when_backlogged (kvserver's setting) it gets no credits back once message_slots
// answers wait, and its next request fails its connection; without, every request gets in and
// the answers pile up.
TEST_P(EngineTest, APeerThatTakesNoAnswersIsThrottled) {
  for (bool throttle : {false, true}) {
    SCOPED_TRACE(throttle ? "throttled" : "not throttled");
    EngineOptions o;
    o.staging_slots = 8;
    o.staging_lanes = lanes();
    o.unload_workers = lanes();
    o.throttle_when_backlogged = throttle;
    // In place of the fixture's engine: two engines each with one worker on one caller-driven
    // soft device would wake each other only at kIdleWait (docs/engine.md, "Threads").
    eb_.reset();
    eb_ = std::move(*Engine::Create(&h_->b(), o));
    h_->Start(*ea_, *eb_);
    std::unique_ptr<Connection> cb = std::move(*eb_->CreateConnection(Only(Path::kOffload)));
    std::atomic<int> delivered{0};
    Connection* answering = cb.get();
    cb->SetMessageHandler([&delivered, answering](absl::Span<const char>) {
      ++delivered;
      (void)answering->Send(std::string(1000, 'a'), nullptr);
    });
    {
      RawPeer peer(h_->a(), *cb, lanes(), /*take_acks=*/true);
      constexpr int kRequests = 80;
      for (int sent = 0; sent < kRequests && !cb->failed(); ++sent) {
        // Unthrottled, the engine returns a credit for every request delivered, though maybe
        // not before the handler ran; throttled, the peer sends without one (and fails).
        ASSERT_TRUE(h_->WaitUntil(
            [&] {
              peer.PollCredits();
              return throttle || peer.credits() > 0 || cb->failed();
            },
            absl::Seconds(10)))
            << "no credit came back; " << cb->DebugState();
        peer.Send(0, 0, "q", peer.header_bytes() + 1);
        ASSERT_TRUE(h_->WaitUntil([&] { return delivered.load() == sent + 1 || cb->failed(); },
                                  absl::Seconds(10)))
            << cb->DebugState();
      }
      if (throttle) {
        EXPECT_TRUE(cb->failed()) << "delivered " << delivered.load();
        // 4 answers went out on the peer's credits, message_slots wait; the requests that
        // arrived meanwhile used credits handed out before the backlog.
        EXPECT_LE(delivered.load(), 4 + static_cast<int>(o.message_slots) + 8) << cb->DebugState();
      } else {
        EXPECT_FALSE(cb->failed()) << cb->DebugState();
        EXPECT_EQ(delivered.load(), kRequests);
      }
      cb->SetMessageHandler(nullptr);
      cb.reset();
    }
  }
}

// Two ends that both throttle (two kvservers: a replication link) each wait for the other's
// credits once message_slots of their messages queue: requests sent faster than answers come
// back then stalled for good (a state transfer of 20,000 records between simulated nodes). The
// side that opened the connection to send requests (Role::kRequests) does not throttle, and
// every request is answered.
TEST_P(EngineTest, ARequestingConnectionBetweenTwoThrottlingEnginesDoesNotStall) {
  EngineOptions o;
  o.staging_slots = 8;
  o.staging_lanes = lanes();
  o.unload_workers = lanes();
  o.throttle_when_backlogged = true;
  ea_.reset();
  eb_.reset();
  ea_ = std::move(*Engine::Create(&h_->a(), o));
  eb_ = std::move(*Engine::Create(&h_->b(), o));
  h_->Start(*ea_, *eb_);
  std::unique_ptr<Connection> requester =
      std::move(*ea_->CreateConnection(Only(Path::kOffload), Engine::Role::kRequests));
  std::unique_ptr<Connection> server = std::move(*eb_->CreateConnection(Only(Path::kOffload)));
  ASSERT_TRUE(requester->Connect(server->local_info()).ok());
  ASSERT_TRUE(server->Connect(requester->local_info()).ok());
  std::atomic<int> answered{0};
  Connection* answering = server.get();
  server->SetMessageHandler([answering](absl::Span<const char> request) {
    (void)answering->Send(std::string(request.data(), request.size()), nullptr);
  });
  requester->SetMessageHandler([&answered](absl::Span<const char>) { ++answered; });
  // Ten times message_slots, all sent at once (ReplicaLink keeps up to 256 in flight).
  const int requests = 10 * static_cast<int>(o.message_slots);
  for (int i = 0; i < requests; ++i) {
    ASSERT_TRUE(requester->Send(std::string(1000, 'q'), nullptr).ok()) << i;
  }
  EXPECT_TRUE(h_->WaitUntil([&] { return answered.load() == requests; }, absl::Seconds(20)))
      << "answered " << answered.load() << " of " << requests << "; " << requester->DebugState()
      << "; " << server->DebugState();
  EXPECT_FALSE(requester->failed());
  EXPECT_FALSE(server->failed());
  requester->SetMessageHandler(nullptr);
  server->SetMessageHandler(nullptr);
}

// A worker's CQ is sized for max_connections_per_worker connections flushing at once; one more
// connection is refused (it could overrun the CQ on a real NIC), and closing one makes room.
TEST_P(EngineTest, AWorkerServesAtMostItsConnectionBudget) {
  EngineOptions o;
  o.staging_lanes = lanes();
  o.unload_workers = lanes();
  o.max_connections_per_worker = 3;
  std::unique_ptr<Engine> e = std::move(*Engine::Create(&h_->a(), o));
  std::vector<std::unique_ptr<Connection>> conns;
  absl::StatusOr<std::unique_ptr<Connection>> c;
  while ((c = e->CreateConnection(Only(Path::kOffload))).ok()) conns.push_back(std::move(*c));
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted) << c.status();
  EXPECT_NE(c.status().message().find("max_connections_per_worker"), absl::string_view::npos);
  // Lanes spread connections over workers round-robin: each serves at most 3.
  EXPECT_GE(conns.size(), 3u);
  EXPECT_LE(conns.size(), 3u * lanes());
  conns.clear();
  EXPECT_TRUE(e->CreateConnection(Only(Path::kOffload)).ok());
  o.max_connections_per_worker = 0;
  EXPECT_EQ(Engine::Create(&h_->a(), o).status().code(), absl::StatusCode::kInvalidArgument);
  // More reserved message buffers than the device's shared receive queue holds.
  o.max_connections_per_worker = h_->a().limits().max_qp_wr;
  const absl::Status st = Engine::Create(&h_->a(), o).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("shared receive queue holds at most"), absl::string_view::npos) << st;
}

TEST_P(EngineTest, BadParametersAreRejectedWithClearErrors) {
  EngineOptions bad;
  bad.unload_workers = 0;
  EXPECT_EQ(Engine::Create(&h_->a(), bad).status().code(), absl::StatusCode::kInvalidArgument);
  Connect(Only(Path::kUnload));
  ConnectionInfo info = ca_->local_info();
  info.staging_slots = 0;
  auto extra = std::move(*ea_->CreateConnection(Only(Path::kUnload)));
  EXPECT_EQ(extra->Connect(info).code(), absl::StatusCode::kInvalidArgument);
  // A window larger than any engine has would size this side's header buffer (and, with it,
  // the worst case Engine::MaxConnectionBytes assumes); so would no message credits.
  info.staging_slots = kMaxStagingSlots + 1;
  EXPECT_EQ(extra->Connect(info).code(), absl::StatusCode::kInvalidArgument);
  info = ca_->local_info();
  info.staging_credits = 0;
  EXPECT_EQ(extra->Connect(info).code(), absl::StatusCode::kInvalidArgument);
  info.staging_credits = info.staging_slots + 1;
  EXPECT_EQ(extra->Connect(info).code(), absl::StatusCode::kInvalidArgument);
  info = ca_->local_info();
  info.message_credits = 0;
  EXPECT_EQ(extra->Connect(info).code(), absl::StatusCode::kInvalidArgument);
  info.message_credits = info.message_slots + 1;
  EXPECT_EQ(extra->Connect(info).code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<ConnectionInfo> round =
      DecodeConnectionInfo(EncodeConnectionInfo(ca_->local_info()));
  ASSERT_TRUE(round.ok()) << round.status();
  EXPECT_EQ(round->staging_credits, ca_->local_info().staging_credits);
  EXPECT_EQ(round->staging_slots, ca_->local_info().staging_slots);
  EXPECT_FALSE(DecodeConnectionInfo("transport=soft staging_slots=3").ok());
  // The translation-cache hint: optional, round-trips, one of two values, once.
  EXPECT_EQ(round->translation_cache, ca_->local_info().translation_cache);
  for (rnic::TranslationCacheState hint :
       {rnic::TranslationCacheState::kWarming, rnic::TranslationCacheState::kFull}) {
    info = ca_->local_info();
    info.translation_cache = hint;
    absl::StatusOr<ConnectionInfo> hinted = DecodeConnectionInfo(EncodeConnectionInfo(info));
    ASSERT_TRUE(hinted.ok()) << hinted.status();
    EXPECT_EQ(hinted->translation_cache, hint);
  }
  const std::string plain = EncodeConnectionInfo(ca_->local_info());
  for (const char* bad : {" translation_cache=empty", " translation_cache=",
                          " translation_cache=full translation_cache=full"}) {
    EXPECT_FALSE(DecodeConnectionInfo(plain + bad).ok()) << bad;
  }
  info = ca_->local_info();
  info.staging.push_back(info.staging.back());  // one lane more than this engine has
  auto lanes_differ = std::move(*ea_->CreateConnection(Only(Path::kUnload)));
  absl::Status st = lanes_differ->Connect(info);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("staging_lanes"), absl::string_view::npos) << st;
  for (int lanes : {0, 9}) {
    EngineOptions o;
    o.staging_lanes = lanes;
    EXPECT_EQ(Engine::Create(&h_->a(), o).status().code(), absl::StatusCode::kInvalidArgument);
  }
  std::string text = EncodeConnectionInfo(ca_->local_info());
  for (const char* staging : {"staging=", "staging=1:2,", "staging=1", "staging=1:2:3",
                              "staging=1:2,1:2,1:2,1:2,1:2,1:2,1:2,1:2,1:2"}) {
    std::string bad_text = text;
    size_t at = bad_text.find("staging="), end = bad_text.find(' ', at);
    bad_text.replace(at, end - at, staging);
    EXPECT_FALSE(DecodeConnectionInfo(bad_text).ok()) << bad_text;
  }
  EXPECT_FALSE(MakePolicy("sometimes").ok());
  std::vector<char> big(5000, 'x');
  EXPECT_EQ(ca_->Send(absl::MakeConstSpan(big), nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

// Starts `engine` and checks that its workers, once idle, sleep until an event instead of
// waking every millisecond, and that Stop wakes them at once. Context switches of the whole
// process over an idle stretch tell sleeping workers (a handful) from polling ones (one per
// millisecond); load only makes them fewer.
void ExpectIdleWorkersSleepUntilStop(Engine& engine) {
  engine.Start();
  absl::SleepFor(absl::Milliseconds(20));  // the workers go idle
  auto switches = [] {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_nvcsw + ru.ru_nivcsw;
  };
  const long before = switches();
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_LT(switches() - before, 30) << "an idle worker woke up about every millisecond";
  const absl::Time t0 = absl::Now();
  engine.Stop();
  EXPECT_LT(absl::Now() - t0, kIdleWait / 2) << "Stop waited for an idle wait to run out";
}

// An idle worker thread sleeps until an event instead of waking every millisecond, and Stop
// wakes it at once.
TEST(EngineIdleTest, AnIdleWorkerSleepsUntilStopWakesIt) {
  SetMinLogLevel(LogLevel::kError);
  std::unique_ptr<soft::SoftDevice> device = std::move(*soft::SoftDevice::Create({}));
  ASSERT_TRUE(device->interruptible());
  std::unique_ptr<Engine> engine = std::move(*Engine::Create(device.get(), EngineOptions{}));
  ExpectIdleWorkersSleepUntilStop(*engine);
}

// On a device with a port per worker, each worker's connections are on its own port (their
// QPs listen there), and every worker sleeps when idle as a lone worker does: nothing is
// shared between them to wake them every millisecond.
TEST(EnginePortsTest, EachWorkerOwnsAPortAndSleepsWhenIdle) {
  SetMinLogLevel(LogLevel::kError);
  soft::SoftDevice::Options so;
  so.ports = 2;
  std::unique_ptr<soft::SoftDevice> device = std::move(*soft::SoftDevice::Create(so));
  ASSERT_EQ(device->port_count(), 2);
  ASSERT_NE(device->port(1), nullptr);
  EXPECT_EQ(device->port(2), nullptr);
  const std::string port_address[2] = {device->address(),
                                       static_cast<soft::SoftDevice*>(device->port(1))->address()};
  EXPECT_NE(port_address[0], port_address[1]);
  EngineOptions o;
  o.unload_workers = 3;  // neither one per port nor the same number on each
  absl::Status st = Engine::Create(device.get(), o).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("multiple of the device's 2 ports"), absl::string_view::npos) << st;
  o.unload_workers = 2;
  std::unique_ptr<Engine> engine = std::move(*Engine::Create(device.get(), o));
  std::vector<std::unique_ptr<Connection>> conns;
  for (int i = 0; i < 4; ++i) {
    conns.push_back(std::move(*engine->CreateConnection(Only(Path::kOffload))));
    EXPECT_EQ(conns.back()->local_info().qp.address, port_address[i % 2]) << i;
  }
  ExpectIdleWorkersSleepUntilStop(*engine);
}

const auto kBackends = ::testing::Values(Setup{"soft", 1}, Setup{"sim", 1}, Setup{"soft", 2},
                                         Setup{"sim", 2}, Setup{"soft", 2, 2});
std::string BackendName(const ::testing::TestParamInfo<Setup>& info) {
  return absl::StrCat(info.param.backend, "_", info.param.lanes,
                      info.param.lanes == 1 ? "lane" : "lanes",
                      info.param.ports > 1 ? absl::StrCat("_", info.param.ports, "ports") : "");
}
INSTANTIATE_TEST_SUITE_P(Backends, EngineTest, kBackends, BackendName);
INSTANTIATE_TEST_SUITE_P(Backends, EngineChecksTest, kBackends, BackendName);

}  // namespace
}  // namespace unloadkv::engine
