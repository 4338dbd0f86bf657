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

}  // namespace
}  // namespace unloadkv::sim
