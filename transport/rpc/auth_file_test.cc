// Auth files: the format, every malformed line refused with its line number (and never the
// secret), roles, and picking a client's credentials.
#include "transport/rpc/auth_file.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace unloadkv::rpc {
namespace {

constexpr char kSecret[] = "0123456789abcdef0123";

TEST(AuthFileTest, ParsesUsersRolesAndComments) {
  absl::StatusOr<AuthTable> t = AuthTable::Parse(
      "# comment\n\napp client 0123456789abcdef0123  # trailing\n"
      "ops\tadmin   ffffffffffffffffffff\r\nn1 node 1111111111111111\n",
      "auth.txt");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->size(), 3u);
  ASSERT_NE(t->Find("app"), nullptr);
  EXPECT_EQ(t->Find("app")->roles, kRoleClient);
  EXPECT_EQ(t->Find("app")->secret, kSecret);
  EXPECT_EQ(t->Find("ops")->roles, kRoleClient | kRoleAdmin);
  EXPECT_EQ(t->Find("n1")->roles, kRoleNode);
  EXPECT_EQ(t->Find("n2"), nullptr);
  EXPECT_EQ(RoleNames(t->Find("ops")->roles), "client+admin");
  EXPECT_EQ(RoleNames(0), "none");
}

TEST(AuthFileTest, RefusesMalformedLinesNamingTheLineNotTheSecret) {
  struct Case {
    const char* text;
    const char* says;
  };
  const Case cases[] = {
      {"app client", "2 fields"},
      {"app client 0123456789abcdef0123 extra", "4 fields"},
      {"a/b client 0123456789abcdef0123", "only letters"},
      {"app root 0123456789abcdef0123", "choose client, admin or node"},
      {"app client short", "must be 16..256"},
      {"app client 0123456789abcdef0123\napp node 0123456789abcdef0124",
       "line 2: user \"app\" appears twice"},
      {"# nothing\n", "names no user"},
      {"app client 0123456789abcdef\x01"
       "0123",
       "not printable"},
  };
  for (const Case& c : cases) {
    absl::Status st = AuthTable::Parse(c.text, "auth.txt").status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_TRUE(absl::StrContains(st.message(), c.says)) << st << " for " << c.text;
    EXPECT_FALSE(absl::StrContains(st.message(), "0123456789abcdef")) << st;
  }
}

TEST(AuthFileTest, CredentialsOfNamedOrOnlyUser) {
  absl::StatusOr<AuthTable> one = AuthTable::Parse("app client 0123456789abcdef0123", "f");
  ASSERT_TRUE(one.ok());
  absl::StatusOr<Credentials> c = one->CredentialsOf("");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->user, "app");
  EXPECT_EQ(c->secret, kSecret);
  absl::StatusOr<AuthTable> two =
      AuthTable::Parse("app client 0123456789abcdef0123\nops admin 0123456789abcdef0123", "f");
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->CredentialsOf("").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(two->CredentialsOf("ops")->user, "ops");
  EXPECT_EQ(two->CredentialsOf("nobody").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace unloadkv::rpc
