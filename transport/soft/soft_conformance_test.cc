// Runs the RNIC conformance suite on the soft backend, two devices in one process, each in
// both progress modes.
#include "transport/base/logging.h"
#include "transport/conformance/conformance_suite.h"
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

}  // namespace
}  // namespace unloadkv::rnic
