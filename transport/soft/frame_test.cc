#include "transport/soft/frame.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "transport/soft/frame_reader.h"

namespace unloadkv::soft {
namespace {

// Frames other than HELLO name QPs 1 and 2 unless the test set others.
std::string Encode(FrameHeader h, const std::string& payload = "") {
  if (h.type != FrameType::kHello && h.qp == 0) {
    h.qp = 1;
    h.src_qp = 2;
  }
  std::string out(kFrameHeaderSize, '\0');
  EncodeFrameHeader(h, out.data());
  return out + payload;
}

TEST(FrameHeaderTest, RoundTripsEveryField) {
  FrameHeader h;
  h.type = FrameType::kWriteWithImm;
  h.payload_len = 1234;
  h.psn = 0xfedcba98;
  h.imm = 0x01020304;
  h.remote_addr = 0x1122334455667788ull;
  h.rkey = 0xdeadbeef;
  h.aux = kAckRequested;
  h.qp = 0x0a0b0c0d;
  h.src_qp = 0x01020304;
  std::string bytes = Encode(h);
  absl::StatusOr<FrameHeader> d = DecodeFrameHeader(bytes.data(), 1 << 20);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->type, h.type);
  EXPECT_EQ(d->payload_len, h.payload_len);
  EXPECT_EQ(d->psn, h.psn);
  EXPECT_EQ(d->imm, h.imm);
  EXPECT_EQ(d->remote_addr, h.remote_addr);
  EXPECT_EQ(d->rkey, h.rkey);
  EXPECT_EQ(d->aux, h.aux);
  EXPECT_EQ(d->qp, h.qp);
  EXPECT_EQ(d->src_qp, h.src_qp);
}

TEST(FrameHeaderTest, RejectsMalformedHeadersNamingTheProblem) {
  FrameHeader ok;
  ok.type = FrameType::kWrite;
  struct Case {
    std::function<void(std::string&)> corrupt;
    const char* mentions;
  } cases[] = {
      {[](std::string& b) { b[0] ^= 1; }, "magic"},
      {[](std::string& b) { b[2] = 9; }, "version"},
      {[](std::string& b) { b[3] = 11; }, "unknown type"},
      {[](std::string& b) { b[3] = 0; }, "unknown type"},
      {[](std::string& b) { b[7] = 0x7f; }, "exceeds the limit"},
      {[](std::string& b) {
         b[3] = 1;
         std::fill(b.begin() + 32, b.end(), 0);
         b[4] = 1;
       },
       "payload_len"},                                      // HELLO with payload
      {[](std::string& b) { b[3] = 1; }, "expected none"},  // HELLO naming QPs
      {[](std::string& b) { std::fill(b.begin() + 32, b.end(), 0); }, "expected two"},
      {[](std::string& b) { b[36] = 0; }, "expected two"},  // no source QP
      {[](std::string& b) {
         b[3] = 9;
         b[4] = 1;
       },
       "payload_len"},  // DISCONNECT with payload
      {[](std::string& b) {
         b[3] = 6;
         b[4] = 1;
       },
       "READ request"},  // READ with payload
      {[](std::string& b) {
         b[3] = 6;
         b[31] = 0x7f;
       },
       "READ length"},
      {[](std::string& b) {
         b[3] = 17;
         b[28] = 0;
       },
       "NAK status"},  // NAK with "success"
      {[](std::string& b) {
         b[3] = 17;
         b[28] = static_cast<char>(rnic::WcStatus::kRnrRetryExceeded);
       },
       "NAK status"},  // RNR is an RNR NAK (type 19), decided by the requester
      {[](std::string& b) { b[28] = 2; }, "unknown request flags"},
  };
  for (const Case& c : cases) {
    std::string bytes = Encode(ok);
    c.corrupt(bytes);
    absl::StatusOr<FrameHeader> d = DecodeFrameHeader(bytes.data(), 1 << 20);
    ASSERT_FALSE(d.ok()) << c.mentions;
    EXPECT_NE(d.status().message().find(c.mentions), absl::string_view::npos) << d.status();
  }
}

// Records frames and places payloads into a buffer; discards frames with rkey 555.
class RecordingSink : public FrameSink {
 public:
  PayloadPlan OnHeader(const FrameHeader& h) override {
    if (h.rkey == 555) {
      PayloadPlan p;
      p.kind = PayloadPlan::kDiscard;
      return p;
    }
    if (h.rkey == 666) {
      PayloadPlan p;
      p.kind = PayloadPlan::kClose;
      return p;
    }
    PayloadPlan p;
    if (h.payload_len > 0) {
      // Split across two buffers to exercise scatter.
      size_t first = h.payload_len / 2;
      p.iov[0] = {dest_ + used_, first};
      p.iov[1] = {dest_ + used_ + first, h.payload_len - first};
      p.iovcnt = 2;
      used_ += h.payload_len;
    }
    return p;
  }
  void OnFrame(const FrameHeader& h) override { frames.push_back(h); }

