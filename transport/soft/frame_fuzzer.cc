// libFuzzer target: arbitrary bytes into a soft stream's FrameReader, whose sink applies the
// soft NIC's access checks against a small registered arena. Any out-of-bounds placement,
// overflow or crash is a bug. Run: see docs/testing.md ("Fuzzing").
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "transport/rnic/region_table.h"
#include "transport/soft/frame.h"
#include "transport/soft/frame_reader.h"

namespace {

using unloadkv::rnic::AccessVerdict;
using unloadkv::rnic::RegionTable;
using namespace unloadkv::soft;

constexpr uint64_t kMaxPayload = 1 << 16;

class FuzzSink : public FrameSink {
 public:
  FuzzSink() : arena_(8192), recv_(512), recv2_(256) {
    table_.Insert(7, {reinterpret_cast<uint64_t>(arena_.data()), 4096,
                      unloadkv::rnic::kRemoteWrite | unloadkv::rnic::kLocalWrite});
    table_.Insert(
        8, {reinterpret_cast<uint64_t>(arena_.data()) + 4096, 4096, unloadkv::rnic::kRemoteRead});
  }
  PayloadPlan OnHeader(const FrameHeader& h) override {
    PayloadPlan p;
    if ((h.imm & 0xff) == 0x5a) {  // a frame for a QP that is gone
      p.kind = PayloadPlan::kDiscard;
      return p;
    }
    switch (h.type) {
      case FrameType::kWrite:
      case FrameType::kWriteWithImm: {
        // The fuzzer picks offsets relative to the arena so the check sees interesting ranges.
        uint64_t addr = reinterpret_cast<uint64_t>(arena_.data()) + (h.remote_addr & 0x3fff);
        if (table_.Check(h.rkey, addr, h.payload_len, unloadkv::rnic::kRemoteWrite) !=
            AccessVerdict::kOk) {
          p.kind = PayloadPlan::kClose;
          return p;
        }
        if (h.payload_len > 0) {
          p.iov[0] = {reinterpret_cast<void*>(addr), h.payload_len};
          p.iovcnt = 1;
        }
        return p;
      }
      case FrameType::kSend:
      case FrameType::kSendWithImm:
      case FrameType::kReadResponse: {
        if (h.payload_len > recv_.size() + recv2_.size()) {
          p.kind = PayloadPlan::kClose;
          return p;
        }
        size_t first = std::min<size_t>(h.payload_len, recv_.size());
        if (first > 0) p.iov[p.iovcnt++] = {recv_.data(), first};
        if (h.payload_len > first) p.iov[p.iovcnt++] = {recv2_.data(), h.payload_len - first};
        return p;
      }
      default:
        return p;  // no payload types
    }
  }
  void OnFrame(const FrameHeader& h) override { ++frames_; }

 private:
  RegionTable table_;
  std::vector<char> arena_, recv_, recv2_;
  int frames_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // First byte: chunk size for feeding, so split headers and payloads get exercised.
  size_t chunk = 1 + data[0] % 61;
  const char* p = reinterpret_cast<const char*>(data + 1);
  size_t left = size - 1;
  FuzzSink sink;
  FrameReader reader(&sink, kMaxPayload);
  while (left > 0) {
    absl::Span<char> direct = reader.DirectTarget();
    if (!direct.empty() && (data[0] & 0x80)) {
      size_t n = std::min(direct.size(), left);
      std::memcpy(direct.data(), p, n);
      reader.AdvanceDirect(n);
      p += n;
      left -= n;
      continue;
    }
    size_t consumed = 0;
    absl::Status st = reader.Feed(p, std::min(chunk, left), &consumed);
    if (!st.ok()) return 0;
    if (consumed != std::min(chunk, left)) __builtin_trap();  // ok means everything consumed
    p += consumed;
    left -= consumed;
    if (consumed == 0) break;
    // A placement cut short (its QP failed meanwhile) skips the rest.
    if ((data[0] & 0x40) && !reader.DirectTarget().empty()) reader.DiscardRest();
  }
  return 0;
}

// Valid streams for the deterministic driver (tests/fuzz/fuzz_driver_main.cc) to mutate.
extern "C" void FuzzSeeds(std::vector<std::string>* seeds) {
  auto frame = [](FrameType t, uint32_t len, uint32_t rkey, uint64_t addr, uint32_t aux) {
    FrameHeader h;
    h.type = t;
    if (t != FrameType::kHello) {
      h.qp = 3;
      h.src_qp = 4;
    }
    h.payload_len = len;
    h.rkey = rkey;
    h.remote_addr = addr;
    h.aux = aux;
    std::string out(kMaxFrameHeaderSize, '\0');
    out.resize(EncodeFrameHeader(h, out.data()));
    return out + std::string(len, 'p');
  };
  for (char chunk : {'\x00', '\x07', '\x83'}) {
    std::string s(1, chunk);
    s += frame(FrameType::kHello, 0, 0, 0, 0);
    s += frame(FrameType::kConnect, 0, 0, 0, 0);
    s += frame(FrameType::kConnectAck, 0, 0, 0, 0);
    s += frame(FrameType::kWrite, 100, 7, 16, 0);
    s += frame(FrameType::kWriteWithImm, 4000, 7, 0, 0);
    s += frame(FrameType::kSend, 600, 0, 0, 0);
    s += frame(FrameType::kReadRequest, 0, 8, 0, 64);
    s += frame(FrameType::kAck, 0, 0, 0, 0);
    s += frame(FrameType::kNak, 0, 0, 0, 3);
    s += frame(FrameType::kReadResponse, 64, 0, 0, 0);
    s += frame(FrameType::kRnrNak, 0, 0, 0, 0);
    s += frame(FrameType::kDisconnect, 0, 0, 0, 0);
    seeds->push_back(s);
  }
}
