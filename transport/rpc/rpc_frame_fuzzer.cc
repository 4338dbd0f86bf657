// libFuzzer target for the RPC frame decoder: a decoded frame's payload is the input's tail, and
// encoding the decoded frame gives the input back (every header byte is a field).
#include <cstdint>
#include <string>
#include <vector>

#include "transport/rpc/rpc_frame.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view in(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<unloadkv::rpc::RpcFrame> f = unloadkv::rpc::DecodeRpcFrame(in);
  if (f.ok() && (f->payload.data() < in.data() ||
                 f->payload.data() + f->payload.size() != in.data() + in.size())) {
    __builtin_trap();
  }
  if (f.ok() && unloadkv::rpc::EncodeRpcFrame(*f) != in) __builtin_trap();
  return 0;
}

extern "C" void FuzzSeeds(std::vector<std::string>* seeds) {
  unloadkv::rpc::RpcFrame f;
  f.request_id = 5;
  f.payload = "abc";
  seeds->push_back(unloadkv::rpc::EncodeRpcFrame(f));
  f.kind = unloadkv::rpc::FrameKind::kResponse;
  f.status = 5;
  seeds->push_back(unloadkv::rpc::EncodeRpcFrame(f));
}