  std::vector<FrameHeader> frames;
  char dest_[4096] = {};
  size_t used_ = 0;
};

TEST(FrameReaderTest, ReassemblesFramesFedOneByteAtATime) {
  FrameHeader a;
  a.type = FrameType::kWrite;
  a.payload_len = 5;
  FrameHeader b;
  b.type = FrameType::kAck;
  b.psn = 9;
  FrameHeader c;
  c.type = FrameType::kSend;
  c.payload_len = 3;
  std::string stream = Encode(a, "hello") + Encode(b) + Encode(c, "abc");
  RecordingSink sink;
  FrameReader reader(&sink, 1 << 20);
  for (char ch : stream) {
    size_t consumed = 0;
    ASSERT_TRUE(reader.Feed(&ch, 1, &consumed).ok());
    ASSERT_EQ(consumed, 1u);
  }
  ASSERT_EQ(sink.frames.size(), 3u);
  EXPECT_EQ(sink.frames[1].psn, 9u);
  EXPECT_EQ(std::string(sink.dest_, 8), "helloabc");
  EXPECT_TRUE(reader.at_frame_boundary());
}

TEST(FrameReaderTest, DiscardedPayloadsAreSkippedWhole) {
  FrameHeader a;
  a.type = FrameType::kWrite;
  a.rkey = 555;
  a.payload_len = 6;
  FrameHeader b;
  b.type = FrameType::kSend;
  b.payload_len = 4;
  std::string stream = Encode(a, "dropme") + Encode(b, "wxyz");
  for (size_t chunk : {size_t{1}, size_t{7}, stream.size()}) {
    RecordingSink sink;
    FrameReader reader(&sink, 1 << 20);
    for (size_t at = 0; at < stream.size(); at += chunk) {
      size_t n = std::min(chunk, stream.size() - at), consumed = 0;
      ASSERT_TRUE(reader.Feed(stream.data() + at, n, &consumed).ok());
      ASSERT_EQ(consumed, n);
      if (at + n == kFrameHeaderSize) {
        EXPECT_TRUE(reader.DirectTarget().empty()) << "a discarded payload as a direct target";
      }
    }
    ASSERT_EQ(sink.frames.size(), 1u) << "chunk " << chunk;
    EXPECT_EQ(sink.frames[0].type, FrameType::kSend);
    EXPECT_EQ(std::string(sink.dest_, 4), "wxyz");
  }
}

TEST(FrameReaderTest, DiscardRestSkipsWhatIsLeftOfAPlacedPayload) {
  FrameHeader a;
  a.type = FrameType::kWrite;
  a.payload_len = 8;
  FrameHeader b;
  b.type = FrameType::kAck;
  b.psn = 3;
  std::string stream = Encode(a, "abcdefgh") + Encode(b);
  RecordingSink sink;
  FrameReader reader(&sink, 1 << 20);
  size_t consumed = 0;
  ASSERT_TRUE(reader.Feed(stream.data(), kFrameHeaderSize + 3, &consumed).ok());
  reader.DiscardRest();
  EXPECT_TRUE(reader.DirectTarget().empty());
  ASSERT_TRUE(reader.Feed(stream.data() + consumed, stream.size() - consumed, &consumed).ok());
  ASSERT_EQ(sink.frames.size(), 1u) << "the cut-off frame was reported";
  EXPECT_EQ(sink.frames[0].psn, 3u);
  EXPECT_EQ(std::string(sink.dest_, 8), std::string("abc") + std::string(5, '\0'));
  EXPECT_TRUE(reader.at_frame_boundary());
}

TEST(FrameReaderTest, RefusedFrameAndGarbageAreErrors) {
  FrameHeader a;
  a.type = FrameType::kWrite;
  a.rkey = 666;
  RecordingSink sink;
  FrameReader reader(&sink, 1 << 20);
  std::string stream = Encode(a);
  size_t consumed = 0;
  EXPECT_EQ(reader.Feed(stream.data(), stream.size(), &consumed).code(),
            absl::StatusCode::kFailedPrecondition);
  RecordingSink sink2;
  FrameReader reader2(&sink2, 1 << 20);
  std::string garbage(64, 'G');
  EXPECT_EQ(reader2.Feed(garbage.data(), garbage.size(), &consumed).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_TRUE(sink2.frames.empty());
}

TEST(FrameReaderTest, DirectTargetLetsTheCallerPlaceThePayload) {
  FrameHeader a;
  a.type = FrameType::kWrite;
  a.payload_len = 10;
  std::string header = Encode(a);
  RecordingSink sink;
  FrameReader reader(&sink, 1 << 20);
  size_t consumed = 0;
  ASSERT_TRUE(reader.Feed(header.data(), header.size(), &consumed).ok());
  absl::Span<char> t = reader.DirectTarget();
  ASSERT_EQ(t.size(), 5u);  // first of the two scatter buffers
  std::memcpy(t.data(), "01234", 5);
  reader.AdvanceDirect(5);
  t = reader.DirectTarget();
  ASSERT_EQ(t.size(), 5u);
  std::memcpy(t.data(), "56789", 5);
  reader.AdvanceDirect(5);
  ASSERT_EQ(sink.frames.size(), 1u);
  EXPECT_EQ(std::string(sink.dest_, 10), "0123456789");
  EXPECT_TRUE(reader.DirectTarget().empty());
}

}  // namespace
}  // namespace unloadkv::soft
