// libFuzzer target for the message header and ack parsers: arbitrary bytes, delivered lengths
// and lane counts. Whatever parses must re-encode to the bytes it came from.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "transport/engine/engine_wire.h"

namespace e = unloadkv::engine;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 5) return 0;
  const int lanes = data[0] % (e::kMaxLanes + 2);  // 0 and kMaxLanes + 1 must be refused
  uint32_t byte_len;
  std::memcpy(&byte_len, data + 1, 4);
  std::vector<char> buf(64, 0);
  std::memcpy(buf.data(), data + 5, std::min<size_t>(size - 5, buf.size()));
  byte_len %= 128;
  const uint32_t readable = std::min<uint32_t>(byte_len, static_cast<uint32_t>(buf.size()));
  absl::StatusOr<e::MessageHeader> h = e::ParseMessageHeader(buf.data(), readable, lanes);
  if (h.ok()) {
    if (lanes < 1 || lanes > e::kMaxLanes || readable < e::MessageHeaderBytes(lanes)) {
      __builtin_trap();
    }
    std::vector<char> again(e::MessageHeaderBytes(lanes));
    e::EncodeMessageHeader(*h, lanes, again.data());
    if (std::memcmp(again.data(), buf.data(), again.size()) != 0) __builtin_trap();
  }
  absl::StatusOr<e::AckPayload> a = e::ParseAck(buf.data(), readable);
  if (a.ok()) {
    if (readable != e::kAckBytes) __builtin_trap();
    char again[e::kAckBytes];
    e::EncodeAck(*a, again);
    // Counts survive exactly; a status outside the three an ack may carry is normalized.
    if (std::memcmp(again, buf.data(), 16) != 0 ||
        std::memcmp(again + 20, buf.data() + 20, 4) != 0) {
      __builtin_trap();
    }
  }
  return 0;
}

extern "C" void FuzzSeeds(std::vector<std::string>* seeds) {
  for (int lanes = 1; lanes <= 2; ++lanes) {
    std::string s(5 + 64, '\0');
    s[0] = static_cast<char>(lanes);
    const uint32_t len = e::MessageHeaderBytes(lanes) + 10;
    std::memcpy(&s[1], &len, 4);
    e::MessageHeader h;
    h.messages_seen = 12;
    h.credits_returned = 3;
    h.lane_writes[0] = 40;
    e::EncodeMessageHeader(h, lanes, &s[5]);
    seeds->push_back(s);
  }
  std::string ack(5 + 64, '\0');
  const uint32_t len = e::kAckBytes;
  std::memcpy(&ack[1], &len, 4);
  e::EncodeAck({7, 9, unloadkv::rnic::WcStatus::kRemoteAccessError, 2}, &ack[5]);
  seeds->push_back(ack);
}
