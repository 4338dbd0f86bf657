#include "client/ycsb/generators.h"

#include <cmath>

namespace unloadkv::ycsb {

uint64_t FnvHash64(uint64_t v) {
  // YCSB's Utils.fnvhash64: FNV-1 over the value's 8 bytes, low byte first.
  uint64_t h = 0xCBF29CE484222325ull;
  for (int i = 0; i < 8; ++i) {
    h ^= v & 0xff;
    h *= 1099511628211ull;
    v >>= 8;
  }
  return h;
}

double NextDouble(Rng& rng) { return (rng() >> 11) * (1.0 / 9007199254740992.0); }

double Zipfian::Zeta(uint64_t from, uint64_t to, double theta, double initial) {
  double sum = initial;
  for (uint64_t i = from; i < to; ++i) sum += 1.0 / std::pow(static_cast<double>(i + 1), theta);
  return sum;
}

Zipfian::Zipfian(uint64_t min, uint64_t max, double theta)
    : Zipfian(min, max, theta, Zeta(0, max - min + 1, theta, 0)) {}

Zipfian::Zipfian(uint64_t min, uint64_t max, double theta, double zetan)
    : base_(min), items_(max - min + 1), theta_(theta), zetan_(zetan) {
  zeta2_ = Zeta(0, 2, theta, 0);
  alpha_ = 1.0 / (1.0 - theta);
  eta_ = (1 - std::pow(2.0 / items_, 1 - theta)) / (1 - zeta2_ / zetan_);
}

void Zipfian::Grow(uint64_t items) {
  if (items == items_) return;
  if (items > items_) {
    zetan_ = Zeta(items_, items, theta_, zetan_);
  } else {
    zetan_ = Zeta(0, items, theta_, 0);
  }
  items_ = items;
  eta_ = (1 - std::pow(2.0 / items_, 1 - theta_)) / (1 - zeta2_ / zetan_);
}

uint64_t Zipfian::Next(Rng& rng) { return Next(rng, items_); }

uint64_t Zipfian::Next(Rng& rng, uint64_t items) {
  Grow(items);
  const double u = NextDouble(rng);
  const double uz = u * zetan_;
  if (uz < 1.0) return base_;
  if (uz < 1.0 + std::pow(0.5, theta_)) return base_ + 1;
  uint64_t r = base_ + static_cast<uint64_t>(items_ * std::pow(eta_ * u - eta_ + 1, alpha_));
  return std::min(r, base_ + items_ - 1);
}

// YCSB draws the popularity rank from 10^10 items with zeta precomputed for 0.99, then hashes.
namespace {
constexpr uint64_t kScrambledItems = 10000000000ull;
constexpr double kScrambledZetan = 26.46902820178302;
}  // namespace

ScrambledZipfian::ScrambledZipfian(uint64_t min, uint64_t max, double theta)
    : min_(min),
      items_(max - min + 1),
      zipf_(0, kScrambledItems - 1, theta,
            theta == kZipfianConstant ? kScrambledZetan
                                      : Zipfian::Zeta(0, max - min + 1, theta, 0)) {}

uint64_t ScrambledZipfian::Next(Rng& rng) { return min_ + FnvHash64(zipf_.Next(rng)) % items_; }

uint64_t AcknowledgedCounter::Next() {
  MutexLock l(&mu_);
  return next_++;
}

void AcknowledgedCounter::Acknowledge(uint64_t v) {
  MutexLock l(&mu_);
  done_.insert(v);
  while (!done_.empty() && *done_.begin() == limit_) {
    done_.erase(done_.begin());
    ++limit_;
  }
}

uint64_t AcknowledgedCounter::Limit() {
  MutexLock l(&mu_);
  return limit_;
}

SkewedLatest::SkewedLatest(AcknowledgedCounter* counter)
    : counter_(counter), zipf_(0, std::max<uint64_t>(1, counter->Limit()) - 1) {}

uint64_t SkewedLatest::Next(Rng& rng) {
  const uint64_t limit = std::max<uint64_t>(1, counter_->Limit());
  return limit - 1 - zipf_.Next(rng, limit);
}

Hotspot::Hotspot(uint64_t min, uint64_t max, double hot_set_fraction, double hot_op_fraction)
    : min_(min), hot_op_fraction_(hot_op_fraction) {
  const uint64_t items = max - min + 1;
  hot_items_ = std::max<uint64_t>(1, static_cast<uint64_t>(items * hot_set_fraction));
  cold_items_ = items - std::min(items, hot_items_);
}

uint64_t Hotspot::Next(Rng& rng) {
  if (cold_items_ == 0 || NextDouble(rng) < hot_op_fraction_) return min_ + rng() % hot_items_;
  return min_ + hot_items_ + rng() % cold_items_;
}

void Discrete::Add(double weight, int value) {
  if (weight <= 0) return;
  choices_.emplace_back(weight, value);
  total_ += weight;
}

int Discrete::Next(Rng& rng) const {
  double x = NextDouble(rng) * total_;
  for (const auto& [w, v] : choices_) {
    if (x < w) return v;
    x -= w;
  }
  return choices_.back().second;
}

}  // namespace unloadkv::ycsb
