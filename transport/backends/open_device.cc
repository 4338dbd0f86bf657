#include "transport/backends/open_device.h"

#include "absl/strings/str_cat.h"
#include "transport/soft/soft_device.h"
#include "transport/verbs/verbs_device.h"

namespace unloadkv::backends {

absl::StatusOr<std::unique_ptr<rnic::Device>> OpenDevice(const DeviceSpec& spec) {
  if (spec.transport == "soft") {
    soft::SoftDevice::Options o;
    o.listen_host = spec.soft_host;
    o.defer_acks = spec.defer_acks;
    o.ports = spec.soft_ports;
    o.progress_on_empty_poll = spec.soft_progress_on_empty_poll;
    o.hold_acks_until_wait = spec.hold_acks_until_wait;
    o.wait_in_read = spec.wait_in_read;
    auto d = soft::SoftDevice::Create(o);
    if (!d.ok()) return d.status();
    return std::unique_ptr<rnic::Device>(std::move(*d));
  }
  if (spec.transport == "verbs") {
    verbs::VerbsDevice::Options o;
    o.device_name = spec.verbs_device;
    auto d = verbs::VerbsDevice::Create(o);
    if (d.status().code() == absl::StatusCode::kNotFound) {
      // No usable RNIC: say how this binary runs without one.
      return absl::Status(d.status().code(),
                          absl::StrCat(d.status().message(), " (", spec.soft_flag, ")"));
    }
    if (!d.ok()) return d.status();
    return std::unique_ptr<rnic::Device>(std::move(*d));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--transport='", spec.transport, "': choose soft or verbs"));
}

}  // namespace unloadkv::backends
