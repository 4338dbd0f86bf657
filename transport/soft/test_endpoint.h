// For the soft RNIC's tests: a device with one CQ, its QPs, and a registered 4 KiB buffer.
#ifndef UNLOADKV_TRANSPORT_SOFT_TEST_ENDPOINT_H_
#define UNLOADKV_TRANSPORT_SOFT_TEST_ENDPOINT_H_

#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "transport/base/logging.h"
#include "transport/soft/soft_device.h"

namespace unloadkv::soft {

struct TestEndpoint {
  // Creates the device with `o`, then `qp_count` QPs on one CQ (the device's QP numbers 1,
  // 2, ... in that order: which end of a pair dials depends on them, docs/wire-soft.md).
  void Init(const SoftDevice::Options& o, int qp_count = 1) {
    SetMinLogLevel(LogLevel::kError);
    absl::StatusOr<std::unique_ptr<SoftDevice>> d = SoftDevice::Create(o);
    ASSERT_TRUE(d.ok()) << d.status();
    device = std::move(*d);
    cq = *device->CreateCompletionQueue(64);
    rnic::QpConfig cfg;
    cfg.send_cq = cq.get();
    cfg.recv_cq = cq.get();
    for (int i = 0; i < qp_count; ++i) qps.push_back(*device->CreateQueuePair(cfg));
    mr = *device->RegisterMemory(buffer.data(), buffer.size(), rnic::kLocalWrite);
  }
  rnic::QueuePair* qp(size_t i = 0) const { return qps[i].get(); }
  // `len` bytes of the buffer from `at`.
  rnic::ScatterGatherEntry Sge(size_t at, uint32_t len = 64) const {
    return {reinterpret_cast<uint64_t>(buffer.data() + at), len, mr->lkey()};
  }

  std::unique_ptr<SoftDevice> device;
  std::unique_ptr<rnic::CompletionQueue> cq;
  std::vector<std::unique_ptr<rnic::QueuePair>> qps;
  std::vector<char> buffer = std::vector<char>(4096);
  std::unique_ptr<rnic::MemoryRegion> mr;
};

}  // namespace unloadkv::soft

#endif  // UNLOADKV_TRANSPORT_SOFT_TEST_ENDPOINT_H_
