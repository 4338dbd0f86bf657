// Runs the RNIC conformance suite on the simulated fabric.
#include "transport/conformance/conformance_suite.h"
#include "transport/conformance/window_suite.h"
#include "transport/sim/fabric.h"

namespace unloadkv::rnic {
namespace {

// All devices of a test live on one fabric, which outlives them (it is never destroyed).
struct SimBackend {
  static std::string Unavailable() { return ""; }
  static absl::StatusOr<std::unique_ptr<Device>> NewDevice() {
    static sim::Fabric* fabric = new sim::Fabric();
    return fabric->CreateDevice();
  }
};

INSTANTIATE_TYPED_TEST_SUITE_P(Sim, RnicConformanceTest, SimBackend);
INSTANTIATE_TYPED_TEST_SUITE_P(Sim, RnicWindowTest, SimBackend);

}  // namespace
}  // namespace unloadkv::rnic
