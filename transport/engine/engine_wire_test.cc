// The message header and ack codecs: round trips at every lane count, the exact byte layout the
// wire depends on, and the refusals (short input, bad lane counts, unknown ack statuses).
#include "transport/engine/engine_wire.h"

#include <cstring>
#include <string>

#include "gtest/gtest.h"

namespace unloadkv::engine {
namespace {

TEST(EngineWireTest, MessageHeadersRoundTripAtEveryLaneCount) {
  for (int lanes = 1; lanes <= kMaxLanes; ++lanes) {
    MessageHeader h;
    h.messages_seen = 0x0102030405060708ull;
    h.credits_returned = 77;
    h.wants_credits = lanes % 2 == 0;
    for (int k = 0; k < lanes; ++k) h.lane_writes[k] = 1000u * k + 0xfffffff0u;
    std::string buf(MessageHeaderBytes(lanes), '\xee');
    EncodeMessageHeader(h, lanes, buf.data());
    absl::StatusOr<MessageHeader> back =
        ParseMessageHeader(buf.data(), static_cast<uint32_t>(buf.size()) + 5, lanes);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->messages_seen, h.messages_seen);
    EXPECT_EQ(back->credits_returned, 77u);
    EXPECT_EQ(back->wants_credits, lanes % 2 == 0);
    for (int k = 0; k < lanes; ++k) EXPECT_EQ(back->lane_writes[k], h.lane_writes[k]);
    for (int k = lanes; k < kMaxLanes; ++k) EXPECT_EQ(back->lane_writes[k], 0u);
  }
}

TEST(EngineWireTest, LayoutIsLittleEndianAtFixedOffsets) {
  MessageHeader h;
  h.messages_seen = 1;
  h.credits_returned = 2;
  h.lane_writes[0] = 3;
  h.lane_writes[1] = 4;
  char buf[20];
  EncodeMessageHeader(h, 2, buf);
  const char want[20] = {1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0};
  EXPECT_EQ(std::memcmp(buf, want, sizeof(want)), 0);
  h.wants_credits = true;  // the credits word's top bit
  EncodeMessageHeader(h, 2, buf);
  EXPECT_EQ(static_cast<uint8_t>(buf[11]), 0x80);
  EXPECT_EQ(buf[8], 2);
  char ack[kAckBytes];
  EncodeAck({5, 9, rnic::WcStatus::kRemoteAccessError, 6}, ack);
  EXPECT_EQ(ack[0], 5);
  EXPECT_EQ(ack[8], 9);
  EXPECT_EQ(static_cast<uint8_t>(ack[16]),
            static_cast<uint8_t>(rnic::WcStatus::kRemoteAccessError));
  EXPECT_EQ(ack[20], 6);
  absl::StatusOr<AckPayload> parsed = ParseAck(ack, kAckBytes);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->applied, 5u);
  EXPECT_EQ(parsed->limit, 9u);
  EXPECT_EQ(parsed->credits, 6u);
}

TEST(EngineWireTest, ShortOrMalformedInputIsRefused) {
  char buf[64] = {};
  EXPECT_EQ(ParseMessageHeader(buf, 11, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseMessageHeader(buf, 19, 2).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ParseMessageHeader(buf, 16, 1).ok());
  EXPECT_FALSE(ParseMessageHeader(buf, 64, 0).ok());
  EXPECT_FALSE(ParseMessageHeader(buf, 64, kMaxLanes + 1).ok());
  EXPECT_FALSE(ParseAck(buf, kAckBytes - 1).ok());
  EXPECT_FALSE(ParseAck(buf, kAckBytes + 1).ok());
  EXPECT_TRUE(ParseAck(buf, kAckBytes).ok());
}

TEST(EngineWireTest, AnUnknownAckStatusReadsAsARefusal) {
  char buf[kAckBytes];
  for (rnic::WcStatus st : {rnic::WcStatus::kSuccess, rnic::WcStatus::kRemoteAccessError,
                            rnic::WcStatus::kRemoteInvalidRequest}) {
    EncodeAck({9, 10, st, 1}, buf);
    EXPECT_EQ(ParseAck(buf, kAckBytes)->status, st);
  }
  EncodeAck({9, 10, rnic::WcStatus::kFlushed, 1}, buf);
  EXPECT_EQ(ParseAck(buf, kAckBytes)->status, rnic::WcStatus::kRemoteInvalidRequest);
  buf[8] = 0x7f;
  EXPECT_EQ(ParseAck(buf, kAckBytes)->status, rnic::WcStatus::kRemoteInvalidRequest);
}

}  // namespace
}  // namespace unloadkv::engine
