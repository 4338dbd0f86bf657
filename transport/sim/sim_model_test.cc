// Behaviour of the simulated fabric itself: determinism and the translation-cache model.
#include <sys/mman.h>

#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "transport/rnic/wait.h"
#include "transport/sim/fabric.h"
#include "transport/sim/node.h"

namespace unloadkv::sim {
namespace {

struct Pair {
  std::unique_ptr<rnic::Device> a, b;
  std::unique_ptr<rnic::CompletionQueue> acq, bcq;
  std::unique_ptr<rnic::QueuePair> aqp, bqp;
};

Pair Connect(Fabric& f) {
  Pair p;
  p.a = f.CreateDevice();
  p.b = f.CreateDevice();
  p.acq = *p.a->CreateCompletionQueue(64);
  p.bcq = *p.b->CreateCompletionQueue(64);
  rnic::QpConfig ca{p.acq.get(), p.acq.get()}, cb{p.bcq.get(), p.bcq.get()};
  p.aqp = *p.a->CreateQueuePair(ca);
  p.bqp = *p.b->CreateQueuePair(cb);
  EXPECT_TRUE(p.aqp->Connect(p.bqp->local_attributes()).ok());
  EXPECT_TRUE(p.bqp->Connect(p.aqp->local_attributes()).ok());
  return p;
}

// Mean virtual round-trip of `n` 64-byte writes to random 4 KiB-aligned offsets of a region of
// `region_bytes`, one at a time.
double MeanWriteNs(uint64_t region_bytes, uint32_t extra_access, int n, uint64_t seed,
                   std::vector<int64_t>* times = nullptr, NodeStats* stats = nullptr) {
  Fabric f;
  Pair p = Connect(f);
  void* mem = mmap(nullptr, region_bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  std::vector<char> src(64, 'x');
  auto smr = *p.a->RegisterMemory(src.data(), src.size(), 0);
  auto dmr = *p.b->RegisterMemory(mem, region_bytes,
                                  rnic::kLocalWrite | rnic::kRemoteWrite | extra_access);
  std::mt19937_64 rng(seed);
  int64_t total = 0;
  for (int i = 0; i < n; ++i) {
    uint64_t off = (rng() % (region_bytes / 4096)) * 4096;
    int64_t t0 = f.now_ns();
    EXPECT_TRUE(
        p.aqp->PostSend(rnic::MakeWrite(i, smr->Sge(0, 64), dmr->address() + off, dmr->rkey()))
            .ok());
    auto wc = rnic::WaitForCompletion(*p.a, *p.acq, absl::Seconds(1));
    EXPECT_TRUE(wc.ok() && wc->status == rnic::WcStatus::kSuccess);
    total += f.now_ns() - t0;
    if (times) times->push_back(f.now_ns());
  }
  if (stats) *stats = StatsOf(*p.b);
  dmr.reset();
  munmap(mem, region_bytes);
  return static_cast<double>(total) / n;
}

TEST(SimModelTest, SameInputsGiveTheSameVirtualTimeline) {
  std::vector<int64_t> t1, t2;
  MeanWriteNs(64 << 20, 0, 500, 7, &t1);
  MeanWriteNs(64 << 20, 0, 500, 7, &t2);
  EXPECT_EQ(t1, t2);
}

TEST(SimModelTest, RandomWritesOverALargeRegionMissTheTranslationCacheAndRunSlower) {
  NodeStats small_stats, large_stats;
  double small = MeanWriteNs(4096, 0, 2000, 1, nullptr, &small_stats);
  double large = MeanWriteNs(uint64_t{4} << 30, 0, 2000, 1, nullptr, &large_stats);
  EXPECT_LE(small_stats.mtt_misses, 1u);
  EXPECT_GT(large_stats.mtt_misses, 1900u);
  EXPECT_GT(large, small * 1.3) << "small " << small << " ns, large " << large << " ns";
}

// The hint a target gives its peers (rnic::Device::translation_cache_state): warming until its
// modeled MTT cache holds as many translations as it can (4096 by default), full from then on.
TEST(SimModelTest, TheTranslationCacheReportsFullOnceItHoldsItsCapacity) {
  Fabric f;
  Pair p = Connect(f);
  const uint64_t pages = 5000, bytes = pages * 4096;
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  std::vector<char> src(64, 'x');
  auto smr = *p.a->RegisterMemory(src.data(), src.size(), 0);
  auto dmr = *p.b->RegisterMemory(mem, bytes, rnic::kLocalWrite | rnic::kRemoteWrite);
  EXPECT_EQ(p.b->translation_cache_state(), rnic::TranslationCacheState::kWarming);
  for (uint64_t page = 0; page < pages; ++page) {
    if (page == 4000) {
      EXPECT_EQ(p.b->translation_cache_state(), rnic::TranslationCacheState::kWarming);
    }
    ASSERT_TRUE(p.aqp
                    ->PostSend(rnic::MakeWrite(page, smr->Sge(0, 64), dmr->address() + page * 4096,
                                               dmr->rkey()))
                    .ok());
    auto wc = rnic::WaitForCompletion(*p.a, *p.acq, absl::Seconds(1));
    ASSERT_TRUE(wc.ok() && wc->status == rnic::WcStatus::kSuccess);
  }
  EXPECT_EQ(p.b->translation_cache_state(), rnic::TranslationCacheState::kFull);
  dmr.reset();
  munmap(mem, bytes);
}

TEST(SimModelTest, HugePageRegionsNeedFewTranslations) {
  NodeStats stats;
  MeanWriteNs(64 << 20, rnic::kHugePageBacked, 2000, 3, nullptr, &stats);
  EXPECT_LE(stats.mtt_misses, 32u) << "64 MiB in 2 MiB pages is 32 translations";
}

// A QP on an SRQ that fails while a SEND is being placed into a receive it took flushes that
// receive, as a NIC flushes the WQE of a message in progress: its owner gets the buffer back.
// (The fabric once dropped it, and a pool of buffers shared by many QPs slowly ran dry.)
TEST(SimModelTest, AFailureFlushesTheReceiveOfAMessageBeingPlaced) {
  Fabric f;
  std::unique_ptr<rnic::Device> a = f.CreateDevice(), b = f.CreateDevice();
  auto acq = *a->CreateCompletionQueue(64), bcq = *b->CreateCompletionQueue(64);
  auto srq = *b->CreateSharedReceiveQueue(rnic::SrqConfig{});
  rnic::QpConfig ca{acq.get(), acq.get()}, cb{bcq.get(), bcq.get()};
  cb.srq = srq.get();
  auto aqp = *a->CreateQueuePair(ca);
  auto bqp = *b->CreateQueuePair(cb);
  ASSERT_TRUE(aqp->Connect(bqp->local_attributes()).ok());
  ASSERT_TRUE(bqp->Connect(aqp->local_attributes()).ok());
  std::vector<char> src(64 << 10, 's'), dst(64 << 10, 0);
  auto smr = *a->RegisterMemory(src.data(), src.size(), 0);
  auto dmr = *b->RegisterMemory(dst.data(), dst.size(), rnic::kLocalWrite);
  ASSERT_TRUE(srq->PostRecv(rnic::MakeRecv(5, dmr->Sge(0, dst.size()))).ok());
  ASSERT_TRUE(aqp->PostSend(rnic::MakeSend(1, smr->Sge(0, src.size()))).ok());
  // Step virtual time until the SEND has taken the receive and is being placed.
  const SimQpState& target = *f.node(1)->qps.at(bqp->qp_num());
  for (int i = 0; i < 100000 && target.placing.empty(); ++i) f.Run(10);
  ASSERT_EQ(target.placing.size(), 1u) << "the SEND never took the receive";
  bqp->SetError();
  absl::StatusOr<rnic::WorkCompletion> wc = rnic::WaitForCompletion(*b, *bcq, absl::Seconds(1));
  ASSERT_TRUE(wc.ok()) << "the receive vanished: " << wc.status();
  EXPECT_EQ(wc->wr_id, 5u);
  EXPECT_EQ(wc->status, rnic::WcStatus::kFlushed);
  EXPECT_EQ(dst[0], 0) << "bytes of a flushed receive were placed";
}

// A cut link loses what crosses it: the sender's QP fails with RETRY_EXCEEDED after the
// transport timeout, nothing is placed, and the peer's QP fails only once it sends itself.
// QPs created after the link healed work.
TEST(SimModelTest, ACutLinkFailsTheSenderAfterTheTimeoutAndPlacesNothing) {
  Fabric f;
  Pair p = Connect(f);
  std::vector<char> src(64, 's'), dst(64, 0);
  auto smr = *p.a->RegisterMemory(src.data(), src.size(), 0);
  auto dmr = *p.b->RegisterMemory(dst.data(), dst.size(), rnic::kLocalWrite | rnic::kRemoteWrite);
  f.SetLinkCut(NodeIdOf(*p.a), NodeIdOf(*p.b), true);
  EXPECT_TRUE(f.LinkCut(NodeIdOf(*p.b), NodeIdOf(*p.a)));
  ASSERT_TRUE(
      p.aqp->PostSend(rnic::MakeWrite(1, smr->Sge(0, 64), dmr->address(), dmr->rkey())).ok());
  ASSERT_TRUE(
      p.aqp->PostSend(rnic::MakeWrite(2, smr->Sge(0, 64), dmr->address(), dmr->rkey())).ok());
  auto wc = rnic::WaitForCompletion(*p.a, *p.acq, absl::Seconds(1));
  ASSERT_TRUE(wc.ok()) << wc.status();
  EXPECT_EQ(wc->wr_id, 1u);
  EXPECT_EQ(wc->status, rnic::WcStatus::kRetryExceeded);
  wc = rnic::WaitForCompletion(*p.a, *p.acq, absl::Seconds(1));
  ASSERT_TRUE(wc.ok()) << wc.status();
  EXPECT_EQ(wc->status, rnic::WcStatus::kFlushed);
  EXPECT_EQ(dst[0], 0) << "a write crossed a cut link";
  EXPECT_EQ(p.bqp->state(), rnic::QpState::kReadyToSend) << "the peer heard of the failure";
  f.SetLinkCut(NodeIdOf(*p.a), NodeIdOf(*p.b), false);
  EXPECT_FALSE(f.LinkCut(NodeIdOf(*p.a), NodeIdOf(*p.b)));
  // A new pair over the healed link.
  rnic::QpConfig ca{p.acq.get(), p.acq.get()}, cb{p.bcq.get(), p.bcq.get()};
  auto aqp = *p.a->CreateQueuePair(ca);
  auto bqp = *p.b->CreateQueuePair(cb);
  ASSERT_TRUE(aqp->Connect(bqp->local_attributes()).ok());
  ASSERT_TRUE(bqp->Connect(aqp->local_attributes()).ok());
  ASSERT_TRUE(aqp->PostSend(rnic::MakeWrite(3, smr->Sge(0, 64), dmr->address(), dmr->rkey())).ok());
  wc = rnic::WaitForCompletion(*p.a, *p.acq, absl::Seconds(1));
  ASSERT_TRUE(wc.ok()) << wc.status();
  EXPECT_EQ(wc->wr_id, 3u);
  EXPECT_EQ(wc->status, rnic::WcStatus::kSuccess);
  EXPECT_EQ(dst[0], 's');
}

// With jitter, messages of two QPs interleave differently from one seed to the next, but each
// QP's messages arrive in the order they were posted; the same seed gives the same order.
TEST(SimModelTest, JitterReordersAcrossQpsButNeverWithinOne) {
  auto arrivals = [](int64_t jitter_ns, uint64_t seed) {
    Fabric f;
    f.SetJitter(jitter_ns, seed);
    std::unique_ptr<rnic::Device> a = f.CreateDevice(), b = f.CreateDevice();
    auto acq = *a->CreateCompletionQueue(512), bcq = *b->CreateCompletionQueue(512);
    rnic::QpConfig ca{acq.get(), acq.get()}, cb{bcq.get(), bcq.get()};
    std::vector<std::unique_ptr<rnic::QueuePair>> as, bs;
    for (int q = 0; q < 2; ++q) {
      as.push_back(*a->CreateQueuePair(ca));
      bs.push_back(*b->CreateQueuePair(cb));
      EXPECT_TRUE(as[q]->Connect(bs[q]->local_attributes()).ok());
      EXPECT_TRUE(bs[q]->Connect(as[q]->local_attributes()).ok());
    }
    std::vector<char> buf(4096, 'm');
    auto smr = *a->RegisterMemory(buf.data(), 64, 0);
    auto dmr = *b->RegisterMemory(buf.data() + 1024, 64, rnic::kLocalWrite);
    constexpr int kPerQp = 100;
    for (int i = 0; i < kPerQp; ++i) {
      for (int q = 0; q < 2; ++q) {
        EXPECT_TRUE(bs[q]->PostRecv(rnic::MakeRecv(0, dmr->Sge(0, 64))).ok());
        const uint32_t imm = static_cast<uint32_t>(q * 1000 + i);
        EXPECT_TRUE(as[q]->PostSend(rnic::MakeSendWithImm(0, smr->Sge(0, 8), imm)).ok());
      }
    }
    std::vector<uint32_t> order;
    while (order.size() < 2 * kPerQp) {
      auto wc = rnic::WaitForCompletion(*b, *bcq, absl::Seconds(1));
      if (!wc.ok()) break;
      EXPECT_EQ(wc->status, rnic::WcStatus::kSuccess);
      order.push_back(wc->imm);
    }
    return order;
  };
  const std::vector<uint32_t> plain = arrivals(0, 1);
  const std::vector<uint32_t> jittered = arrivals(5000, 1);
  ASSERT_EQ(jittered.size(), 200u);
  EXPECT_NE(jittered, plain) << "jitter changed nothing";
  EXPECT_EQ(arrivals(5000, 1), jittered) << "the same seed, another order";
  int next[2] = {0, 0};
  for (uint32_t imm : jittered) {
    const int q = static_cast<int>(imm / 1000);
    EXPECT_EQ(static_cast<int>(imm % 1000), next[q]++) << "QP " << q << " reordered";
  }
}

// A node's delay holds back the requests it sends and receives (up to the delay each), a
// QP's still in order; once lifted, requests go at model speed again.
TEST(SimModelTest, ANodeDelayHoldsItsRequestsBackInOrder) {
  Fabric f;
  Pair p = Connect(f);
  std::vector<char> buf(4096, 'm');
  auto smr = *p.a->RegisterMemory(buf.data(), 64, 0);
  auto dmr = *p.b->RegisterMemory(buf.data() + 1024, 64, rnic::kLocalWrite);
  // The virtual time `n` sends from a to b take to arrive, checking their order.
  auto send = [&](int n) {
    const int64_t start = f.now_ns();
    for (int i = 0; i < n; ++i) {
      EXPECT_TRUE(p.bqp->PostRecv(rnic::MakeRecv(0, dmr->Sge(0, 64))).ok());
      EXPECT_TRUE(p.aqp->PostSend(rnic::MakeSendWithImm(0, smr->Sge(0, 8), i)).ok());
    }
    for (int i = 0; i < n; ++i) {
      auto wc = rnic::WaitForCompletion(*p.b, *p.bcq, absl::Seconds(1));
      if (!wc.ok()) return int64_t{-1};
      EXPECT_EQ(wc->imm, static_cast<uint32_t>(i)) << "reordered";
    }
    return f.now_ns() - start;
  };
  send(20);  // warms the translation caches
  const int64_t plain = send(20);
  f.SetNodeDelay(NodeIdOf(*p.b), 10'000'000);  // the receiver's: requests to it wait too
  const int64_t delayed = send(20);
  f.SetNodeDelay(NodeIdOf(*p.b), 0);
  const int64_t again = send(20);
  ASSERT_GT(plain, 0);
  // 20 draws of up to 10 ms: the last of them is past 5 ms but for a 2^-20 chance.
  EXPECT_GT(delayed, plain + 5'000'000);
  EXPECT_LE(delayed, plain + 10'000'000 + 1'000'000);
  EXPECT_EQ(again, plain);
}

// A slowed node's CPU is charged `factor` times its model costs.
TEST(SimModelTest, ACpuSlowdownMultipliesTheNodesCpuCosts) {
  auto busy = [](int factor) {
    Fabric f;
    Pair p = Connect(f);
    f.SetCpuSlowdown(NodeIdOf(*p.a), factor);
    std::vector<char> src(64, 's'), dst(64, 0);
    auto smr = *p.a->RegisterMemory(src.data(), src.size(), 0);
    auto dmr = *p.b->RegisterMemory(dst.data(), dst.size(), rnic::kLocalWrite | rnic::kRemoteWrite);
    for (int i = 0; i < 10; ++i) {
      EXPECT_TRUE(
          p.aqp->PostSend(rnic::MakeWrite(i, smr->Sge(0, 64), dmr->address(), dmr->rkey())).ok());
      EXPECT_TRUE(rnic::WaitForCompletion(*p.a, *p.acq, absl::Seconds(1)).ok());
    }
    return StatsOf(*p.a).cpu_busy_ns;
  };
  const uint64_t normal = busy(1);
  ASSERT_GT(normal, 0u);
  EXPECT_EQ(busy(4), 4 * normal);
}

}  // namespace
}  // namespace unloadkv::sim
