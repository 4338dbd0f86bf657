#include "transport/soft/frame_reader.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace unloadkv::soft {

void FrameReader::FinishFrameIfDone() {
  if (discarding_) {
    if (discard_left_ > 0) return;
    discarding_ = false;
    in_payload_ = false;
    header_fill_ = 0;
    return;
  }
  while (iov_index_ < plan_.iovcnt && plan_.iov[iov_index_].iov_len == iov_offset_) {
    ++iov_index_;
    iov_offset_ = 0;
  }
  if (iov_index_ < plan_.iovcnt) return;
  in_payload_ = false;
  header_fill_ = 0;
  sink_->OnFrame(header_);
}

void FrameReader::DiscardRest() {
  if (!in_payload_ || discarding_) return;
  uint64_t placed = iov_offset_;
  for (int i = 0; i < iov_index_; ++i) placed += plan_.iov[i].iov_len;
  discarding_ = true;
  discard_left_ = header_.payload_len - placed;
}

absl::Status FrameReader::Feed(const char* data, size_t size, size_t* consumed) {
  size_t pos = 0;
  *consumed = 0;
  for (;;) {
    if (in_payload_) {
      if (pos == size) break;
      if (discarding_) {
        size_t n = static_cast<size_t>(std::min<uint64_t>(size - pos, discard_left_));
        discard_left_ -= n;
        pos += n;
        FinishFrameIfDone();
        continue;
      }
      iovec& v = plan_.iov[iov_index_];
      size_t n = std::min(size - pos, v.iov_len - iov_offset_);
      std::memcpy(static_cast<char*>(v.iov_base) + iov_offset_, data + pos, n);
      iov_offset_ += n;
      pos += n;
      FinishFrameIfDone();
      continue;
    }
    if (pos == size) break;
    absl::StatusOr<FrameHeader> h;
    size_t header_size = 0;
    if (header_fill_ == 0 && size - pos >= kMaxFrameHeaderSize) {
      // The whole header is in `data`: decoded where it lies.
      h = DecodeFrameHeader(data + pos, size - pos, max_payload_, &header_size);
      pos += h.ok() ? header_size : 0;
    } else {
      // Assembled in header_bytes_: the prefix first, which says how long the header is.
      const size_t want = header_fill_ < kFramePrefixSize ? kFramePrefixSize : header_want_;
      size_t n = std::min(size - pos, want - header_fill_);
      std::memcpy(header_bytes_ + header_fill_, data + pos, n);
      header_fill_ += n;
      pos += n;
      if (header_fill_ < want) break;
      if (want == kFramePrefixSize) {
        absl::StatusOr<size_t> full = DecodeFramePrefix(header_bytes_);
        if (!full.ok()) {
          *consumed = pos;
          return full.status();
        }
        header_want_ = *full;
        if (header_fill_ < header_want_) continue;
      }
      h = DecodeFrameHeader(header_bytes_, header_fill_, max_payload_, &header_size);
    }
    if (!h.ok()) {
      *consumed = pos;
      return h.status();
    }
    header_fill_ = 0;  // the header is consumed; in_payload_ marks the frame under way
    header_ = *h;
    plan_ = sink_->OnHeader(header_);
    if (plan_.kind == PayloadPlan::kClose) {
      *consumed = pos;
      return absl::FailedPreconditionError("frame refused by the receiver");
    }
    in_payload_ = true;
    iov_index_ = 0;
    iov_offset_ = 0;
    if (plan_.kind == PayloadPlan::kDiscard) {
      discarding_ = true;
      discard_left_ = header_.payload_len;
      FinishFrameIfDone();
      continue;
    }
    uint64_t total = 0;
    for (int i = 0; i < plan_.iovcnt; ++i) total += plan_.iov[i].iov_len;
    if (plan_.iovcnt < 0 || plan_.iovcnt > rnic::kMaxSge || total != header_.payload_len) {
      *consumed = pos;
      return absl::InternalError(
          absl::StrCat("payload plan covers ", total, " bytes, frame has ", header_.payload_len));
    }
    FinishFrameIfDone();
  }
  *consumed = pos;
  return absl::OkStatus();
}

absl::Span<char> FrameReader::DirectTarget() const {
  if (!in_payload_ || discarding_ || iov_index_ >= plan_.iovcnt) return {};
  const iovec& v = plan_.iov[iov_index_];
  return absl::MakeSpan(static_cast<char*>(v.iov_base) + iov_offset_, v.iov_len - iov_offset_);
}

void FrameReader::AdvanceDirect(size_t n) {
  iov_offset_ += n;
  FinishFrameIfDone();
}

}  // namespace unloadkv::soft
