#include "server/log_frame.h"

#include <zlib.h>

#include <algorithm>

namespace unloadkv::server {
namespace {

uint32_t Crc(absl::string_view bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  // zlib takes lengths as uInt: feed large inputs in pieces.
  while (!bytes.empty()) {
    const size_t n = std::min<size_t>(bytes.size(), 1u << 30);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(n));
    bytes.remove_prefix(n);
  }
  return static_cast<uint32_t>(crc);
}

void PutFixed32(uint32_t v, std::string* out) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

uint32_t GetFixed32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}

}  // namespace

void AppendFrame(const proto::LogEntry& entry, std::string* out) {
  const std::string bytes = entry.SerializeAsString();
  PutFixed32(static_cast<uint32_t>(bytes.size()), out);
  PutFixed32(Crc(bytes), out);
  out->append(bytes);
}

FrameResult DecodeFrame(absl::string_view data, proto::LogEntry* entry) {
  FrameResult r;
  auto all_zero = [](absl::string_view d) {
    return std::all_of(d.begin(), d.end(), [](char c) { return c == 0; });
  };
  if (data.size() < kFrameHeaderBytes) {
    r.kind = !data.empty() && all_zero(data) ? FrameResult::kZeros : FrameResult::kIncomplete;
    return r;
  }
  const uint32_t length = GetFixed32(data.data());
  if (length == 0 && all_zero(data)) {
    r.kind = FrameResult::kZeros;
    return r;
  }
  if (length == 0 || length > kMaxFrameBytes - kFrameHeaderBytes) {
    r.why = "bad record length";
    return r;
  }
  if (data.size() - kFrameHeaderBytes < length) {
    r.kind = FrameResult::kIncomplete;
    return r;
  }
  const absl::string_view bytes = data.substr(kFrameHeaderBytes, length);
  r.bytes = kFrameHeaderBytes + length;
  if (Crc(bytes) != GetFixed32(data.data() + 4)) {
    r.why = "checksum mismatch";
    return r;
  }
  if (!entry->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    r.why = "record does not parse";
    return r;
  }
  r.kind = FrameResult::kOk;
  return r;
}

}  // namespace unloadkv::server
