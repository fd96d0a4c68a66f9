// The seed of a randomized test: ERAID_SEED=N replays a run, otherwise a fresh random one.
// Every randomized test prints the seed it used (a failure can then be replayed).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <random>
#include <vector>

namespace eraid {

inline uint64_t TestSeed() {
  if (const char* env = std::getenv("ERAID_SEED")) return std::strtoull(env, nullptr, 10);
  return std::random_device{}();
}

// The seeds of a test that runs many (a crash soak): `count_env` of them (default
// `default_count`), consecutive from a random base; with ERAID_SEED=N only N, so the seed
// a failure printed replays alone.
inline std::vector<uint64_t> TestSeeds(const char* count_env, int default_count) {
  if (const char* env = std::getenv("ERAID_SEED")) return {std::strtoull(env, nullptr, 10)};
  const char* k = std::getenv(count_env);
  const int count = k ? std::atoi(k) : default_count;
  const uint64_t base = std::random_device{}();
  std::vector<uint64_t> seeds;
  for (int i = 0; i < count; ++i) seeds.push_back(base + static_cast<uint64_t>(i));
  return seeds;
}

}  // namespace eraid
