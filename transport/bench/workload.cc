#include "transport/bench/workload.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace unloadkv::bench {
namespace {

// sum_{i=1..n} i^-theta: exact for the first million terms, then the Euler-Maclaurin
// integral approximation (relative error far below what the benchmark can resolve).
double Zeta(uint64_t n, double theta) {
  const uint64_t exact = std::min<uint64_t>(n, 1000000);
  double sum = 0;
  for (uint64_t i = 1; i <= exact; ++i) sum += std::pow(static_cast<double>(i), -theta);
  if (n > exact) {
    double a = static_cast<double>(exact) + 0.5, b = static_cast<double>(n) + 0.5;
    sum += (std::pow(b, 1 - theta) - std::pow(a, 1 - theta)) / (1 - theta);
  }
  return sum;
}

uint64_t Fnv64(uint64_t v) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xff;
    h *= 0x100000001B3ull;
  }
  return h;
}

}  // namespace

ZipfianGenerator::ZipfianGenerator(uint64_t items, double theta)
    : items_(std::max<uint64_t>(items, 1)), theta_(theta) {
  alpha_ = 1.0 / (1.0 - theta_);
  zetan_ = Zeta(items_, theta_);
  double zeta2 = Zeta(2, theta_);
  eta_ = (1 - std::pow(2.0 / static_cast<double>(items_), 1 - theta_)) / (1 - zeta2 / zetan_);
  half_pow_theta_ = 1 + std::pow(0.5, theta_);
}

uint64_t ZipfianGenerator::NextRank(std::mt19937_64& rng) {
  double u = std::uniform_real_distribution<double>(0, 1)(rng);
  double uz = u * zetan_;
  if (uz < 1.0) return 0;
  if (uz < half_pow_theta_) return 1;
  uint64_t r =
      static_cast<uint64_t>(static_cast<double>(items_) * std::pow(eta_ * u - eta_ + 1, alpha_));
  return std::min(r, items_ - 1);
}

uint64_t ZipfianGenerator::Scramble(uint64_t rank, uint64_t items, uint64_t salt) {
  return Fnv64(rank ^ (salt * 0x9E3779B97F4A7C15ull)) % items;
}

absl::StatusOr<Pattern> ParsePattern(const std::string& name) {
  if (name == "uniform") return Pattern::kUniform;
  if (name == "zipfian") return Pattern::kZipfian;
  if (name == "hotcold") return Pattern::kHotCold;
  if (name == "phased") return Pattern::kPhased;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown pattern '", name, "': choose uniform, zipfian, hotcold or phased"));
}

const char* PatternName(Pattern p) {
  switch (p) {
    case Pattern::kUniform:
      return "uniform";
    case Pattern::kZipfian:
      return "zipfian";
    case Pattern::kHotCold:
      return "hotcold";
    case Pattern::kPhased:
      return "phased";
  }
  return "?";
}

AddressStream::AddressStream(Pattern p, uint64_t working_set, uint32_t write_size, uint64_t seed,
                             uint64_t phase_ops)
    : pattern_(p),
      slots_(std::max<uint64_t>(1, working_set / write_size)),
      write_size_(write_size),
      phase_ops_(std::max<uint64_t>(1, phase_ops)),
      rng_(seed),
      zipf_(p == Pattern::kZipfian ? slots_ : 2, 0.99) {}

uint64_t AddressStream::Next() {
  uint64_t slot = 0;
  uint64_t phase = issued_ / phase_ops_;
  ++issued_;
  switch (pattern_) {
    case Pattern::kUniform:
      slot = rng_() % slots_;
      break;
    case Pattern::kZipfian:
      slot = ZipfianGenerator::Scramble(zipf_.NextRank(rng_), slots_);
      break;
    case Pattern::kHotCold:
    case Pattern::kPhased: {
      const uint64_t hot = std::min<uint64_t>(1024, slots_);
      uint64_t salt = pattern_ == Pattern::kPhased ? phase + 1 : 1;
      slot = rng_() % 10 < 9 ? ZipfianGenerator::Scramble(rng_() % hot, slots_, salt)
                             : rng_() % slots_;
      break;
    }
  }
  return slot * write_size_;
}

absl::StatusOr<uint64_t> ParseBytes(const std::string& text) {
  std::string t = absl::AsciiStrToLower(text);
  uint64_t mult = 1;
  for (auto [suffix, m] : {std::pair<const char*, uint64_t>{"kib", 1ull << 10},
                           {"mib", 1ull << 20},
                           {"gib", 1ull << 30},
                           {"kb", 1ull << 10},
                           {"mb", 1ull << 20},
                           {"gb", 1ull << 30},
                           {"k", 1ull << 10},
                           {"m", 1ull << 20},
                           {"g", 1ull << 30}}) {
    size_t n = std::string(suffix).size();
    if (t.size() > n && t.compare(t.size() - n, n, suffix) == 0) {
      t.resize(t.size() - n);
      mult = m;
      break;
    }
  }
  uint64_t v;
  if (!absl::SimpleAtoi(t, &v) || v == 0 || v > (uint64_t{1} << 50) / mult) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is not a byte size such as 4096, 64KiB or 4GiB"));
  }
  return v * mult;
}

}  // namespace unloadkv::bench
