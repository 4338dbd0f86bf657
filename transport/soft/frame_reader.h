// Incremental parser of one soft stream: splits bytes into frames and places each payload
// directly where its sink says, without owning sockets or memory. Fuzzed by frame_fuzzer.
#ifndef UNLOADKV_TRANSPORT_SOFT_FRAME_READER_H_
#define UNLOADKV_TRANSPORT_SOFT_FRAME_READER_H_

#include <sys/uio.h>

#include <array>
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "transport/rnic/types.h"
#include "transport/soft/frame.h"

namespace unloadkv::soft {

// The sink's answer to a decoded header.
struct PayloadPlan {
  enum Kind {
    kPlace,    // the payload goes to iov[0..iovcnt), whose lengths sum to payload_len
    kDiscard,  // skip the payload; OnFrame is not called for this frame
    kClose,    // refuse the frame; the stream must be closed (the sink already recorded why)
  };
  Kind kind = kPlace;
  std::array<iovec, rnic::kMaxSge> iov{};
  int iovcnt = 0;
};

// Receives the frames of a stream. Implemented by the soft NIC (and by the fuzzer).
class FrameSink {
 public:
  virtual ~FrameSink() = default;
  // A header was decoded and validated.
  virtual PayloadPlan OnHeader(const FrameHeader& header) = 0;
  // The payload of the frame last planned with kPlace is completely placed.
  virtual void OnFrame(const FrameHeader& header) = 0;
};

// Not thread-safe; owned by one stream.
class FrameReader {
 public:
  FrameReader(FrameSink* sink, uint64_t max_payload) : sink_(sink), max_payload_(max_payload) {}

  // Consumes bytes from `data` and sets *consumed (all of them unless an error is returned).
  // Returns FailedPrecondition when the sink refuses a frame and DataLoss for a malformed
  // header. After an error the reader must not be fed again.
  absl::Status Feed(const char* data, size_t size, size_t* consumed);

  // During a placed payload: the remaining bytes of the current destination buffer, so the
  // caller may read from the socket straight into it and then call AdvanceDirect. Empty
  // otherwise (a discarded payload goes through Feed).
  absl::Span<char> DirectTarget() const;
  void AdvanceDirect(size_t n);

  // The rest of the payload being placed is skipped instead, and OnFrame is not called for it
  // (its destination went away). No effect between frames.
  void DiscardRest();

  // True between frames (no partial header or payload pending).
  bool at_frame_boundary() const { return !in_payload_ && header_fill_ == 0; }

 private:
  void FinishFrameIfDone();

  FrameSink* sink_;
  uint64_t max_payload_;
  char header_bytes_[kMaxFrameHeaderSize];
  size_t header_fill_ = 0;  // bytes of a partial header assembled in header_bytes_
  size_t header_want_ = 0;  // once the prefix is read: the header's size
  bool in_payload_ = false;
  bool discarding_ = false;  // in_payload_: skipping discard_left_ more bytes
  uint64_t discard_left_ = 0;
  FrameHeader header_;
  PayloadPlan plan_;
  int iov_index_ = 0;
  size_t iov_offset_ = 0;
};

}  // namespace unloadkv::soft

#endif  // UNLOADKV_TRANSPORT_SOFT_FRAME_READER_H_
