// The authenticated bootstrap exchange without sockets: both ends agree on the token, each
// refuses the other's forgeries, a replayed or spliced hello fails, and a server without an
// auth file admits an anonymous client with every role.
#include "transport/rpc/handshake.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace unloadkv::rpc {
namespace {

AuthTable Table() {
  return *AuthTable::Parse("app client 0123456789abcdef0123\nn1 node aaaaaaaaaaaaaaaaaaaaaaaa\n",
                           "test");
}
const Credentials kApp{"app", "0123456789abcdef0123"};

TEST(HandshakeTest, BothEndsProveTheSecretAndAgreeOnTheToken) {
  const AuthTable table = Table();
  const std::string sn = NewNonce();
  ServerHandshake server(sn);
  ClientHandshake client(&kApp, "client-info a=1");
  absl::StatusOr<std::string> hello = client.HelloFor(EncodeChallenge(sn));
  ASSERT_TRUE(hello.ok()) << hello.status();
  ASSERT_TRUE(server.Verify(*hello, &table).ok());
  EXPECT_EQ(server.user(), "app");
  EXPECT_EQ(server.roles(), kRoleClient);
  EXPECT_EQ(server.client_info(), "client-info a=1");
  EXPECT_EQ(server.token().size(), kStreamTokenBytes);
  absl::StatusOr<Session> s = client.Finish(server.Accept("server-info b=2"));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->remote_info, "server-info b=2");
  EXPECT_EQ(s->token, server.token());
}

TEST(HandshakeTest, WrongSecretAndUnknownUserFailAlike) {
  const AuthTable table = Table();
  for (const Credentials& bad : {Credentials{"app", "wrong-secret-0123456789"},
                                 Credentials{"eve", "0123456789abcdef0123"}}) {
    const std::string sn = NewNonce();
    ServerHandshake server(sn);
    ClientHandshake client(&bad, "info");
    absl::Status st = server.Verify(*client.HelloFor(EncodeChallenge(sn)), &table);
    EXPECT_EQ(st.code(), absl::StatusCode::kUnauthenticated);
    EXPECT_TRUE(absl::StrContains(st.message(), "unknown user or wrong secret")) << st;
  }
}

TEST(HandshakeTest, AHelloWithoutCredentialsIsRefusedByAServerWithAnAuthFile) {
  const AuthTable table = Table();
  const std::string sn = NewNonce();
  ServerHandshake server(sn);
  ClientHandshake client(nullptr, "info");
  absl::Status st = server.Verify(*client.HelloFor(EncodeChallenge(sn)), &table);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(absl::StrContains(st.message(), "auth_file")) << st;
}

TEST(HandshakeTest, AReplayedHelloFailsAgainstAFreshChallenge) {
  const AuthTable table = Table();
  const std::string first = NewNonce();
  ClientHandshake client(&kApp, "info");
  const std::string hello = *client.HelloFor(EncodeChallenge(first));
  ServerHandshake once(first);
  ASSERT_TRUE(once.Verify(hello, &table).ok());
  ServerHandshake replayed(NewNonce());
  EXPECT_EQ(replayed.Verify(hello, &table).code(), absl::StatusCode::kUnauthenticated);
}

TEST(HandshakeTest, ASplicedHelloFails) {
  // An on-path attacker keeps the proof and swaps the connection details for its own.
  const AuthTable table = Table();
  const std::string sn = NewNonce();
  ClientHandshake client(&kApp, "transport=soft address=10.0.0.1:1");
  HelloLine h = *DecodeHello(*client.HelloFor(EncodeChallenge(sn)));
  h.info = "transport=soft address=10.6.6.6:1";
  ServerHandshake server(sn);
  EXPECT_EQ(server.Verify(EncodeHello(h), &table).code(), absl::StatusCode::kUnauthenticated);
}

