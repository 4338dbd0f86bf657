#include "tests/bench/client_load.h"

#include <atomic>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace unloadkv::bench {

LoadResult RunLoad(Client& c, bool put, int in_flight, uint64_t ops, uint64_t keys,
                   const std::string& value, uint64_t* seed) {
  auto next_key = [seed, keys] {
    *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
    return absl::StrCat("key", (*seed >> 33) % keys);
  };
  LoadResult r;
  r.us.resize(ops);
  const absl::Time start = absl::Now();
  if (in_flight == 1) {
    for (uint64_t i = 0; i < ops; ++i) {
      const std::string key = next_key();
      const absl::Time t0 = absl::Now();
      const bool ok = put ? c.Put(key, value).ok() : c.Get(key).ok();
      r.us[i] = absl::ToDoubleMicroseconds(absl::Now() - t0);
      r.errors += !ok;
    }
  } else {
    std::atomic<uint64_t> done{0}, errors{0};
    for (uint64_t i = 0; i < ops; ++i) {
      // Bounds requests in flight; drives the connection when caller_progress is set.
      c.Wait([&] { return i - done.load() < static_cast<uint64_t>(in_flight); });
      const std::string key = next_key();
      const absl::Time t0 = absl::Now();
      auto finish = [&r, &done, &errors, i, t0](bool ok) {
        r.us[i] = absl::ToDoubleMicroseconds(absl::Now() - t0);
        if (!ok) ++errors;
        ++done;
      };
      if (put) {
        c.PutAsync(key, value, [finish](absl::StatusOr<uint64_t> v) { finish(v.ok()); });
      } else {
        c.GetAsync(key, [finish](absl::StatusOr<std::string> v) { finish(v.ok()); });
      }
    }
    c.Wait([&] { return done.load() == ops; });
    r.errors = errors.load();
  }
  r.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return r;
}

}  // namespace unloadkv::bench
