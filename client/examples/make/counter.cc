// Counts words into unloadkv: each word of standard input is a key holding its count.
//   counter HOST:PORT < text
// Prints the five most frequent words, read back from the server.
#include <unloadkv/client.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <utility>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: counter HOST:PORT < text\n");
    return 2;
  }
  unloadkv::ClientOptions options;
  options.server = argv[1];
  auto client = unloadkv::Client::Connect(options);
  if (!client.ok()) {
    std::fprintf(stderr, "connect: %s\n", client.status().ToString().c_str());
    return 1;
  }
  unloadkv::Client& kv = **client;
  std::string word;
  int words = 0;
  while (std::cin >> word) {
    const std::string key = "count:" + word;
    absl::StatusOr<std::string> old = kv.Get(key);
    if (!old.ok() && !absl::IsNotFound(old.status())) {
      std::fprintf(stderr, "get: %s\n", old.status().ToString().c_str());
      return 1;
    }
    const long n = old.ok() ? std::stol(*old) + 1 : 1;
    if (absl::Status st = kv.Put(key, std::to_string(n)); !st.ok()) {
      std::fprintf(stderr, "put: %s\n", st.ToString().c_str());
      return 1;
    }
    ++words;
  }
  std::vector<std::pair<long, std::string>> counts;
  std::string start = "count:";
  while (true) {
    auto page = kv.Scan(start, "count;", 100);
    if (!page.ok()) {
      std::fprintf(stderr, "scan: %s\n", page.status().ToString().c_str());
      return 1;
    }
    for (const auto& [key, value] : page->items)
      counts.emplace_back(std::stol(value), key.substr(6));
    if (!page->more) break;
    start = page->items.back().first + std::string(1, '\0');
  }
  std::sort(counts.begin(), counts.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::printf("%d words, %zu distinct\n", words, counts.size());
  for (size_t i = 0; i < counts.size() && i < 5; ++i) {
    std::printf("%6ld %s\n", counts[i].first, counts[i].second.c_str());
  }
  return 0;
}
