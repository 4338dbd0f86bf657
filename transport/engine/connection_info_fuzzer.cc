// libFuzzer target for the connection-info text a peer sends during the bootstrap exchange
// (kvserver reads it from any client): decoding never crashes, and whatever decodes
// re-encodes to text that decodes to the same encoding.
#include <cstdint>
#include <string>
#include <vector>

#include "transport/engine/engine.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view in(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<unloadkv::engine::ConnectionInfo> info =
      unloadkv::engine::DecodeConnectionInfo(in);
  if (!info.ok()) return 0;
  const std::string text = unloadkv::engine::EncodeConnectionInfo(*info);
  absl::StatusOr<unloadkv::engine::ConnectionInfo> again =
      unloadkv::engine::DecodeConnectionInfo(text);
  if (!again.ok() || unloadkv::engine::EncodeConnectionInfo(*again) != text) __builtin_trap();
  return 0;
}

extern "C" void FuzzSeeds(std::vector<std::string>* seeds) {
  unloadkv::engine::ConnectionInfo info;
  info.qp.transport = "soft";
  info.qp.address = "127.0.0.1:4242";
  info.qp.qp_num = 7;
  info.qp.psn = 99;
  info.staging = {{8, 1234}};
  info.staging_slots = 64;
  info.staging_credits = 1;
  info.slot_bytes = 16384;
  info.message_slots = 32;
  info.message_credits = 2;
  info.max_message_bytes = 4096;
  seeds->push_back(unloadkv::engine::EncodeConnectionInfo(info));
  info.staging.push_back({9, 5678});
  seeds->push_back(unloadkv::engine::EncodeConnectionInfo(info));
}
