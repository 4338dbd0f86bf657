// Runs the RNIC conformance suite on the soft backend, two devices in one process, in each
// progress mode: an internal progress thread, progress driven by the device's owner, and an
// owner that waits in Progress on a device that waits in recv (Options::wait_in_read); and on
// the second port of two-port devices whose memory is registered through the first.
#include <poll.h>

#include <atomic>
#include <thread>

#include "transport/base/logging.h"
#include "transport/conformance/conformance_suite.h"
#include "transport/conformance/window_suite.h"
#include "transport/soft/soft_device.h"

namespace unloadkv::rnic {
namespace {

// Each device runs its own progress thread: the peer makes progress while the test waits.
struct SoftThreaded {
  static std::string Unavailable() { return ""; }
  static absl::StatusOr<std::unique_ptr<Device>> NewDevice() {
    SetMinLogLevel(LogLevel::kError);
    soft::SoftDevice::Options o;
    o.progress_thread = true;
    absl::StatusOr<std::unique_ptr<soft::SoftDevice>> d = soft::SoftDevice::Create(o);
    if (!d.ok()) return d.status();
    return std::unique_ptr<Device>(std::move(*d));
  }
};

INSTANTIATE_TYPED_TEST_SUITE_P(SoftThreaded, RnicConformanceTest, SoftThreaded);
INSTANTIATE_TYPED_TEST_SUITE_P(SoftThreaded, RnicWindowTest, SoftThreaded);

// Port `port` of a soft device: memory registered and windows allocated through port 0, CQs,
// SRQs and QPs on `port`, which also progresses.
class PortDevice : public Device {
 public:
  PortDevice(std::unique_ptr<soft::SoftDevice> d, int port)
      : device_(std::move(d)), port_(device_->port(port)) {}
  std::string transport() const override { return port_->transport(); }
  DeviceLimits limits() const override { return port_->limits(); }
  absl::StatusOr<std::unique_ptr<MemoryRegion>> RegisterMemory(void* addr, size_t length,
                                                               uint32_t access) override {
    return device_->RegisterMemory(addr, length, access);
  }
  absl::StatusOr<std::unique_ptr<MemoryWindow>> AllocateWindow() override {
    return device_->AllocateWindow();
  }
  absl::StatusOr<std::unique_ptr<CompletionQueue>> CreateCompletionQueue(int capacity) override {
    return port_->CreateCompletionQueue(capacity);
  }
  absl::StatusOr<std::unique_ptr<QueuePair>> CreateQueuePair(const QpConfig& config) override {
    return port_->CreateQueuePair(config);
  }
  absl::StatusOr<std::unique_ptr<SharedReceiveQueue>> CreateSharedReceiveQueue(
      const SrqConfig& config) override {
    return port_->CreateSharedReceiveQueue(config);
  }
  int event_fd() const override { return port_->event_fd(); }
  int Progress(absl::Duration max_wait) override { return port_->Progress(max_wait); }

 protected:
  std::unique_ptr<soft::SoftDevice> device_;
  Device* port_;
};

// No progress thread: the owner drives the device by calling Progress, as an event loop does
// when event_fd() is readable (and CompletionQueue::Poll does when it finds nothing). Here the
// owner's loop is a thread of the test that waits on event_fd() and calls Progress(0).
class OwnerDrivenDevice : public PortDevice {
 public:
  // `waits`: the loop waits in Progress (1 ms at a time), as the SDK's caller does, rather
  // than polling event_fd() and progressing without waiting.
  explicit OwnerDrivenDevice(std::unique_ptr<soft::SoftDevice> d, bool waits = false)
      : PortDevice(std::move(d), 0), waits_(waits), loop_([this] { Loop(); }) {}
  ~OwnerDrivenDevice() override {
    stop_ = true;
    loop_.join();
  }

 private:
  void Loop() {
    while (!stop_.load()) {
      if (waits_) {
        port_->Progress(absl::Milliseconds(1));
        continue;
      }
      pollfd p{port_->event_fd(), POLLIN, 0};
      if (poll(&p, 1, 5) > 0) port_->Progress(absl::ZeroDuration());
    }
  }
  const bool waits_;
  std::atomic<bool> stop_{false};
  std::thread loop_;
};

absl::StatusOr<std::unique_ptr<Device>> NewOwnerDriven(const soft::SoftDevice::Options& o,
                                                       bool waits) {
  SetMinLogLevel(LogLevel::kError);
  absl::StatusOr<std::unique_ptr<soft::SoftDevice>> d = soft::SoftDevice::Create(o);
  if (!d.ok()) return d.status();
  if ((*d)->event_fd() < 0) return absl::InternalError("a caller-driven device has no event_fd");
  return std::unique_ptr<Device>(new OwnerDrivenDevice(std::move(*d), waits));
}

struct SoftOwnerDriven {
  static std::string Unavailable() { return ""; }
  static absl::StatusOr<std::unique_ptr<Device>> NewDevice() {
    return NewOwnerDriven({}, /*waits=*/false);
  }
};

INSTANTIATE_TYPED_TEST_SUITE_P(SoftOwnerDriven, RnicConformanceTest, SoftOwnerDriven);
INSTANTIATE_TYPED_TEST_SUITE_P(SoftOwnerDriven, RnicWindowTest, SoftOwnerDriven);

// The owner waits in Progress, and the device in recv whenever it has one stream and nothing
// else pending: every request, answer and refusal of the suite through that wait.
struct SoftWaitInRead {
  static std::string Unavailable() { return ""; }
  static absl::StatusOr<std::unique_ptr<Device>> NewDevice() {
    soft::SoftDevice::Options o;
    o.wait_in_read = true;
    return NewOwnerDriven(o, /*waits=*/true);
  }
};

INSTANTIATE_TYPED_TEST_SUITE_P(SoftWaitInRead, RnicConformanceTest, SoftWaitInRead);
INSTANTIATE_TYPED_TEST_SUITE_P(SoftWaitInRead, RnicWindowTest, SoftWaitInRead);

// The second port of two-port devices (PortDevice): every key of the suite is checked across
// ports, and windows are bound and invalidated on the port that did not allocate them.
struct SoftSecondPort {
  static std::string Unavailable() { return ""; }
  static absl::StatusOr<std::unique_ptr<Device>> NewDevice() {
    SetMinLogLevel(LogLevel::kError);
    soft::SoftDevice::Options o;
    o.progress_thread = true;
    o.ports = 2;
    absl::StatusOr<std::unique_ptr<soft::SoftDevice>> d = soft::SoftDevice::Create(o);
    if (!d.ok()) return d.status();
    return std::unique_ptr<Device>(new PortDevice(std::move(*d), 1));
  }
};

INSTANTIATE_TYPED_TEST_SUITE_P(SoftSecondPort, RnicConformanceTest, SoftSecondPort);
INSTANTIATE_TYPED_TEST_SUITE_P(SoftSecondPort, RnicWindowTest, SoftSecondPort);

}  // namespace
}  // namespace unloadkv::rnic
