// SepBIT's class decisions on hand-made sequences, and the paper's Figure-2 ideal
// placement (future knowledge: GC never rewrites).
#include "log/placement.h"

#include <gtest/gtest.h>

#include <deque>
#include <limits>
#include <optional>
#include <random>
#include <set>

#include "log/log_engine.h"
#include "tests/support/seed.h"

namespace eraid {
namespace {

PlacementContext At(uint64_t now, uint64_t valid = 1'000'000) { return {now, now, valid, 128}; }

TEST(SepBitTest, UserWritesBeforeLifespanIsKnown) {
  auto p = std::move(MakePlacement("sepbit")).value();
  EXPECT_EQ(p->classes(), 6u);
  EXPECT_EQ(p->UserWrite(8, At(1)), 1u) << "a first write invalidates nothing: class 2";
  EXPECT_EQ(p->UserWrite(7, At(2)), 1u);
  EXPECT_EQ(p->UserWrite(9, At(3)), 1u);
  EXPECT_EQ(p->UserWrite(7, At(4)), 0u)
      << "l is infinite: a rewrite within the FIFO's span is class 1";
  // The reference's boundary: the distance must be strictly below min(l, FIFO length), so
  // rewriting the FIFO's oldest entry (distance == length) is long-lived.
  EXPECT_EQ(p->UserWrite(8, At(5)), 1u);
  EXPECT_EQ(p->GcWrite(7, 3, 0, At(4)), 2u) << "GC rewrite of a class-1 block: class 3";
  EXPECT_EQ(p->GcWrite(8, 2, 1, At(4)), 3u) << "l infinite: every other GC rewrite is class 4";
}

TEST(SepBitTest, LifespanThresholdFromSixteenClassOneSegments) {
  auto p = std::move(MakePlacement("sepbit")).value();
  // Sixteen collected class-1 segments, opened 100 user writes before collection: l = 100.
  for (int i = 0; i < 15; ++i) p->SegmentCollected(0, 900, At(1000));
  p->SegmentCollected(1, 0, At(1000));  // other classes do not count
  EXPECT_EQ(p->stats().lifespan_threshold, 0.0) << "still infinite after 15";
  p->SegmentCollected(0, 900, At(1000));
  EXPECT_DOUBLE_EQ(p->stats().lifespan_threshold, 100.0);
  // GC rewrites by age since the last user write: [0,400) [400,1600) [1600,inf).
  EXPECT_EQ(p->GcWrite(1, 5000 - 399, 1, At(5000)), 3u);
  EXPECT_EQ(p->GcWrite(1, 5000 - 400, 2, At(5000)), 4u);
  EXPECT_EQ(p->GcWrite(1, 5000 - 1599, 3, At(5000)), 4u);
  EXPECT_EQ(p->GcWrite(1, 5000 - 1600, 4, At(5000)), 5u);
  EXPECT_EQ(p->GcWrite(1, 0, 5, At(5000)), 5u);
  EXPECT_EQ(p->GcWrite(1, 0, 0, At(5000)), 2u) << "from class 1 always class 3";
}

TEST(SepBitTest, ShortAndLongLivedUserWritesAndTheFifoBound) {
  auto p = std::move(MakePlacement("sepbit")).value();
  for (int i = 0; i < 16; ++i) p->SegmentCollected(0, 0, At(50));  // l = 50
  uint64_t now = 100;
  EXPECT_EQ(p->UserWrite(0, At(++now)), 1u);
  EXPECT_EQ(p->UserWrite(1, At(++now)), 1u);
  for (uint64_t lba = 100; lba < 130; ++lba) p->UserWrite(lba, At(++now));
  EXPECT_EQ(p->UserWrite(1, At(++now)), 0u) << "rewritten 31 writes later (< l = 50): short-lived";
  for (uint64_t lba = 200; lba < 260; ++lba) p->UserWrite(lba, At(++now));
  EXPECT_EQ(p->UserWrite(1, At(++now)), 1u) << "rewritten 61 writes later (>= l): long-lived";
  EXPECT_EQ(p->UserWrite(0, At(++now)), 1u) << "long gone from the FIFO";
  EXPECT_LE(p->stats().fifo_length, 50u) << "the FIFO holds at most l entries";
  EXPECT_LE(p->stats().fifo_unique_lbas, 50u);
  // The FIFO is also bounded by the valid blocks of the log.
  auto q = std::move(MakePlacement("sepbit")).value();
  for (uint64_t i = 1; i <= 100; ++i) q->UserWrite(i, At(i, 10));
  EXPECT_LE(q->stats().fifo_length, 11u);
}

// SepBIT keeps only each LBA's last write time and the FIFO's length for its decisions:
// against the paper's FIFO itself (a deque of writes, bounded by min(valid blocks, l),
// with l a real number that changes as segments are collected), every class, the FIFO's
// length and (a replay's, which counts them) its unique LBAs agree, and GC classes agree
// with the age bands.
// Both ways of keeping SepBIT's per-LBA state: one array (a replay's) and pages over the
// LBAs written (a volume's), which must decide alike.
class SepBitStateTest : public testing::TestWithParam<bool> {};

TEST_P(SepBitStateTest, DecidesAsTheFifoItDescribes) {
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu\n", (unsigned long long)seed);
  std::mt19937_64 rng(seed);
  // Paged times are kept modulo 2^32 - 1: the run crosses such a multiple, and 2^32.
  const uint64_t base = GetParam() ? UINT32_MAX - 30000 : 0;
  auto p = std::move(MakePlacement("sepbit", nullptr, /*paged=*/GetParam())).value();
  std::deque<std::pair<uint64_t, uint64_t>> fifo;  // (lba, user time), oldest first
  double l = std::numeric_limits<double>::max();
  for (uint64_t now = base + 1; now <= base + 60000; ++now) {
    if (now % 1500 ==
        0) {  // sixteen class-1 collections: l = their mean lifespan, often fractional
      double total = 0;
      for (int i = 0; i < 16; ++i) {
        const uint64_t created = now - 1 - rng() % 400;
        total += double(now - created);
        p->SegmentCollected(0, created, At(now));
      }
      l = total / 16;
      ASSERT_DOUBLE_EQ(p->stats().lifespan_threshold, l);
      GcAgeBands bands;
      ASSERT_TRUE(p->GcBandsFor(1, At(now), &bands));
      for (uint64_t age : {uint64_t{0}, uint64_t(l * 4) - 1, uint64_t(l * 4), uint64_t(l * 4) + 1,
                           uint64_t(l * 16), uint64_t(l * 16) + 1, now}) {
        const uint32_t want = double(age) < l * 4 ? 3 : double(age) < l * 16 ? 4 : 5;
        EXPECT_EQ(bands.ClassOf(age), want) << "age " << age << ", l " << l;
        EXPECT_EQ(p->GcWrite(7, now - age, 1, At(now)), want);
      }
    }
    // Hot LBAs, warm ones, and a few far apart (a paged table's pages there stay alone).
    const uint64_t pick = rng() % 8;
    const uint64_t lba = pick < 2 ? rng() % 50 : pick < 7 ? rng() % 3000 : rng() % (1u << 24);
    const uint64_t valid = 200 + rng() % 2000;
    // The paper's rule on the FIFO as it stands before this write.
    std::optional<uint64_t> newest;
    for (const auto& [f, t] : fifo) {
      if (f == lba) newest = t;
    }
    const double window = std::min(l, double(fifo.size()));
    const uint32_t want = newest && double(now - *newest) < window ? 0 : 1;
    ASSERT_EQ(p->UserWrite(lba, At(now, valid)), want) << "write " << now;
    fifo.emplace_back(lba, now);
    if (double(fifo.size()) > std::min(double(valid), l)) {
      fifo.pop_front();
      if (double(fifo.size()) > l) fifo.pop_front();
    }
    ASSERT_EQ(p->stats().fifo_length, fifo.size());
    if (now % 97 == 0 && !GetParam()) {  // a volume's (paged) FIFO counts no LBAs
      std::set<uint64_t> unique;
      for (const auto& e : fifo) unique.insert(e.first);
      ASSERT_EQ(p->stats().fifo_unique_lbas, unique.size()) << "write " << now;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(ArrayOrPaged, SepBitStateTest, testing::Bool());

// Figure 2 of the paper: with future knowledge of invalidation times and enough open
// segments, every collected segment is wholly invalid, so GC rewrites nothing.
TEST(FigureTwoTest, IdealPlacementNeverRewrites) {
  // Times 1..8 write A C A B C A B C (A=1, B=2, C=3); segment size s = 2.
  const std::vector<uint64_t> lbas = {1, 3, 1, 2, 3, 1, 2, 3};
  auto future = std::make_shared<std::vector<uint64_t>>(lbas.size(), UINT64_MAX);
  for (size_t i = 0; i < lbas.size(); ++i) {
    for (size_t j = i + 1; j < lbas.size(); ++j) {
      if (lbas[j] == lbas[i]) {
        (*future)[i] = j - i;
        break;
      }
    }
  }
  for (auto selection : {Selection::kGreedy, Selection::kCostBenefit}) {
    auto fk = std::move(MakePlacement("fk", future)).value();
    CountingStore store(2);
    EngineOptions o;
    o.segment_blocks = 2;
    o.gp_threshold = 0.5;
    o.selection = selection;
    LogEngine engine(o, *fk, store);
    for (size_t i = 0; i < lbas.size(); ++i)
      ASSERT_TRUE(engine.Write(lbas[i], 1, 10 * (i + 1)).ok());
    EXPECT_GE(engine.stats().segments_collected, 1u) << "GC must have run";
    EXPECT_EQ(engine.stats().gc_blocks, 0u) << "the ideal placement rewrites nothing";
    EXPECT_DOUBLE_EQ(engine.stats().wa(), 1.0);
    EXPECT_TRUE(engine.CheckInvariants().ok());
  }
}

TEST(PlacementTest, NamesAndErrors) {
  for (const auto& name : PlacementNames()) {
    auto p = MakePlacement(name, std::make_shared<std::vector<uint64_t>>());
    ASSERT_TRUE(p.ok()) << name;
    EXPECT_EQ((*p)->name(), name);
  }
  EXPECT_EQ(MakePlacement("fk").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(MakePlacement("warp").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace eraid
