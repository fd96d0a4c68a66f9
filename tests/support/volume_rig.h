// A volume over an elastic array of fault-injecting memory devices, and a model of what each
// LBA may read back: shared by the volume tests and the reliability suite.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "log/log_volume.h"
#include "log/named_volumes.h"
#include "tests/support/stack.h"

namespace eraid {

using Block = std::vector<std::byte>;

// A volume over an array of devices in one power domain (by default of 4096 blocks; chunk
// 4 blocks, 4 rows per slot).
struct Rig : FaultyDevices {
  std::unique_ptr<ElasticArray> array;
  std::unique_ptr<LogVolume> volume;
  VolumeOptions options;

  explicit Rig(const std::string& placement, uint32_t devices = 4,
               GcTrigger gc_when = GcTrigger::kFreeSpace, uint64_t device_blocks = 4096,
               uint32_t chunk_blocks = 4, uint32_t rows_per_slot = 4,
               uint32_t gc_frees_per_flush = 0, bool named_volumes = false)
      : FaultyDevices(devices, device_blocks, /*in_one_power_domain=*/true) {
    options.placement = placement;
    if (named_volumes) NamedVolumes::SetOptions(&options);
    options.gc_frees_per_flush = gc_frees_per_flush;
    options.gc_when = gc_when;
    array = MakeArray(devs, chunk_blocks, rows_per_slot);
    auto v = LogVolume::Create(*array, options);
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    volume = std::move(v).value();
  }
  void PowerCutAndReopen(uint64_t seed) {
    volume.reset();
    array.reset();
    CrashAndRestart(seed);
    auto a = ElasticArray::Open(devs);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    array = std::move(a).value();
    Status inv = array->CheckInvariants();
    ASSERT_TRUE(inv.ok()) << "array after recovery: " << inv.ToString();
    auto v = LogVolume::Open(*array, options);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    volume = std::move(v).value();
  }
};

// What each block may read back: its value at the last completed flush, or any value it
// was given after it.
struct Model {
  std::map<uint64_t, Block> durable;
  std::map<uint64_t, std::vector<Block>> since;
  void Wrote(uint64_t lba, Block b) { since[lba].push_back(std::move(b)); }
  void Flushed() {
    for (auto& [lba, values] : since) durable[lba] = values.back();
    since.clear();
  }
  Block Latest(uint64_t lba) const {
    if (auto it = since.find(lba); it != since.end()) return it->second.back();
    if (auto it = durable.find(lba); it != durable.end()) return it->second;
    return Block(kBlockSize);
  }
  bool Allowed(uint64_t lba, const Block& got) const {
    auto d = durable.find(lba);
    if (got == (d == durable.end() ? Block(kBlockSize) : d->second)) return true;
    auto s = since.find(lba);
    return s != since.end() &&
           std::find(s->second.begin(), s->second.end(), got) != s->second.end();
  }
  void Settle(uint64_t lba, Block got) {
    since.erase(lba);
    durable[lba] = std::move(got);
  }
};

}  // namespace eraid
