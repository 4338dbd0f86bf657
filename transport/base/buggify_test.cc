#include "transport/base/buggify.h"

#include <vector>

#include "gtest/gtest.h"

namespace unloadkv {
namespace {

// Which of 8 sites fire, pass by pass, over 50 passes.
std::vector<bool> Pattern() {
  std::vector<bool> out;
  static const char* const kSites[] = {"s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7"};
  for (int pass = 0; pass < 50; ++pass) {
    for (const char* site : kSites) out.push_back(UNLOADKV_BUGGIFY(site));
  }
  return out;
}

TEST(BuggifyTest, OffUnlessEnabled) {
  DisableBuggify();
  for (bool fired : Pattern()) EXPECT_FALSE(fired);
  EXPECT_TRUE(BuggifyFired().empty());
}

TEST(BuggifyTest, EnabledSomeSitesFireSometimesTheSameWayForTheSameSeed) {
  EnableBuggify(7, 0.5);
  const std::vector<bool> first = Pattern();
  const std::map<std::string, uint64_t> fired = BuggifyFired();
  EnableBuggify(7, 0.5);
  EXPECT_EQ(Pattern(), first);
  EXPECT_EQ(BuggifyFired(), fired);
  // A site that is on fires about half the time; one that is off never does.
  for (const auto& [site, n] : fired) {
    EXPECT_GT(n, 5u) << site;
    EXPECT_LT(n, 45u) << site;
  }
  // Over many seeds, about a quarter of the sites are on.
  int on = 0;
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    EnableBuggify(seed, 1.0);
    Pattern();
    on += static_cast<int>(BuggifyFired().size());
  }
  EXPECT_GT(on, 50 * 8 / 8);
  EXPECT_LT(on, 50 * 8 / 2);
  DisableBuggify();
  EXPECT_FALSE(UNLOADKV_BUGGIFY("s0"));
}

}  // namespace
}  // namespace unloadkv
