#include "transport/soft/frame.h"

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "transport/soft/frame_reader.h"

namespace unloadkv::soft {
namespace {

std::string Encode(const FrameHeader& h, const std::string& payload = "") {
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
      {[](std::string& b) { b[3] = 7; }, "unknown type"},
      {[](std::string& b) { b[3] = 0; }, "unknown type"},
      {[](std::string& b) { b[7] = 0x7f; }, "exceeds the limit"},
      {[](std::string& b) {
         b[3] = 1;
         b[4] = 1;
       },
       "payload_len"},  // HELLO with payload
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

// Records frames and places payloads into a buffer; can be told to stall once.
class RecordingSink : public FrameSink {
 public:
  PayloadPlan OnHeader(const FrameHeader& h) override {
    if (stall_next_) {
      stall_next_ = false;
      PayloadPlan p;
      p.kind = PayloadPlan::kStall;
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
  bool stall_next_ = false;
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

TEST(FrameReaderTest, StallKeepsTheFrameUntilResumed) {
  FrameHeader a;
  a.type = FrameType::kSend;
  a.payload_len = 4;
  std::string stream = Encode(a, "wxyz");
  RecordingSink sink;
  sink.stall_next_ = true;
  FrameReader reader(&sink, 1 << 20);
  size_t consumed = 0;
  ASSERT_TRUE(reader.Feed(stream.data(), stream.size(), &consumed).ok());
  EXPECT_TRUE(reader.stalled());
  EXPECT_EQ(consumed, kFrameHeaderSize) << "payload must stay unconsumed while stalled";
  EXPECT_TRUE(sink.frames.empty());
  reader.Resume();
  size_t more = 0;
  ASSERT_TRUE(reader.Feed(stream.data() + consumed, stream.size() - consumed, &more).ok());
  EXPECT_EQ(consumed + more, stream.size());
  ASSERT_EQ(sink.frames.size(), 1u);
  EXPECT_EQ(std::string(sink.dest_, 4), "wxyz");
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
