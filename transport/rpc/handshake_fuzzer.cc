// libFuzzer target for the bootstrap lines a peer sends before it has proved anything
// (handshake.h): decoding never crashes, whatever decodes re-encodes to the same line, and a
// hello verified against an auth table passes only with the proof the table's secret makes.
#include <cstdint>
#include <string>
#include <vector>

#include "transport/rpc/handshake.h"

namespace {

using unloadkv::rpc::AuthTable;

const AuthTable& Table() {
  static const AuthTable* t =
      new AuthTable(*AuthTable::Parse("app client 0123456789abcdef0123", "fuzz"));
  return *t;
}
constexpr char kChallenge[] = "00112233445566778899aabbccddeeff";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace unloadkv::rpc;
  const std::string in(reinterpret_cast<const char*>(data), size);
  if (auto c = DecodeChallenge(in); c.ok() && EncodeChallenge(*c) != in) __builtin_trap();
  if (auto a = DecodeAnswer(in); a.ok() && EncodeAnswer(*a) != in) __builtin_trap();
  if (auto h = DecodeHello(in); h.ok()) {
    if (EncodeHello(*h) != in) __builtin_trap();
    ServerHandshake server(kChallenge);
    if (server.Verify(in, &Table()).ok()) {
      const std::string expected =
          ClientProof("0123456789abcdef0123", h->user, kChallenge, h->nonce, h->info);
      if (h->user != "app" || h->proof != expected) __builtin_trap();
    }
  }
  (void)AuthTable::Parse(in, "fuzz");
  return 0;
}

extern "C" void FuzzSeeds(std::vector<std::string>* seeds) {
  using namespace unloadkv::rpc;
  seeds->push_back(EncodeChallenge(kChallenge));
  ClientHandshake anonymous(nullptr, "transport=soft address=127.0.0.1:1 qp_num=1 psn=2");
  seeds->push_back(*anonymous.HelloFor(EncodeChallenge(kChallenge)));
  static const Credentials creds{"app", "0123456789abcdef0123"};
  ClientHandshake client(&creds, "transport=soft address=127.0.0.1:1 qp_num=1 psn=2");
  seeds->push_back(*client.HelloFor(EncodeChallenge(kChallenge)));
  seeds->push_back("ok - transport=soft address=127.0.0.1:2");
  seeds->push_back("error at the connection limit");
  seeds->push_back("app client 0123456789abcdef0123\n# c\nn1 node 0123456789abcdef0123");
}
