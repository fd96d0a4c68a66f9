// The seed of a randomized test: ERAID_SEED=N replays a run, otherwise a fresh random one.
// Every randomized test prints the seed it used (a failure can then be replayed).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <random>

namespace eraid {

inline uint64_t TestSeed() {
  if (const char* env = std::getenv("ERAID_SEED")) return std::strtoull(env, nullptr, 10);
  return std::random_device{}();
}

}  // namespace eraid
