// libFuzzer target for the log's frame decoder (log_frame.h): arbitrary bytes as a segment's
// content, decoded frame after frame as recovery does. It never reads past the data, every
// frame it accepts is whole and checksummed, and an accepted entry framed again decodes to the
// same entry.
#include <cstdint>
#include <string>
#include <vector>

#include "server/log_frame.h"

using unloadkv::server::AppendFrame;
using unloadkv::server::DecodeFrame;
using unloadkv::server::FrameResult;
using unloadkv::server::kFrameHeaderBytes;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view rest(reinterpret_cast<const char*>(data), size);
  unloadkv::proto::LogEntry entry, again;
  while (!rest.empty()) {
    const FrameResult r = DecodeFrame(rest, &entry);
    if (r.bytes > rest.size()) __builtin_trap();
    if (r.kind != FrameResult::kOk) break;
    if (r.bytes <= kFrameHeaderBytes) __builtin_trap();
    std::string framed;
    AppendFrame(entry, &framed);
    const FrameResult back = DecodeFrame(framed, &again);
    if (back.kind != FrameResult::kOk || back.bytes != framed.size() ||
        again.SerializeAsString() != entry.SerializeAsString()) {
      __builtin_trap();
    }
    rest.remove_prefix(r.bytes);
  }
  return 0;
}

extern "C" void FuzzSeeds(std::vector<std::string>* seeds) {
  unloadkv::proto::LogEntry e;
  e.set_epoch(2);
  e.mutable_record()->set_seq(7);
  e.mutable_record()->set_key("key");
  e.mutable_record()->set_size(5);
  e.set_value("value");
  std::string two;
  AppendFrame(e, &two);
  e.mutable_record()->set_seq(8);
  e.mutable_record()->set_op(unloadkv::proto::ReplicationRecord::DELETE);
  e.clear_value();
  AppendFrame(e, &two);
  seeds->push_back(two);
  seeds->push_back(two.substr(0, two.size() - 3));
  seeds->push_back(std::string(64, '\0'));
  seeds->push_back("");
}
