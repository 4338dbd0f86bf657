#include "transport/rnic/key_source.h"

#include <array>
#include <cstdint>
#include <set>

#include "gtest/gtest.h"

namespace unloadkv::rnic {
namespace {

// Each of the 32 bits is set in about half of `n` keys (a counter or a salted counter fails:
// its high bits barely move), and no key repeats or is 0.
void ExpectSpread(KeySource& source, int n) {
  std::set<uint32_t> seen;
  std::array<int, 32> ones{};
  for (int i = 0; i < n; ++i) {
    const uint32_t k = source.Next([&](uint32_t key) { return seen.count(key) > 0; });
    ASSERT_NE(k, 0u);
    ASSERT_TRUE(seen.insert(k).second);
    for (int b = 0; b < 32; ++b) ones[b] += (k >> b) & 1;
  }
  for (int b = 0; b < 32; ++b) {
    EXPECT_GT(ones[b], n * 45 / 100) << "bit " << b;
    EXPECT_LT(ones[b], n * 55 / 100) << "bit " << b;
  }
}

TEST(KeySourceTest, RandomKeysSpreadOverAll32Bits) {
  KeySource s = KeySource::Random();
  ExpectSpread(s, 20000);
}

TEST(KeySourceTest, SeededKeysSpreadAndReplayFromTheirSeed) {
  KeySource a = KeySource::Seeded(42), b = KeySource::Seeded(42), c = KeySource::Seeded(43);
  auto none = [](uint32_t) { return false; };
  int same_as_other_seed = 0;
  for (int i = 0; i < 100; ++i) {
    const uint32_t ka = a.Next(none);
    EXPECT_EQ(ka, b.Next(none));
    same_as_other_seed += ka == c.Next(none);
  }
  EXPECT_EQ(same_as_other_seed, 0);
  KeySource d = KeySource::Seeded(7);
  ExpectSpread(d, 20000);
}

TEST(KeySourceTest, NextSkipsLiveKeys) {
  KeySource probe = KeySource::Seeded(5), s = KeySource::Seeded(5);
  const uint32_t first = probe.Next([](uint32_t) { return false; });
  EXPECT_NE(s.Next([&](uint32_t k) { return k == first; }), first);
}

}  // namespace
}  // namespace unloadkv::rnic
