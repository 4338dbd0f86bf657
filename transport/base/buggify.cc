#include "transport/base/buggify.h"

#include <mutex>
#include <random>

namespace unloadkv {
namespace buggify_internal {

std::atomic<bool> enabled{false};

namespace {

struct State {
  std::mutex mu;
  std::mt19937_64 rng;
  double fire = 0.25;
  struct Site {
    bool on = false;
    uint64_t fired = 0;
  };
  std::map<std::string, Site> sites;  // by name: decided when first reached
};

State& Get() {
  static State* s = new State();
  return *s;
}

double Draw(State& s) { return std::uniform_real_distribution<double>(0, 1)(s.rng); }

}  // namespace

bool Fire(const char* site) {
  State& s = Get();
  std::lock_guard<std::mutex> l(s.mu);
  if (!enabled.load(std::memory_order_relaxed)) return false;
  auto [it, first] = s.sites.try_emplace(site);
  if (first) it->second.on = Draw(s) < 0.25;
  if (!it->second.on || Draw(s) >= s.fire) return false;
  ++it->second.fired;
  return true;
}

}  // namespace buggify_internal

void EnableBuggify(uint64_t seed, double fire) {
  buggify_internal::State& s = buggify_internal::Get();
  std::lock_guard<std::mutex> l(s.mu);
  s.rng.seed(seed);
  s.fire = fire;
  s.sites.clear();
  buggify_internal::enabled.store(true);
}

void DisableBuggify() {
  buggify_internal::State& s = buggify_internal::Get();
  std::lock_guard<std::mutex> l(s.mu);
  buggify_internal::enabled.store(false);
  s.sites.clear();
}

std::map<std::string, uint64_t> BuggifyFired() {
  buggify_internal::State& s = buggify_internal::Get();
  std::lock_guard<std::mutex> l(s.mu);
  std::map<std::string, uint64_t> out;
  for (const auto& [name, site] : s.sites) {
    if (site.fired > 0) out[name] = site.fired;
  }
  return out;
}

}  // namespace unloadkv
