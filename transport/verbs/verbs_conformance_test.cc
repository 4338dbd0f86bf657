// The RNIC conformance suite on rdma-core. Without a device (or Soft-RoCE) every case skips
// with the reason; docs/rdma.md tells how to run it on real hardware.
#include "transport/conformance/conformance_suite.h"
#include "transport/conformance/window_suite.h"
#include "transport/verbs/verbs_device.h"

namespace unloadkv::rnic {
namespace {

struct VerbsBackend {
  static std::string Unavailable() {
    absl::StatusOr<std::unique_ptr<verbs::VerbsDevice>> d = verbs::VerbsDevice::Create({});
    return d.ok() ? "" : std::string(d.status().message());
  }
  static absl::StatusOr<std::unique_ptr<Device>> NewDevice() {
    absl::StatusOr<std::unique_ptr<verbs::VerbsDevice>> d = verbs::VerbsDevice::Create({});
    if (!d.ok()) return d.status();
    return std::unique_ptr<Device>(std::move(*d));
  }
};

INSTANTIATE_TYPED_TEST_SUITE_P(Verbs, RnicConformanceTest, VerbsBackend);
INSTANTIATE_TYPED_TEST_SUITE_P(Verbs, RnicWindowTest, VerbsBackend);

}  // namespace
}  // namespace unloadkv::rnic
