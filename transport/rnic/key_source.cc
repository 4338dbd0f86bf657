#include "transport/rnic/key_source.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstdlib>
#include <cstring>

#include "transport/base/logging.h"

namespace unloadkv::rnic {

KeySource KeySource::Random() { return KeySource(std::string()); }

KeySource KeySource::Seeded(uint64_t seed) {
  std::string key(sizeof(seed), '\0');
  std::memcpy(key.data(), &seed, sizeof(seed));
  return KeySource(key);
}

KeySource::~KeySource() { OPENSSL_cleanse(ahead_.data(), sizeof(ahead_)); }

uint32_t KeySource::Draw() {
  uint32_t v = 0;
  if (seed_key_.empty()) {
    if (next_ahead_ == kAhead) {
      if (RAND_bytes(reinterpret_cast<unsigned char*>(ahead_.data()), sizeof(ahead_)) != 1) {
        // No key is better than a guessable one.
        Log(LogLevel::kError, "RAND_bytes failed: cannot draw a memory key");
        std::abort();
      }
      next_ahead_ = 0;
    }
    v = ahead_[next_ahead_];
    ahead_[next_ahead_++] = 0;  // handed out once
    return v;
  }
  unsigned char counter[sizeof(counter_)];
  std::memcpy(counter, &counter_, sizeof(counter_));
  ++counter_;
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_len = 0;
  HMAC(EVP_sha256(), seed_key_.data(), static_cast<int>(seed_key_.size()), counter, sizeof(counter),
       mac, &mac_len);
  std::memcpy(&v, mac, sizeof(v));
  return v;
}

uint32_t KeySource::Next(absl::FunctionRef<bool(uint32_t)> live) {
  for (;;) {
    const uint32_t key = Draw();
    if (key != 0 && !live(key)) return key;
  }
}

}  // namespace unloadkv::rnic
