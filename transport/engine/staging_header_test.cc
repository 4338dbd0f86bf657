#include "transport/engine/staging_header.h"

#include <cstring>
#include <functional>
#include <string>

#include "gtest/gtest.h"

namespace unloadkv::engine {
namespace {

std::string Slot(const StagingHeader& h, size_t payload) {
  std::string s(kStagingHeaderSize + payload, 'p');
  EncodeStagingHeader(h, s.data());
  return s;
}

TEST(StagingHeaderTest, RoundTrips) {
  StagingHeader h{100, 42, 0x7f0011223344ull, 0xabcdef01};
  std::string s = Slot(h, 100);
  absl::StatusOr<StagingHeader> p = ParseStagingHeader(s.data(), s.size(), 4096);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->length, 100u);
  EXPECT_EQ(p->sequence, 42u);
  EXPECT_EQ(p->remote_addr, h.remote_addr);
  EXPECT_EQ(p->rkey, h.rkey);
  EXPECT_FALSE(p->wants_credits);
  h.wants_credits = true;
  s = Slot(h, 100);
  p = ParseStagingHeader(s.data(), s.size(), 4096);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->wants_credits);
  EXPECT_EQ(p->sequence, 42u);
}

TEST(StagingHeaderTest, RejectsEachKindOfMalformedHeader) {
  StagingHeader h{16, 1, 4096, 7};
  struct Case {
    const char* mentions;
    std::function<void(std::string&, uint32_t&)> corrupt;
  } cases[] = {
      {"truncated", [](std::string&, uint32_t& n) { n = 31; }},
      {"unknown version", [](std::string& s, uint32_t&) { s[0] = 1; }},
      {"unknown kind", [](std::string& s, uint32_t&) { s[1] = 9; }},
      {"unknown flags", [](std::string& s, uint32_t&) { s[2] = 2; }},
      {"unknown flags", [](std::string& s, uint32_t&) { s[3] = 1; }},
      {"reserved", [](std::string& s, uint32_t&) { s[31] = 1; }},
      {"length mismatch", [](std::string&, uint32_t& n) { n -= 1; }},
      {"exceeds", [](std::string&, uint32_t& n) { n = 5000; }},
  };
  for (const Case& c : cases) {
    std::string s = Slot(h, 16);
    s.resize(8192, 'q');
    uint32_t n = kStagingHeaderSize + 16;
    c.corrupt(s, n);
    absl::StatusOr<StagingHeader> p = ParseStagingHeader(s.data(), n, 4096);
    ASSERT_FALSE(p.ok()) << c.mentions;
    EXPECT_NE(p.status().message().find(c.mentions), absl::string_view::npos) << p.status();
  }
}

}  // namespace
}  // namespace unloadkv::engine
