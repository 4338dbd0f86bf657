#include "transport/rpc/handshake.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstdlib>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace unloadkv::rpc {
namespace {

constexpr absl::string_view kNone = "-";

std::string Hmac(absl::string_view key, absl::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(data.data()), data.size(), out,
           &len) == nullptr) {
    std::abort();  // only on allocation failure inside OpenSSL
  }
  return std::string(reinterpret_cast<const char*>(out), len);
}

bool IsLowerHex(absl::string_view s, size_t digits) {
  if (s.size() != digits) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// Splits off the first blank-separated field of *rest.
absl::string_view NextField(absl::string_view* rest) {
  size_t sp = rest->find(' ');
  absl::string_view field = rest->substr(0, sp);
  rest->remove_prefix(sp == absl::string_view::npos ? rest->size() : sp + 1);
  return field;
}

std::string Prefix(absl::string_view what) {
  return absl::StrCat(kBootstrapProtocol, " ", what, " ");
}

// A peer of another protocol version says so on its first line.
absl::Status VersionMismatch(absl::string_view line, absl::string_view expected) {
  if (absl::StartsWith(line, "unloadkv/")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bootstrap: the peer speaks ", line.substr(0, line.find(' ')), "; this build speaks ",
        kBootstrapProtocol, " (run the same release on both ends)"));
  }
  return absl::InvalidArgumentError(absl::StrCat("bootstrap: expected '", expected,
                                                 "...', not a line of ", line.size(), " bytes"));
}

}  // namespace

std::string NewNonce() {
  unsigned char bytes[kNonceHexDigits / 2];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) std::abort();  // no entropy: nothing is safe
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(bytes), sizeof(bytes)));
}

std::string EncodeChallenge(absl::string_view nonce) {
  return absl::StrCat(Prefix("challenge"), nonce);
}

absl::StatusOr<std::string> DecodeChallenge(absl::string_view line) {
  if (absl::StartsWith(line, "error ")) {
    return absl::FailedPreconditionError(absl::StrCat("server refused: ", line.substr(6)));
  }
  const std::string prefix = Prefix("challenge");
  if (!absl::StartsWith(line, prefix)) return VersionMismatch(line, prefix);
  absl::string_view nonce = line.substr(prefix.size());
  if (!IsLowerHex(nonce, kNonceHexDigits)) {
    return absl::InvalidArgumentError("bootstrap: the challenge is not 32 hex digits");
  }
  return std::string(nonce);
}

std::string EncodeHello(const HelloLine& h) {
  return absl::StrCat(Prefix("hello"), h.user.empty() ? kNone : h.user, " ", h.nonce, " ",
                      h.proof.empty() ? kNone : h.proof, " ", h.info);
}

absl::StatusOr<HelloLine> DecodeHello(absl::string_view line) {
  const std::string prefix = Prefix("hello");
  if (!absl::StartsWith(line, prefix)) return VersionMismatch(line, prefix);
  absl::string_view rest = line.substr(prefix.size());
  HelloLine h;
  absl::string_view user = NextField(&rest);
  if (user != kNone) {
    if (absl::Status st = CheckUserName(user); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("bootstrap: ", st.message()));
    }
    h.user = std::string(user);
  }
  absl::string_view nonce = NextField(&rest);
  if (!IsLowerHex(nonce, kNonceHexDigits)) {
    return absl::InvalidArgumentError("bootstrap: the hello's nonce is not 32 hex digits");
  }
  h.nonce = std::string(nonce);
  absl::string_view proof = NextField(&rest);
  if (proof != kNone) {
    if (!IsLowerHex(proof, kProofHexDigits)) {
      return absl::InvalidArgumentError("bootstrap: the hello's proof is not 64 hex digits");
    }
    h.proof = std::string(proof);
  }
  if (h.user.empty() && !h.proof.empty()) {
    return absl::InvalidArgumentError("bootstrap: a hello with a proof must name its user");
  }
  if (rest.empty())
    return absl::InvalidArgumentError("bootstrap: the hello has no connection info");
  h.info = std::string(rest);
  return h;
}

std::string EncodeAnswer(const AnswerLine& a) {
  if (!a.ok) {
    if (a.code == absl::StatusCode::kFailedPrecondition) return absl::StrCat("error ", a.text);
    return absl::StrCat("error ", absl::StatusCodeToString(a.code), " ", a.text);
  }
  return absl::StrCat("ok ", a.proof.empty() ? kNone : a.proof, " ", a.text);
}

absl::StatusOr<AnswerLine> DecodeAnswer(absl::string_view line) {
  AnswerLine a;
  if (absl::StartsWith(line, "error ")) {
    absl::string_view rest = line.substr(6);
    const absl::string_view first = rest.substr(0, rest.find(' '));
    for (int c = 1; c <= 16; ++c) {  // the canonical codes but OK
      const auto code = static_cast<absl::StatusCode>(c);
      if (code != absl::StatusCode::kFailedPrecondition &&
          first == absl::StatusCodeToString(code) && first.size() < rest.size()) {
        a.code = code;
        rest.remove_prefix(first.size() + 1);
        break;
      }
    }
    a.text = std::string(rest);
    return a;
  }
  if (!absl::StartsWith(line, "ok ")) {
    return absl::InvalidArgumentError("bootstrap: the server's answer is not 'ok' or 'error'");
  }
  absl::string_view rest = line.substr(3);
  absl::string_view proof = NextField(&rest);
  if (proof != kNone) {
    if (!IsLowerHex(proof, kProofHexDigits)) {
      return absl::InvalidArgumentError("bootstrap: the server's proof is not 64 hex digits");
    }
    a.proof = std::string(proof);
  }
  if (rest.empty())
    return absl::InvalidArgumentError("bootstrap: the answer has no connection info");
  a.ok = true;
  a.text = std::string(rest);
  return a;
}

