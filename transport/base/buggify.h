// Fault points that only a simulation switches on (FoundationDB's BUGGIFY): places where a
// rare path (a full window, a starved pool, a write on the other path, a skipped round) is
// taken on purpose, so that seeded simulation runs cover it. Off unless a simulation calls
// EnableBuggify: UNLOADKV_BUGGIFY(site) is then one relaxed atomic load and false.
//
//   if (UNLOADKV_BUGGIFY("replication: window full")) return;  // as if the window were full
//
// Enabled, each site is switched on or off for the run when first reached (on with
// probability 1/4), and a site that is on fires with probability `fire` each time it is
// reached; every draw comes from the seed, in the order the sites are reached, so a
// deterministic simulation stays deterministic. A fault point must only take a path the code
// must handle anyway (never break a contract).
//
// Thread-safety: everything may be called from any thread (draws are serialized; a
// simulation reaches sites in a deterministic order only if it runs one thread at a time).
#ifndef UNLOADKV_TRANSPORT_BASE_BUGGIFY_H_
#define UNLOADKV_TRANSPORT_BASE_BUGGIFY_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <string>

namespace unloadkv {

namespace buggify_internal {
extern std::atomic<bool> enabled;
bool Fire(const char* site);
}  // namespace buggify_internal

// Switches fault points on for this process (sites decide afresh), drawing from `seed`.
void EnableBuggify(uint64_t seed, double fire = 0.25);
void DisableBuggify();
// How many times each site fired since EnableBuggify, by site name.
std::map<std::string, uint64_t> BuggifyFired();

}  // namespace unloadkv

#define UNLOADKV_BUGGIFY(site)                                              \
  (::unloadkv::buggify_internal::enabled.load(std::memory_order_relaxed) && \
   ::unloadkv::buggify_internal::Fire(site))

#endif  // UNLOADKV_TRANSPORT_BASE_BUGGIFY_H_
