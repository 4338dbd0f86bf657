// The measuring loop of the KV benchmarks: a run of PUTs or GETs through the SDK with a fixed
// number in flight, each one's latency recorded.
#ifndef UNLOADKV_TESTS_BENCH_CLIENT_LOAD_H_
#define UNLOADKV_TESTS_BENCH_CLIENT_LOAD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "client/client.h"

namespace unloadkv::bench {

struct LoadResult {
  std::vector<double> us;  // per operation, microseconds, in issue order
  uint64_t errors = 0;
  double seconds = 0;  // wall time of the whole run
};

// Runs `ops` PUTs (of `value`) or GETs on keys "key<n>", n drawn from [0, keys) by a 64-bit LCG
// seeded with *seed (advanced, so consecutive runs continue the sequence). At 1 in flight it
// uses the synchronous API, as a latency-bound application would; above, the async API with
// Client::Wait bounding what is outstanding.
LoadResult RunLoad(Client& c, bool put, int in_flight, uint64_t ops, uint64_t keys,
                   const std::string& value, uint64_t* seed);

}  // namespace unloadkv::bench

#endif  // UNLOADKV_TESTS_BENCH_CLIENT_LOAD_H_
