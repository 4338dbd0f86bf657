// Where a device's memory keys come from: 32 unpredictable bits per key.
#ifndef UNLOADKV_TRANSPORT_RNIC_KEY_SOURCE_H_
#define UNLOADKV_TRANSPORT_RNIC_KEY_SOURCE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/functional/function_ref.h"

namespace unloadkv::rnic {

// Draws remote keys. A guessable key lets any peer that can reach a QP write the memory it
// names (ReDMArk, USENIX Security 2021), so keys are not counters:
//  * Random(): OpenSSL's CSPRNG (RAND_bytes), for devices that touch real memory of real peers.
//  * Seeded(seed): HMAC-SHA256 keyed by the seed over a counter, for the simulated fabric,
//    whose runs must replay from their seed. As unpredictable as the seed is secret.
// Not thread-safe: the owner serializes Next.
class KeySource {
 public:
  static KeySource Random();
  static KeySource Seeded(uint64_t seed);
  // Wipes the keys drawn ahead and not handed out.
  ~KeySource();
  KeySource(const KeySource&) = default;
  KeySource& operator=(const KeySource&) = default;

  // A key that is not 0 and for which `live(key)` is false.
  uint32_t Next(absl::FunctionRef<bool(uint32_t)> live);

 private:
  explicit KeySource(std::string seed_key) : seed_key_(std::move(seed_key)) {}
  uint32_t Draw();

  std::string seed_key_;  // empty: RAND_bytes
  uint64_t counter_ = 0;
  // Random(): keys drawn ahead, kAhead per RAND_bytes call (a call costs about the same for
  // 1 KiB as for 4 bytes: 1.2-1.4 us here, which a GRANT of 64 slots paid 64 times).
  static constexpr size_t kAhead = 256;
  std::array<uint32_t, kAhead> ahead_{};
  size_t next_ahead_ = kAhead;
};

}  // namespace unloadkv::rnic

#endif  // UNLOADKV_TRANSPORT_RNIC_KEY_SOURCE_H_
