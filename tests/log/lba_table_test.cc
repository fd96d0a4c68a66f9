// PagedLbaTable and LbaTable: reads match a model; memory follows the runs written.
#include "log/lba_table.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <random>
#include <vector>

#include "log/log_internal.h"
#include "tests/support/seed.h"

namespace eraid {
namespace {

TEST(PagedLbaTableTest, MatchesAModelInBothModes) {
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu\n", (unsigned long long)seed);
  for (bool dense : {false, true}) {
    std::mt19937_64 rng(seed);
    PagedLbaTable<uint64_t> t;
    t.set_dense(dense);
    std::map<uint64_t, uint64_t> model;
    uint64_t size = 0;
    for (int i = 0; i < 200000; ++i) {
      if (rng() % 1000 == 0) {  // grow now and then, as the engine does
        size += rng() % 100000;
        t.resize(size);
      }
      if (size == 0) continue;
      const uint64_t lba = rng() % size;
      switch (rng() % 4) {
        case 0:
          t.ref(lba) = rng() | 1;
          model[lba] = t[lba];
          break;
        case 1:
          t.ref(lba) = 0;
          model.erase(lba);
          break;
        default:
          ASSERT_EQ(t[lba], model.count(lba) ? model[lba] : 0) << "lba " << lba;
      }
    }
    ASSERT_EQ(t.size(), size);
    // The scan visits every entry ever set, in order, with its value.
    uint64_t last = 0, nonzero = 0;
    bool first = true;
    t.ForEachPaged([&](uint64_t lba, uint64_t v) {
      ASSERT_TRUE(first || lba > last);
      first = false;
      last = lba;
      ASSERT_EQ(v, model.count(lba) ? model[lba] : 0);
      nonzero += v != 0;
    });
    EXPECT_EQ(nonzero, model.size());
  }
}

TEST(PagedLbaTableTest, MemoryFollowsTheRunsWritten) {
  // 64 runs of 16 LBAs, one every 1 Mi LBAs of a 64 Mi-LBA space: 64 pages.
  PagedLbaTable<uint64_t> t;
  t.resize(uint64_t{64} << 20);
  for (uint64_t r = 0; r < 64; ++r) {
    for (uint64_t i = 0; i < 16; ++i) t.ref((r << 20) + i) = r + 1;
  }
  EXPECT_EQ(t.pages(), 64u);
  // Pages, plus the directory's extent (4 bytes per 16 LBAs): never the 512 MiB a dense
  // table of the space would take.
  EXPECT_EQ(t.bytes(), 64 * 16 * 8 + (uint64_t{64} << 20) / 16 * 4);
  // Reads allocate nothing.
  uint64_t sum = 0;
  for (uint64_t lba = 0; lba < t.size(); lba += 4099) sum += t[lba];
  EXPECT_EQ(t.pages(), 64u);
  // A run's entries share its page; zeroing keeps it.
  t.ref(5) = 0;
  EXPECT_EQ(t[5], 0u);
  EXPECT_EQ(t[6], 1u);
  EXPECT_EQ(t.pages(), 64u);
  (void)sum;
}

TEST(LbaTableTest, GrowsWithoutLosingEntries) {
  LbaTable<uint32_t> t;
  t.resize(10, 7);
  for (uint64_t i = 0; i < 10; ++i) ASSERT_EQ(t[i], 7u);
  t[3] = 42;
  t.resize(uint64_t{1} << 24);  // mremap: the old entries move with it
  EXPECT_EQ(t[3], 42u);
  EXPECT_EQ(t[9], 7u);
  EXPECT_EQ(t[10], 0u);
  EXPECT_EQ(t[(uint64_t{1} << 24) - 1], 0u);
}

TEST(SlotPositionsTest, RunsGiveEverySlotItsPosition) {
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu\n", (unsigned long long)seed);
  std::mt19937_64 rng(seed);
  log_internal::SlotPositions p;
  std::vector<uint32_t> want;
  uint32_t position = 0;
  for (uint32_t slot = 0; slot < 20000; ++slot) {
    // A summary before this block now and then (every block, at worst: a flush per write).
    if (rng() % 50 == 0) position += 1 + static_cast<uint32_t>(rng() % 2);
    want.push_back(position);
    p.Append(slot, position++);
  }
  for (uint32_t slot = 0; slot < want.size(); ++slot) ASSERT_EQ(p.At(slot), want[slot]);
  EXPECT_LT(p.runs(), want.size() / 25);  // one run per jump, not a position per slot
  // Positions out of order (as a recovery may list them) still read back.
  log_internal::SlotPositions q;
  for (uint32_t slot = 0; slot < 100; ++slot) q.Append(slot, (slot * 37) % 101);
  for (uint32_t slot = 0; slot < 100; ++slot) ASSERT_EQ(q.At(slot), (slot * 37) % 101);
}

}  // namespace
}  // namespace eraid