std::string ClientProof(absl::string_view secret, absl::string_view user,
                        absl::string_view challenge, absl::string_view nonce,
                        absl::string_view client_info) {
  return absl::BytesToHexString(
      Hmac(secret, absl::StrCat(kBootstrapProtocol, " client\n", user, "\n", challenge, "\n", nonce,
                                "\n", client_info)));
}

std::string ServerProof(absl::string_view secret, absl::string_view user,
                        absl::string_view challenge, absl::string_view nonce,
                        absl::string_view client_info, absl::string_view server_info) {
  return absl::BytesToHexString(
      Hmac(secret, absl::StrCat(kBootstrapProtocol, " server\n", user, "\n", challenge, "\n", nonce,
                                "\n", client_info, "\n", server_info)));
}

std::string StreamToken(absl::string_view secret, absl::string_view challenge,
                        absl::string_view nonce) {
  return Hmac(secret, absl::StrCat(kBootstrapProtocol, " stream\n", challenge, "\n", nonce))
      .substr(0, kStreamTokenBytes);
}

bool SameSecretBytes(absl::string_view a, absl::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

ClientHandshake::ClientHandshake(const Credentials* credentials, std::string local_info)
    : credentials_(credentials), local_info_(std::move(local_info)) {}

absl::StatusOr<std::string> ClientHandshake::HelloFor(absl::string_view challenge_line) {
  absl::StatusOr<std::string> challenge = DecodeChallenge(challenge_line);
  if (!challenge.ok()) return challenge.status();
  challenge_ = *std::move(challenge);
  hello_ = HelloLine();
  hello_.nonce = NewNonce();
  hello_.info = local_info_;
  if (credentials_ != nullptr) {
    hello_.user = credentials_->user;
    if (!credentials_->secret.empty()) {
      hello_.proof =
          ClientProof(credentials_->secret, hello_.user, challenge_, hello_.nonce, hello_.info);
    }
  }
  return EncodeHello(hello_);
}

absl::StatusOr<Session> ClientHandshake::Finish(absl::string_view answer_line) {
  absl::StatusOr<AnswerLine> a = DecodeAnswer(answer_line);
  if (!a.ok()) return a.status();
  if (!a->ok) return absl::Status(a->code, absl::StrCat("server refused: ", a->text));
  Session s;
  s.remote_info = a->text;
  if (credentials_ != nullptr && !credentials_->secret.empty()) {
    const std::string expected = ServerProof(credentials_->secret, hello_.user, challenge_,
                                             hello_.nonce, hello_.info, a->text);
    if (a->proof.empty() || !SameSecretBytes(a->proof, expected)) {
      return absl::UnauthenticatedError(absl::StrCat(
          "the server did not prove it holds user \"", hello_.user, "\"'s secret",
          a->proof.empty() ? " (it runs without --auth_file?)" : "", "; not connecting"));
    }
    s.token = StreamToken(credentials_->secret, challenge_, hello_.nonce);
  }
  return s;
}

absl::Status ServerHandshake::Verify(absl::string_view hello_line, const AuthTable* table) {
  absl::StatusOr<HelloLine> h = DecodeHello(hello_line);
  if (!h.ok()) return h.status();
  hello_ = *std::move(h);
  if (table == nullptr) {
    roles_ = kAllRoles;
    return absl::OkStatus();
  }
  if (hello_.proof.empty()) {
    return absl::UnauthenticatedError(
        "authentication required: this server has an auth file; give the client one "
        "(--auth_file, UNLOADKV_AUTH_FILE or ClientOptions::auth_file)");
  }
  const AuthUser* user = table->Find(hello_.user);
  // An unknown user costs the same HMAC as a known one and gets the same answer.
  static const std::string* const kNoSecret = new std::string(NewNonce());
  const std::string& secret = user != nullptr ? user->secret : *kNoSecret;
  const std::string expected =
      ClientProof(secret, hello_.user, challenge_, hello_.nonce, hello_.info);
  if (!SameSecretBytes(hello_.proof, expected) || user == nullptr) {
    return absl::UnauthenticatedError(absl::StrCat("authentication failed for user \"", hello_.user,
                                                   "\" (unknown user or wrong secret)"));
  }
  secret_ = user->secret;
  roles_ = user->roles;
  token_ = StreamToken(secret_, challenge_, hello_.nonce);
  return absl::OkStatus();
}

std::string ServerHandshake::Accept(absl::string_view server_info) const {
  AnswerLine a;
  a.ok = true;
  a.text = std::string(server_info);
  if (!secret_.empty()) {
    a.proof = ServerProof(secret_, hello_.user, challenge_, hello_.nonce, hello_.info, server_info);
  }
  return EncodeAnswer(a);
}

}  // namespace unloadkv::rpc
