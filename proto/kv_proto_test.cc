// The generated protocol code links and round-trips, and a truncated message is refused.
#include "gtest/gtest.h"
#include "proto/kv.pb.h"

namespace unloadkv::proto {
namespace {

TEST(KvProtoTest, RoundTripsAndRejectsTruncatedInput) {
  GrantResponse r;
  SlotGrant* g = r.add_grants();
  g->set_grant_id(7);
  g->set_addr(0x7f0000001000);
  g->set_rkey(0xabc);
  g->set_capacity(4096);
  std::string wire = r.SerializeAsString();
  GrantResponse back;
  ASSERT_TRUE(back.ParseFromString(wire));
  ASSERT_EQ(back.grants_size(), 1);
  EXPECT_EQ(back.grants(0).addr(), 0x7f0000001000u);
  GrantResponse truncated;
  EXPECT_FALSE(truncated.ParseFromString(wire.substr(0, wire.size() - 3)));
  EXPECT_EQ(Method_Name(PUT), "PUT");
}

}  // namespace
}  // namespace unloadkv::proto
