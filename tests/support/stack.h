// The tests' device stacks, built one way: memory devices behind fault injectors (for the
// array, crash and fault tests), compressing drives over memory flash (for the tests that
// need real compression), and an elastic array over either with the tests' small geometry.
// A test that needs something else builds it itself and says why.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "common/clock.h"
#include "compress/compressed_drive.h"
#include "compress/faulty_backend.h"
#include "compress/mem_backend.h"
#include "raid/array.h"

namespace eraid {

// Memory devices, each behind a fault injector; with `one_power_domain`, all in one power
// domain (a power cut then reaches every device at the same operation). Replacement
// devices come from Add() and live as long as the set. Test rigs derive from it, so a
// test names `rig.faulty[d]` (to inject), `rig.devs` (the array's devices) and
// `rig.media[d]` (the bytes underneath).
struct FaultyDevices {
  uint64_t device_blocks;
  bool one_power_domain;
  PowerDomain power;
  std::vector<std::unique_ptr<MemBackend>> media;
  std::vector<std::unique_ptr<FaultyBackend>> faulty;  // every device made, spares included
  std::vector<Backend*> devs;                          // the array's, in its order

  explicit FaultyDevices(uint32_t n, uint64_t blocks = 4096, bool in_one_power_domain = false)
      : device_blocks(blocks), one_power_domain(in_one_power_domain) {
    for (uint32_t d = 0; d < n; ++d) devs.push_back(Add());
  }
  FaultyDevices(const FaultyDevices&) = delete;
  FaultyDevices& operator=(const FaultyDevices&) = delete;
  // A fresh device, not placed in `devs` (a spare, for Replace).
  FaultyBackend* Add() {
    media.push_back(std::make_unique<MemBackend>(device_blocks));
    faulty.push_back(std::make_unique<FaultyBackend>(*media.back()));
    if (one_power_domain) faulty.back()->JoinPowerDomain(&power);
    return faulty.back().get();
  }
  // Every device loses what it had not made durable, and comes back: each device's loss
  // drawn with the seed `next_seed()` gives it (one seed for all: CrashAndRestart(seed)).
  template <typename NextSeed>
  void CrashAndRestartWith(NextSeed&& next_seed) {
    for (auto& f : faulty) {
      if (!f->crashed()) f->Crash(next_seed());
    }
    power.Disarm();
    for (auto& f : faulty) f->Restart();
  }
  void CrashAndRestart(uint64_t seed) {
    CrashAndRestartWith([seed] { return seed; });
  }
};

// Compressing drives, each formatted over its own memory flash.
struct CompressedDrives {
  std::vector<std::unique_ptr<MemBackend>> flash;
  std::vector<std::unique_ptr<CompressedDrive>> drives;
  std::vector<Backend*> devs;

  CompressedDrives(uint32_t n, uint64_t flash_blocks, const DriveOptions& o) {
    for (uint32_t d = 0; d < n; ++d) {
      flash.push_back(std::make_unique<MemBackend>(flash_blocks));
      auto drive = CompressedDrive::Format(*flash.back(), o);
      EXPECT_TRUE(drive.ok()) << drive.status().ToString();
      drives.push_back(std::move(drive).value());
      devs.push_back(drives.back().get());
    }
  }
};

// An elastic array over `devs` (chunk and slot in blocks: the tests' small geometry by
// default); a failed create fails the test and returns null.
inline std::unique_ptr<ElasticArray> MakeArray(const std::vector<Backend*>& devs,
                                               uint32_t chunk_blocks = 4,
                                               uint32_t rows_per_slot = 4,
                                               const Clock& clock = SystemClock::Default()) {
  ArrayOptions o;
  o.chunk_blocks = chunk_blocks;
  o.rows_per_slot = rows_per_slot;
  auto a = ElasticArray::Create(devs, o, clock);
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  return a.ok() ? std::move(a).value() : nullptr;
}

}  // namespace eraid
