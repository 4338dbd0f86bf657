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
  std::string out(kMaxFrameHeaderSize, '\0');
  out.resize(EncodeFrameHeader(h, out.data()));
  return out + payload;
}

absl::StatusOr<FrameHeader> Decode(const std::string& bytes, size_t* size = nullptr) {
  size_t unused;
  return DecodeFrameHeader(bytes.data(), bytes.size(), 1 << 20, size ? size : &unused);
}

// Each type's header size, and which fields it carries (a field it does not carry arrives 0).
struct Layout {
  FrameType type;
  size_t size;
  bool psn, aux, payload, imm, rkey, addr;
};
constexpr Layout kLayouts[] = {
    {FrameType::kHello, 4, false, false, false, false, false, false},
    {FrameType::kWrite, 33, true, true, true, false, true, true},
    {FrameType::kWriteWithImm, 37, true, true, true, true, true, true},
    {FrameType::kSend, 21, true, true, true, false, false, false},
    {FrameType::kSendWithImm, 25, true, true, true, true, false, false},
    {FrameType::kReadRequest, 32, true, true, false, false, true, true},
    {FrameType::kConnect, 32, true, false, false, true, true, true},
    {FrameType::kConnectAck, 12, false, false, false, false, false, false},
    {FrameType::kDisconnect, 12, false, false, false, false, false, false},
    {FrameType::kSendWithInvalidate, 25, true, true, true, false, true, false},
    {FrameType::kAck, 16, true, false, false, false, false, false},
    {FrameType::kNak, 20, true, true, false, false, false, false},
    {FrameType::kReadResponse, 20, true, false, true, false, false, false},
    {FrameType::kRnrNak, 16, true, false, false, false, false, false},
};

TEST(FrameHeaderTest, EachTypeCarriesItsFieldsInAHeaderOfItsSize) {
  for (const Layout& l : kLayouts) {
    FrameHeader h;
    h.type = l.type;
    h.payload_len = 1234;
    h.psn = 0xfedcba98;
    h.imm = 0x01020304;
    h.remote_addr = 0x1122334455667788ull;
    h.rkey = 0xdeadbeef;
    // Within what each type's aux may hold: flags, a READ length, a NAK status.
    h.aux = l.type == FrameType::kNak ? static_cast<uint32_t>(rnic::WcStatus::kRemoteAccessError)
            : l.type == FrameType::kReadRequest ? 4096
                                                : kAckRequested;
    if (l.type != FrameType::kHello) {
      h.qp = 0x0a0b0c0d;
      h.src_qp = 0x01020304;
    }
    EXPECT_EQ(FrameHeaderSize(l.type), l.size) << static_cast<int>(l.type);
    std::string bytes(kMaxFrameHeaderSize, '\0');
    bytes.resize(EncodeFrameHeader(h, bytes.data()));
    ASSERT_EQ(bytes.size(), l.size) << static_cast<int>(l.type);
    size_t size = 0;
    absl::StatusOr<FrameHeader> d = Decode(bytes, &size);
    ASSERT_TRUE(d.ok()) << static_cast<int>(l.type) << ": " << d.status();
    EXPECT_EQ(size, l.size);
    EXPECT_EQ(d->type, h.type);
    EXPECT_EQ(d->qp, h.qp);
    EXPECT_EQ(d->src_qp, h.src_qp);
    EXPECT_EQ(d->psn, l.psn ? h.psn : 0);
    EXPECT_EQ(d->aux, l.aux ? h.aux : 0);
    EXPECT_EQ(d->payload_len, l.payload ? h.payload_len : 0);
    EXPECT_EQ(d->imm, l.imm ? h.imm : 0);
    EXPECT_EQ(d->rkey, l.rkey ? h.rkey : 0);
    EXPECT_EQ(d->remote_addr, l.addr ? h.remote_addr : 0);
    // One byte short is not yet a header: the reader waits for more.
    absl::StatusOr<FrameHeader> cut = Decode(bytes.substr(0, l.size - 1));
    EXPECT_EQ(cut.status().code(), absl::StatusCode::kFailedPrecondition)
        << static_cast<int>(l.type) << ": " << cut.status();
    absl::StatusOr<size_t> prefix = DecodeFramePrefix(bytes.data());
    ASSERT_TRUE(prefix.ok()) << prefix.status();
    EXPECT_EQ(*prefix, l.size);
  }
  EXPECT_EQ(FrameHeaderSize(static_cast<FrameType>(11)), 0u);
  EXPECT_EQ(FrameHeaderSize(static_cast<FrameType>(200)), 0u);
}

