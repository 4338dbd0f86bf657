// The rdma-core (libibverbs) backend: rnic::Device on a real RNIC or Soft-RoCE. An adapter:
// every call maps to the verb and maps the result; the logic lives above the interface.
#ifndef UNLOADKV_TRANSPORT_VERBS_VERBS_DEVICE_H_
#define UNLOADKV_TRANSPORT_VERBS_VERBS_DEVICE_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "transport/rnic/device.h"

struct ibv_context;
struct ibv_pd;

namespace unloadkv::verbs {

class VerbsDevice : public rnic::Device {
 public:
  struct Options {
    std::string device_name;  // empty: the first device with an active port
    int port = 1;
    int gid_index = 0;     // RoCE: which GID of the port to use
    int mtu_bytes = 1024;  // path MTU, capped by the port's active MTU
    int timeout = 14;      // local ACK timeout exponent (4.096 us * 2^timeout)
    int retry_cnt = 7;
    uint64_t min_memlock_bytes = 64ull << 20;  // refuse to start below this RLIMIT_MEMLOCK
  };

  // Opens the device. Clear errors that name the fix: no device (suggests --transport=soft and
  // Soft-RoCE), unknown device name, port not active, RLIMIT_MEMLOCK too low.
  static absl::StatusOr<std::unique_ptr<VerbsDevice>> Create(const Options& options);
  ~VerbsDevice() override;

  std::string transport() const override { return "verbs"; }
  rnic::DeviceLimits limits() const override;
  absl::StatusOr<std::unique_ptr<rnic::MemoryRegion>> RegisterMemory(void* addr, size_t length,
                                                                     uint32_t access) override;
  absl::StatusOr<std::unique_ptr<rnic::MemoryWindow>> AllocateWindow() override;
  absl::StatusOr<std::unique_ptr<rnic::CompletionQueue>> CreateCompletionQueue(
      int capacity) override;
  absl::StatusOr<std::unique_ptr<rnic::QueuePair>> CreateQueuePair(
      const rnic::QpConfig& config) override;
  absl::StatusOr<std::unique_ptr<rnic::SharedReceiveQueue>> CreateSharedReceiveQueue(
      const rnic::SrqConfig& config) override;
  const std::string& name() const { return name_; }

  // Reads the device's pending asynchronous events (never blocks): an SRQ limit event marks
  // its SRQ; the others are acknowledged and dropped. Thread-safe.
  void DrainAsyncEvents();

 private:
  VerbsDevice() = default;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  Options options_;
  std::string name_;
  std::mutex async_mu_;  // serializes DrainAsyncEvents
  std::string address_;  // EncodeVerbsAddress of the local port
  int active_mtu_bytes_ = 1024;
  uint64_t max_msg_ = 1ull << 30;
  // From ibv_query_device (0: not queried; the interface's defaults apply).
  uint32_t max_qp_wr_ = 0;
  int max_cqe_ = 0;
};

}  // namespace unloadkv::verbs

#endif  // UNLOADKV_TRANSPORT_VERBS_VERBS_DEVICE_H_
