// The authenticated bootstrap exchange (protocol "unloadkv/2"): a challenge-response over a
// shared secret in which each end proves it holds the user's secret, bound to both ends'
// nonces and to the connection details each sends, so that a replayed or spliced line fails.
// Three lines over one bootstrap connection, each at most kMaxBootstrapLine bytes:
//
//   server -> client  "unloadkv/2 challenge <SN>"                  on accept
//   client -> server  "unloadkv/2 hello <USER> <CN> <CP> <CINFO>"
//   server -> client  "ok <SP> <SINFO>"  or  "error [CODE] <message>"
//
// SN and CN are 16-byte random nonces (32 hex digits, OpenSSL's RAND_bytes), fresh per
// connection. USER is the user's name and CP the client's proof; SP the server's proof. With
// K the user's secret, HMAC-SHA256 (OpenSSL) in hex:
//   CP = HMAC(K, "unloadkv/2 client\n" USER "\n" SN "\n" CN "\n" CINFO)
//   SP = HMAC(K, "unloadkv/2 server\n" USER "\n" SN "\n" CN "\n" CINFO "\n" SINFO)
// and both ends derive the stream token that binds the connection's data path to this
// exchange (the soft RNIC's CONNECT carries it; docs/wire-soft.md):
//   token = first 16 bytes of HMAC(K, "unloadkv/2 stream\n" SN "\n" CN)
// Without credentials USER, CP and SP are "-" (a client may name USER without a secret, and
// so without CP: a node of an --insecure cluster names itself so). A server without an auth
// file admits anyone with every role, under the name it claims (protected mode: loopback
// only, docs/security.md); a server with one refuses a hello without a proof. A client with
// credentials accepts only an answer whose SP verifies, so it knows it reached a server that holds
// its secret.
//
// Nothing here does I/O: bootstrap.h moves the lines over TCP, an embedded server (a
// simulation) hands them over in memory. Thread-compatible.
#ifndef UNLOADKV_TRANSPORT_RPC_HANDSHAKE_H_
#define UNLOADKV_TRANSPORT_RPC_HANDSHAKE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "transport/rpc/auth_file.h"

namespace unloadkv::rpc {

inline constexpr absl::string_view kBootstrapProtocol = "unloadkv/2";
inline constexpr size_t kNonceHexDigits = 32;
inline constexpr size_t kProofHexDigits = 64;
inline constexpr size_t kStreamTokenBytes = 16;

// A fresh nonce from OpenSSL's CSPRNG, as 32 lowercase hex digits.
std::string NewNonce();

// ---- the three lines, as codecs (fuzzed by handshake_fuzzer) ----
std::string EncodeChallenge(absl::string_view nonce);
// The nonce of a challenge line; InvalidArgument naming what is wrong (an "unloadkv/1"
// server's line, say).
absl::StatusOr<std::string> DecodeChallenge(absl::string_view line);

struct HelloLine {
  std::string user;   // "" when the client names no user
  std::string nonce;  // CN
  std::string proof;  // CP; "" without credentials
  std::string info;   // CINFO: the client's connection details (opaque here)
};
std::string EncodeHello(const HelloLine& hello);
absl::StatusOr<HelloLine> DecodeHello(absl::string_view line);

struct AnswerLine {
  bool ok = false;
  std::string proof;  // SP; "" when the server does not authenticate
  std::string text;   // ok: SINFO; error: the server's message
  // error: the refusal's canonical code, sent as its name before the message
  // ("error UNAUTHENTICATED authentication failed ..."); a line without one (the acceptor's
  // own refusals) reads as FAILED_PRECONDITION.
  absl::StatusCode code = absl::StatusCode::kFailedPrecondition;
};
std::string EncodeAnswer(const AnswerLine& answer);
absl::StatusOr<AnswerLine> DecodeAnswer(absl::string_view line);

// ---- the two ends ----

// What a client learns from a completed exchange.
struct Session {
  std::string remote_info;  // the server's connection details
  std::string token;        // the stream token (kStreamTokenBytes), "" without credentials
};

// Thread-compatible; one per exchange.
class ClientHandshake {
 public:
  // `credentials` (nullable: none; an empty secret: claim the user's name, prove nothing)
  // must outlive the handshake. `local_info` is what the client sends as CINFO.
  ClientHandshake(const Credentials* credentials, std::string local_info);
  // The hello line answering the server's challenge line.
  absl::StatusOr<std::string> HelloFor(absl::string_view challenge_line);
  // Checks the server's answer: its info and the stream token; for a refusal, the code the
  // server gave (FailedPrecondition when none) with "server refused: <its message>";
  // Unauthenticated when the client has credentials and the server's proof is absent or wrong
  // (not the server it meant to reach).
  absl::StatusOr<Session> Finish(absl::string_view answer_line);

 private:
  const Credentials* credentials_;
  std::string local_info_;
  std::string challenge_;
  HelloLine hello_;
};

// Thread-compatible; one per bootstrap connection.
class ServerHandshake {
 public:
  // `challenge_nonce`: the SN sent in this connection's challenge line.
  explicit ServerHandshake(std::string challenge_nonce) : challenge_(std::move(challenge_nonce)) {}
  // Checks the client's hello line against `table` (nullptr: no authentication; the user is
  // whatever the client claims and holds every role). Unauthenticated, with one message for
  // an unknown user and a wrong secret, when the proof fails or is missing; InvalidArgument
  // for a malformed line.
  absl::Status Verify(absl::string_view hello_line, const AuthTable* table);
  // After a successful Verify:
  const std::string& user() const { return hello_.user; }
  uint32_t roles() const { return roles_; }
  const std::string& client_info() const { return hello_.info; }
  const std::string& token() const { return token_; }  // "" without authentication
  // The "ok" line carrying `server_info` and, when the client authenticated, this server's
  // proof.
  std::string Accept(absl::string_view server_info) const;

 private:
  std::string challenge_;
  HelloLine hello_;
  std::string secret_;  // the verified user's; "" without authentication
  uint32_t roles_ = 0;
  std::string token_;
};

// The proofs and the token, for tests and for the two ends above.
std::string ClientProof(absl::string_view secret, absl::string_view user,
                        absl::string_view challenge, absl::string_view nonce,
                        absl::string_view client_info);
std::string ServerProof(absl::string_view secret, absl::string_view user,
                        absl::string_view challenge, absl::string_view nonce,
                        absl::string_view client_info, absl::string_view server_info);
std::string StreamToken(absl::string_view secret, absl::string_view challenge,
                        absl::string_view nonce);
// Compares two proofs in time that does not depend on where they differ (CRYPTO_memcmp).
bool SameSecretBytes(absl::string_view a, absl::string_view b);

}  // namespace unloadkv::rpc

#endif  // UNLOADKV_TRANSPORT_RPC_HANDSHAKE_H_
