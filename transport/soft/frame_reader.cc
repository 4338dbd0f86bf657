#include "transport/soft/frame_reader.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace unloadkv::soft {

void FrameReader::FinishFrameIfDone() {
  while (iov_index_ < plan_.iovcnt && plan_.iov[iov_index_].iov_len == iov_offset_) {
    ++iov_index_;
    iov_offset_ = 0;
  }
  if (iov_index_ < plan_.iovcnt) return;
  in_payload_ = false;
  have_header_ = false;
  header_fill_ = 0;
  sink_->OnFrame(header_);
}

absl::Status FrameReader::Feed(const char* data, size_t size, size_t* consumed) {
  size_t pos = 0;
  *consumed = 0;
  while (!stalled_) {
    if (in_payload_) {
      if (pos == size) break;
      iovec& v = plan_.iov[iov_index_];
      size_t n = std::min(size - pos, v.iov_len - iov_offset_);
      std::memcpy(static_cast<char*>(v.iov_base) + iov_offset_, data + pos, n);
      iov_offset_ += n;
      pos += n;
      FinishFrameIfDone();
      continue;
    }
    if (!have_header_) {
      if (pos == size) break;
      size_t n = std::min(size - pos, kFrameHeaderSize - header_fill_);
      std::memcpy(header_bytes_ + header_fill_, data + pos, n);
      header_fill_ += n;
      pos += n;
      if (header_fill_ < kFrameHeaderSize) break;
      absl::StatusOr<FrameHeader> h = DecodeFrameHeader(header_bytes_, max_payload_);
      if (!h.ok()) {
        *consumed = pos;
        return h.status();
      }
      header_ = *h;
      have_header_ = true;
    }
    plan_ = sink_->OnHeader(header_);
    if (plan_.kind == PayloadPlan::kStall) {
      stalled_ = true;
      break;
    }
    if (plan_.kind == PayloadPlan::kClose) {
      *consumed = pos;
      return absl::FailedPreconditionError("frame refused by the receiver");
    }
    uint64_t total = 0;
    for (int i = 0; i < plan_.iovcnt; ++i) total += plan_.iov[i].iov_len;
    if (plan_.iovcnt < 0 || plan_.iovcnt > rnic::kMaxSge || total != header_.payload_len) {
      *consumed = pos;
      return absl::InternalError(
          absl::StrCat("payload plan covers ", total, " bytes, frame has ", header_.payload_len));
    }
    in_payload_ = true;
    iov_index_ = 0;
    iov_offset_ = 0;
    FinishFrameIfDone();
  }
  *consumed = pos;
  return absl::OkStatus();
}

absl::Span<char> FrameReader::DirectTarget() const {
  if (!in_payload_ || stalled_ || iov_index_ >= plan_.iovcnt) return {};
  const iovec& v = plan_.iov[iov_index_];
  return absl::MakeSpan(static_cast<char*>(v.iov_base) + iov_offset_, v.iov_len - iov_offset_);
}

void FrameReader::AdvanceDirect(size_t n) {
  iov_offset_ += n;
  FinishFrameIfDone();
}

}  // namespace unloadkv::soft
