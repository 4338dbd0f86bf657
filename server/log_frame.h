// The on-disk framing of a replica's log records (docs/durability.md, "Log format"):
//
//   fixed32 length | fixed32 crc32(entry) | entry (length bytes: a serialized proto::LogEntry)
//
// little-endian, with zlib's CRC-32 of the entry bytes. A frame is at most kMaxFrameBytes.
#ifndef UNLOADKV_SERVER_LOG_FRAME_H_
#define UNLOADKV_SERVER_LOG_FRAME_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "proto/log.pb.h"

namespace unloadkv::server {

inline constexpr size_t kFrameHeaderBytes = 8;
// A key, a value and the record's fields, with room to spare.
inline constexpr size_t kMaxFrameBytes = 1 << 20;

// Appends `entry`'s frame to `out`.
void AppendFrame(const proto::LogEntry& entry, std::string* out);

struct FrameResult {
  enum Kind {
    kOk,          // `entry` holds the record; the frame took `bytes`
    kIncomplete,  // `data` ends inside the frame (a torn write at a log's end)
    kZeros,       // `data` is all zero bytes from here (space a crash left unwritten)
    kCorrupt,     // a bad length, a CRC mismatch or an entry that does not parse: `why`;
                  // `bytes` is the frame's length when its header was readable, else 0
  };
  Kind kind = kCorrupt;
  size_t bytes = 0;
  const char* why = "";
};

// Decodes the frame at the start of `data` into `entry`. Never reads past `data`.
FrameResult DecodeFrame(absl::string_view data, proto::LogEntry* entry);

}  // namespace unloadkv::server

#endif  // UNLOADKV_SERVER_LOG_FRAME_H_
