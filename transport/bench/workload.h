// Destination-address generators for write benchmarks. Deterministic for a given seed.
#ifndef UNLOADKV_TRANSPORT_BENCH_WORKLOAD_H_
#define UNLOADKV_TRANSPORT_BENCH_WORKLOAD_H_

#include <cstdint>
#include <random>
#include <string>

#include "absl/status/statusor.h"

namespace unloadkv::bench {

// YCSB's scrambled zipfian: ranks drawn with the Gray et al. method (constant theta), then
// hashed so that popular items scatter over the key space.
class ZipfianGenerator {
 public:
  ZipfianGenerator(uint64_t items, double theta);
  uint64_t NextRank(std::mt19937_64& rng);  // 0 = most popular
  static uint64_t Scramble(uint64_t rank, uint64_t items, uint64_t salt = 0);

 private:
  uint64_t items_;
  double theta_, alpha_, zetan_, eta_, half_pow_theta_;
};

enum class Pattern { kUniform, kZipfian, kHotCold, kPhased };
absl::StatusOr<Pattern> ParsePattern(const std::string& name);
const char* PatternName(Pattern p);

// Offsets (multiples of `write_size`) into a working set of `working_set` bytes.
//  uniform: every slot equally likely.
//  zipfian: scrambled zipfian over the slots, theta 0.99.
//  hotcold: 90% of writes to a hot set of 1024 slots scattered over the working set, 10%
//           uniform.
//  phased:  hotcold whose hot set moves to new slots every `phase_ops` writes.
class AddressStream {
 public:
  AddressStream(Pattern p, uint64_t working_set, uint32_t write_size, uint64_t seed,
                uint64_t phase_ops);
  uint64_t Next();
  int phase() const { return static_cast<int>(issued_ / phase_ops_); }

 private:
  Pattern pattern_;
  uint64_t slots_;
  uint32_t write_size_;
  uint64_t phase_ops_;
  uint64_t issued_ = 0;
  std::mt19937_64 rng_;
  ZipfianGenerator zipf_;
};

// Parses "4096", "64KiB", "16MiB", "4GiB" (also K/M/G, KB/MB/GB as binary units).
absl::StatusOr<uint64_t> ParseBytes(const std::string& text);

}  // namespace unloadkv::bench

#endif  // UNLOADKV_TRANSPORT_BENCH_WORKLOAD_H_
