// Deterministic stand-in for libFuzzer's main, linked when a fuzz target is built without
// clang's -fsanitize=fuzzer (the default gcc build). It runs the target on every file named on
// the command line, then on a fixed number of pseudo-random mutations of a few seed inputs, so
// the test suite exercises each fuzz target on every run. --config=asan makes it a real check.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

// Seeds supplied by the target (optional): valid inputs that mutations start from.
extern "C" __attribute__((weak)) void FuzzSeeds(std::vector<std::string>* seeds);

int main(int argc, char** argv) {
  std::vector<std::string> seeds;
  for (int i = 1; i < argc; ++i) {
    std::ifstream in(argv[i], std::ios::binary);
    seeds.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (FuzzSeeds) FuzzSeeds(&seeds);
  if (seeds.empty()) seeds.push_back(std::string(64, '\0'));
  std::mt19937_64 rng(20261130);
  constexpr int kIterations = 200000;
  for (const std::string& s : seeds) {
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  }
  for (int i = 0; i < kIterations; ++i) {
    std::string in = seeds[rng() % seeds.size()];
    int edits = 1 + rng() % 8;
    for (int e = 0; e < edits; ++e) {
      switch (rng() % 4) {
        case 0:  // flip a byte
          if (!in.empty()) in[rng() % in.size()] ^= static_cast<char>(1 << (rng() % 8));
          break;
        case 1:  // random byte
          if (!in.empty()) in[rng() % in.size()] = static_cast<char>(rng());
          break;
        case 2:  // insert
          in.insert(in.begin() + (in.empty() ? 0 : rng() % in.size()), static_cast<char>(rng()));
          break;
        case 3:  // truncate
          if (!in.empty()) in.resize(rng() % in.size());
          break;
      }
    }
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(in.data()), in.size());
  }
  std::printf("fuzz driver: %zu seeds, %d mutated inputs, no crash\n", seeds.size(), kIterations);
  return 0;
}
