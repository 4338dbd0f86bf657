// Opens the RNIC a binary asked for by name: "soft" (RC over TCP, no hardware) or "verbs"
// (rdma-core). Shared by kvserver, kvclient and the benchmarks so that every binary accepts the
// same --transport values with the same errors.
#ifndef UNLOADKV_TRANSPORT_BACKENDS_OPEN_DEVICE_H_
#define UNLOADKV_TRANSPORT_BACKENDS_OPEN_DEVICE_H_

#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "transport/rnic/device.h"

namespace unloadkv::backends {

struct DeviceSpec {
  std::string transport = "soft";       // soft | verbs
  std::string soft_host = "127.0.0.1";  // soft: the address its data streams listen on
  std::string verbs_device;             // verbs: empty picks the first active port
  // How the binary's user picks the soft transport, named in errors that suggest it.
  std::string soft_flag = "--transport=soft";
  // soft: ACKs a peer asks for wait for the owner's FlushDeferred (SoftDevice::Options::
  // defer_acks), so that answers posted meanwhile carry them. For an engine whose workers
  // answer the messages they receive in the same batch (kvserver).
  bool defer_acks = false;
  // soft: SoftDevice::Options::hold_acks_until_wait. For a caller-driven client.
  bool hold_acks_until_wait = false;
  // soft: SoftDevice::Options::wait_in_read. For a caller-driven client with one connection.
  bool wait_in_read = false;
  // soft: SoftDevice::Options::ports. A server gives each engine worker a port of its own.
  int soft_ports = 1;
  // soft: SoftDevice::Options::progress_on_empty_poll. False only for a device whose CQs only
  // engine worker threads poll (kvserver): each waits in Progress when its poll finds nothing.
  bool soft_progress_on_empty_poll = true;

  // The spec of a binary's --transport, soft host and verbs device flags.
  static DeviceSpec For(std::string transport, std::string soft_host, std::string verbs_device) {
    DeviceSpec s;
    s.transport = std::move(transport);
    s.soft_host = std::move(soft_host);
    s.verbs_device = std::move(verbs_device);
    return s;
  }
};

// InvalidArgument naming the choices for an unknown transport; the backend's own errors
// (for verbs: no device, no active port, memlock limit) otherwise.
absl::StatusOr<std::unique_ptr<rnic::Device>> OpenDevice(const DeviceSpec& spec);

}  // namespace unloadkv::backends

#endif  // UNLOADKV_TRANSPORT_BACKENDS_OPEN_DEVICE_H_