TEST(HandshakeTest, TheClientRefusesAServerThatCannotProveTheSecret) {
  const std::string sn = NewNonce();
  ClientHandshake client(&kApp, "info");
  const std::string hello = *client.HelloFor(EncodeChallenge(sn));
  // A server without the auth file answers without a proof.
  ServerHandshake open(sn);
  ASSERT_TRUE(open.Verify(hello, nullptr).ok());
  absl::Status st = client.Finish(open.Accept("S")).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(absl::StrContains(st.message(), "without --auth_file")) << st;
  // An impostor with another secret, or one that swaps the server info after the proof.
  const AuthTable other = *AuthTable::Parse("app client ffffffffffffffffffff", "x");
  ServerHandshake impostor(sn);
  ASSERT_FALSE(impostor.Verify(hello, &other).ok());
  const AuthTable table = Table();
  ServerHandshake real(sn);
  ASSERT_TRUE(real.Verify(hello, &table).ok());
  AnswerLine a = *DecodeAnswer(real.Accept("S"));
  a.text = "S2";
  EXPECT_EQ(client.Finish(EncodeAnswer(a)).status().code(), absl::StatusCode::kUnauthenticated);
}

TEST(HandshakeTest, ANameWithoutASecretIsTakenAsClaimedOnlyWithoutAnAuthFile) {
  const Credentials named{"n1", ""};
  const std::string sn = NewNonce();
  ClientHandshake client(&named, "info");
  const std::string hello = *client.HelloFor(EncodeChallenge(sn));
  const AuthTable table = Table();
  ServerHandshake strict(sn);
  EXPECT_EQ(strict.Verify(hello, &table).code(), absl::StatusCode::kUnauthenticated);
  ServerHandshake open(sn);
  ASSERT_TRUE(open.Verify(hello, nullptr).ok());
  EXPECT_EQ(open.user(), "n1");
  EXPECT_TRUE(client.Finish(open.Accept("S")).ok());
}

TEST(HandshakeTest, WithoutAnAuthFileAnyoneIsAdmittedWithEveryRoleAndNoToken) {
  const std::string sn = NewNonce();
  ServerHandshake server(sn);
  ClientHandshake client(nullptr, "info");
  ASSERT_TRUE(server.Verify(*client.HelloFor(EncodeChallenge(sn)), nullptr).ok());
  EXPECT_EQ(server.roles(), kAllRoles);
  EXPECT_EQ(server.user(), "");
  absl::StatusOr<Session> s = client.Finish(server.Accept("S"));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->token, "");
}

TEST(HandshakeTest, LinesOfAnotherVersionOrShapeAreClearErrors) {
  absl::Status v1 = DecodeHello("unloadkv/1 transport=soft").status();
  EXPECT_TRUE(absl::StrContains(v1.message(), "speaks unloadkv/1")) << v1;
  EXPECT_FALSE(DecodeChallenge("unloadkv/2 challenge 12").ok());
  EXPECT_EQ(DecodeChallenge("error busy").status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string n(kNonceHexDigits, 'a');
  EXPECT_TRUE(DecodeHello("unloadkv/2 hello app " + n + " - info").ok());  // named, unproved
  EXPECT_FALSE(DecodeHello("unloadkv/2 hello - " + n + " " + std::string(64, 'a') + " x").ok());
  EXPECT_FALSE(DecodeHello("unloadkv/2 hello - " + n + " -").ok());  // no info
  EXPECT_FALSE(DecodeHello("unloadkv/2 hello - " + n.substr(1) + "G - x").ok());
  EXPECT_FALSE(DecodeAnswer("ok - ").ok());
  EXPECT_FALSE(DecodeAnswer("yes").ok());
  AnswerLine e = *DecodeAnswer("error no room");
  EXPECT_FALSE(e.ok);
  EXPECT_EQ(e.text, "no room");
  EXPECT_EQ(e.code, absl::StatusCode::kFailedPrecondition);
  // A refusal carries its code; the client returns it.
  AnswerLine limit;
  limit.code = absl::StatusCode::kResourceExhausted;
  limit.text = "at the connection limit";
  EXPECT_EQ(EncodeAnswer(limit), "error RESOURCE_EXHAUSTED at the connection limit");
  AnswerLine back = *DecodeAnswer(EncodeAnswer(limit));
  EXPECT_EQ(back.code, absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(back.text, "at the connection limit");
  ClientHandshake client(nullptr, "info");
  ASSERT_TRUE(client.HelloFor(EncodeChallenge(NewNonce())).ok());
  absl::Status refused = client.Finish(EncodeAnswer(limit)).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.message(), "server refused: at the connection limit");
}

}  // namespace
}  // namespace unloadkv::rpc
