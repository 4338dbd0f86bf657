// The number generators of YCSB's core workload, with YCSB's definitions, so that a workload
// here draws keys with the same distributions as YCSB does:
//   zipfian      Gray et al.'s "Quickly generating billion-record synthetic databases"
//                algorithm (YCSB ZipfianGenerator), constant 0.99 by default
//   scrambled    zipfian popularity, scattered over the key space by FNV-64 (YCSB's
//                requestdistribution=zipfian)
//   latest       the most recently inserted keys are the most popular (YCSB SkewedLatest)
//   hotspot      a hot fraction of the keys gets a hot fraction of the operations
//   uniform
// Thread-compatible: one generator per client thread, except AcknowledgedCounter (shared).
#ifndef UNLOADKV_CLIENT_YCSB_GENERATORS_H_
#define UNLOADKV_CLIENT_YCSB_GENERATORS_H_

#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "transport/base/mutex.h"

namespace unloadkv::ycsb {

inline constexpr double kZipfianConstant = 0.99;

uint64_t FnvHash64(uint64_t v);

using Rng = std::mt19937_64;
double NextDouble(Rng& rng);  // uniform in [0, 1)

class Zipfian {
 public:
  // Items in [min, max]; popularity rank 0 is `min`.
  Zipfian(uint64_t min, uint64_t max, double theta = kZipfianConstant);
  // Same, with zeta(items) given (YCSB precomputes it for huge item counts).
  Zipfian(uint64_t min, uint64_t max, double theta, double zetan);
  uint64_t Next(Rng& rng);
  // Draws over [min, min + items) for a grown item count (zeta extended incrementally).
  uint64_t Next(Rng& rng, uint64_t items);
  static double Zeta(uint64_t from, uint64_t to, double theta, double initial);

 private:
  void Grow(uint64_t items);
  uint64_t base_, items_;
  double theta_, zeta2_, alpha_, zetan_, eta_;
};

class ScrambledZipfian {
 public:
  ScrambledZipfian(uint64_t min, uint64_t max, double theta = kZipfianConstant);
  uint64_t Next(Rng& rng);

 private:
  uint64_t min_, items_;
  Zipfian zipf_;
};

// Hands out insert sequence numbers and tracks which inserts have completed; Limit() is the
// highest number below which every insert completed, so readers never pick a key that is
// still being inserted (YCSB AcknowledgedCounterGenerator). Thread-safe.
class AcknowledgedCounter {
 public:
  explicit AcknowledgedCounter(uint64_t start) : next_(start), limit_(start) {}
  uint64_t Next();
  void Acknowledge(uint64_t v);
  uint64_t Limit();  // exclusive

 private:
  Mutex mu_;
  uint64_t next_ ABSL_GUARDED_BY(mu_);
  uint64_t limit_ ABSL_GUARDED_BY(mu_);
  std::set<uint64_t> done_ ABSL_GUARDED_BY(mu_);
};

// Recent keys are popular: Limit()-1 - zipfian(0 .. Limit()-1).
class SkewedLatest {
 public:
  explicit SkewedLatest(AcknowledgedCounter* counter);
  uint64_t Next(Rng& rng);

 private:
  AcknowledgedCounter* counter_;
  Zipfian zipf_;
};

class Hotspot {
 public:
  Hotspot(uint64_t min, uint64_t max, double hot_set_fraction, double hot_op_fraction);
  uint64_t Next(Rng& rng);

 private:
  uint64_t min_, hot_items_, cold_items_;
  double hot_op_fraction_;
};

// Picks an index by weights (the operation mix).
class Discrete {
 public:
  void Add(double weight, int value);
  int Next(Rng& rng) const;
  bool empty() const { return total_ <= 0; }

 private:
  std::vector<std::pair<double, int>> choices_;
  double total_ = 0;
};

}  // namespace unloadkv::ycsb

#endif  // UNLOADKV_CLIENT_YCSB_GENERATORS_H_
