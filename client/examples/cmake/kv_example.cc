// Put, get, scan and an async batch through the installed SDK (docs/sdk.md).
//   kv_example HOST:PORT
#include <unloadkv/client.h>

#include <atomic>
#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: kv_example HOST:PORT\n");
    return 2;
  }
  std::printf("unloadkv %s (headers %s)\n", unloadkv::Version(), UNLOADKV_VERSION);
  unloadkv::ClientOptions options;
  options.server = argv[1];
  absl::StatusOr<std::unique_ptr<unloadkv::Client>> client = unloadkv::Client::Connect(options);
  if (!client.ok()) {
    std::fprintf(stderr, "connect: %s\n", client.status().ToString().c_str());
    return 1;
  }
  unloadkv::Client& kv = **client;

  if (absl::Status st = kv.Put("example:greeting", "hello"); !st.ok()) {
    std::fprintf(stderr, "put: %s\n", st.ToString().c_str());
    return 1;
  }
  absl::StatusOr<std::string> v = kv.Get("example:greeting");
  if (!v.ok() || *v != "hello") {
    std::fprintf(stderr, "get: %s\n", v.ok() ? v->c_str() : v.status().ToString().c_str());
    return 1;
  }
  std::printf("get example:greeting -> %s\n", v->c_str());
  if (absl::StatusOr<std::string> none = kv.Get("example:absent");
      !absl::IsNotFound(none.status())) {
    std::fprintf(stderr, "get of an absent key: want NotFound\n");
    return 1;
  }

  // An async batch: 100 puts posted together, then waited for.
  constexpr int kPuts = 100;
  std::atomic<int> done{0};
  std::atomic<int> failed{0};
  {
    unloadkv::Client::Batch batch = kv.BeginBatch();
    for (int i = 0; i < kPuts; ++i) {
      char key[32];
      std::snprintf(key, sizeof(key), "example:item:%03d", i);
      kv.PutAsync(key, std::string(i + 1, 'x'), [&](absl::StatusOr<uint64_t> version) {
        if (!version.ok()) failed.fetch_add(1);
        done.fetch_add(1);
      });
    }
  }
  kv.Wait([&] { return done.load() == kPuts; });
  if (failed.load() != 0) {
    std::fprintf(stderr, "async batch: %d of %d puts failed\n", failed.load(), kPuts);
    return 1;
  }
  std::printf("async batch: %d puts\n", kPuts);

  // Scan the batch back, page by page.
  int scanned = 0;
  std::string start = "example:item:";
  while (true) {
    absl::StatusOr<unloadkv::ScanPage> page = kv.Scan(start, "example:item;", 30);
    if (!page.ok()) {
      std::fprintf(stderr, "scan: %s\n", page.status().ToString().c_str());
      return 1;
    }
    for (const auto& [key, value] : page->items) {
      if (value.size() != static_cast<size_t>(scanned + 1)) {
        std::fprintf(stderr, "scan: %s holds %zu bytes\n", key.c_str(), value.size());
        return 1;
      }
      ++scanned;
    }
    if (!page->more) break;
    start = page->items.back().first + std::string(1, '\0');
  }
  std::printf("scan example:item: -> %d keys in order\n", scanned);
  absl::StatusOr<unloadkv::ServerStats> stats = kv.Stats();
  if (!stats.ok()) return 1;
  std::printf("server holds %llu keys\n", static_cast<unsigned long long>(stats->keys));
  return scanned == kPuts ? 0 : 1;
}