// WRITE: prefix 0-3, qp 4-7, src_qp 8-11, psn 12-15, flags 16, payload_len 17-20, rkey 21-24,
// remote_addr 25-32. READ request: ..., psn 12-15, length 16-19. NAK: ..., psn, status 16-19.
TEST(FrameHeaderTest, RejectsMalformedHeadersNamingTheProblem) {
  FrameHeader write;
  write.type = FrameType::kWrite;
  FrameHeader read;
  read.type = FrameType::kReadRequest;
  FrameHeader nak;
  nak.type = FrameType::kNak;
  nak.aux = static_cast<uint32_t>(rnic::WcStatus::kRemoteAccessError);
  struct Case {
    const FrameHeader& base;
    std::function<void(std::string&)> corrupt;
    const char* mentions;
  } cases[] = {
      {write, [](std::string& b) { b[0] ^= 1; }, "magic"},
      {write, [](std::string& b) { b[2] = 5; }, "unsupported version 5"},  // an older peer
      {write, [](std::string& b) { b[3] = 11; }, "unknown type"},
      {write, [](std::string& b) { b[3] = 0; }, "unknown type"},
      {write, [](std::string& b) { b[3] = static_cast<char>(200); }, "unknown type"},
      {write, [](std::string& b) { b[20] = 0x7f; }, "exceeds the limit"},
      {write, [](std::string& b) { std::fill(b.begin() + 4, b.begin() + 12, 0); }, "nonzero"},
      {write, [](std::string& b) { std::fill(b.begin() + 8, b.begin() + 12, 0); }, "nonzero"},
      {write, [](std::string& b) { b[16] = 2; }, "unknown request flags"},
      {read, [](std::string& b) { b[19] = 0x7f; }, "READ length"},
      {nak, [](std::string& b) { b[16] = 0; }, "NAK status"},  // NAK with "success"
      {nak, [](std::string& b) { b[16] = static_cast<char>(rnic::WcStatus::kRnrRetryExceeded); },
       "NAK status"},  // RNR is an RNR NAK (type 19), decided by the requester
      {nak, [](std::string& b) { b[19] = 1; }, "NAK status"},
  };
  for (const Case& c : cases) {
    std::string bytes = Encode(c.base);
    c.corrupt(bytes);
    absl::StatusOr<FrameHeader> d = Decode(bytes);
    ASSERT_FALSE(d.ok()) << c.mentions;
    EXPECT_EQ(d.status().code(), absl::StatusCode::kDataLoss) << d.status();
    EXPECT_NE(d.status().message().find(c.mentions), absl::string_view::npos) << d.status();
  }
  // A HELLO is its prefix alone; the bytes after it are the next frame's.
  FrameHeader hello;
  hello.type = FrameType::kHello;
  size_t size = 0;
  absl::StatusOr<FrameHeader> d = Decode(Encode(hello) + Encode(write), &size);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(size, kFramePrefixSize);
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

// Frames of every header size, fed in chunks of every size from one byte to the whole stream:
// the same frames and payloads each time (the reader decodes a header in place when the bytes
// fed hold it whole, and assembles it otherwise).
TEST(FrameReaderTest, EverySplitOfAStreamGivesTheSameFrames) {
  FrameHeader hello;
  hello.type = FrameType::kHello;
  FrameHeader w;
  w.type = FrameType::kWriteWithImm;
  w.payload_len = 5;
  w.imm = 77;
  w.psn = 1;
  FrameHeader ack;
  ack.type = FrameType::kAck;
  ack.psn = 9;
  FrameHeader send;
  send.type = FrameType::kSend;
  send.payload_len = 3;
  send.psn = 2;
  send.aux = kAckRequested;
  FrameHeader resp;
  resp.type = FrameType::kReadResponse;
  resp.payload_len = 4;
  resp.psn = 3;
  const std::string stream = Encode(hello) + Encode(w, "hello") + Encode(ack) +
                             Encode(send, "abc") + Encode(ack) + Encode(resp, "wxyz");
  for (size_t chunk = 1; chunk <= stream.size(); ++chunk) {
    RecordingSink sink;
    FrameReader reader(&sink, 1 << 20);
    for (size_t at = 0; at < stream.size(); at += chunk) {
      const size_t n = std::min(chunk, stream.size() - at);
      size_t consumed = 0;
      ASSERT_TRUE(reader.Feed(stream.data() + at, n, &consumed).ok()) << "chunk " << chunk;
      ASSERT_EQ(consumed, n);
    }
    ASSERT_EQ(sink.frames.size(), 6u) << "chunk " << chunk;
    EXPECT_EQ(sink.frames[0].type, FrameType::kHello);
    EXPECT_EQ(sink.frames[1].imm, 77u);
    EXPECT_EQ(sink.frames[2].psn, 9u);
    EXPECT_EQ(sink.frames[3].aux, kAckRequested);
    EXPECT_EQ(sink.frames[5].type, FrameType::kReadResponse);
    EXPECT_EQ(std::string(sink.dest_, 12), "helloabcwxyz") << "chunk " << chunk;
    EXPECT_TRUE(reader.at_frame_boundary());
  }
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
      if (at + n == FrameHeaderSize(FrameType::kWrite)) {
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
  ASSERT_TRUE(reader.Feed(stream.data(), FrameHeaderSize(FrameType::kWrite) + 3, &consumed).ok());
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
