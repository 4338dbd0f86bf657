// Dial-back and advertised addresses: a client cannot make a server dial another host, and a
// wildcard listen address is never advertised.
#include "transport/backends/peer_address.h"

#include "gtest/gtest.h"

namespace unloadkv::backends {
namespace {

TEST(PeerAddressTest, DialsBackOnlyTheHostTheConnectionCameFrom) {
  rnic::QpAttributes same{"soft", "127.0.0.1:4000", 3, 9};
  absl::StatusOr<rnic::QpAttributes> ok = DialBackAttributes(same, "127.0.0.1");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, same);

  rnic::QpAttributes wildcard{"soft", "0.0.0.0:4000", 3, 9};
  ok = DialBackAttributes(wildcard, "127.0.0.5");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->address, "127.0.0.5:4000");

  rnic::QpAttributes elsewhere{"soft", "10.255.255.1:9", 3, 9};
  absl::StatusOr<rnic::QpAttributes> no = DialBackAttributes(elsewhere, "127.0.0.1");
  EXPECT_EQ(no.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(no.status().message().find("10.255.255.1:9"), absl::string_view::npos);

  rnic::QpAttributes loopback_alias{"soft", "127.0.0.2:4000", 3, 9};
  EXPECT_FALSE(DialBackAttributes(loopback_alias, "127.0.0.1").ok());
  EXPECT_EQ(DialBackAttributes({"soft", "no-port", 1, 1}, "127.0.0.1").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PeerAddressTest, VerbsAddressesPassThrough) {
  rnic::QpAttributes v{"verbs", "1/fe80::1", 3, 9};
  EXPECT_EQ(*DialBackAttributes(v, "127.0.0.1"), v);
  EXPECT_EQ(AdvertisedAttributes(v, "127.0.0.1"), v);
}

TEST(PeerAddressTest, AdvertisesTheAddressThePeerReachedNotTheWildcard) {
  EXPECT_EQ(AdvertisedAttributes({"soft", "0.0.0.0:5000", 1, 2}, "192.0.2.7").address,
            "192.0.2.7:5000");
  EXPECT_EQ(AdvertisedAttributes({"soft", "127.0.0.1:5000", 1, 2}, "192.0.2.7").address,
            "127.0.0.1:5000");
}

}  // namespace
}  // namespace unloadkv::backends
