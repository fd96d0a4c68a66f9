// The log engine under random workloads, for every placement and both selections: GC
// never loses or duplicates a valid block (invariants checked as it runs), WA >= 1, and
// the paper's ordering holds where it must (FK and SepBIT below NoSep on skewed writes).
#include "log/log_engine.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

namespace eraid {
namespace {

struct ReplayResult {
  double wa;
  uint64_t collected;
};

ReplayResult Replay(const std::string& placement, Selection selection, uint64_t seed, bool check) {
  std::mt19937_64 rng(seed);
  // Skewed writes: 80% of writes to 20% of 4096 LBAs, with some trims.
  std::vector<uint64_t> lbas;
  for (int i = 0; i < 60000; ++i) {
    uint64_t lba = rng() % 10 < 8 ? rng() % 820 : 820 + rng() % 3276;
    lbas.push_back(lba);
  }
  auto future = std::make_shared<std::vector<uint64_t>>(lbas.size(), UINT64_MAX);
  std::map<uint64_t, size_t> last;
  for (size_t i = 0; i < lbas.size(); ++i) {
    if (auto it = last.find(lbas[i]); it != last.end()) (*future)[it->second] = i - it->second;
    last[lbas[i]] = i;
  }
  auto p = std::move(MakePlacement(placement, future)).value();
  CountingStore store(64);
  EngineOptions o;
  o.segment_blocks = 64;
  o.selection = selection;
  LogEngine engine(o, *p, store);
  std::set<uint64_t> live;
  for (size_t i = 0; i < lbas.size(); ++i) {
    EXPECT_TRUE(engine.Write(lbas[i], 1, i * 7).ok());
    live.insert(lbas[i]);
    if (check && i % 5000 == 4999) {
      Status s = engine.CheckInvariants();
      EXPECT_TRUE(s.ok()) << placement << " after " << i << ": " << s.ToString();
      EXPECT_EQ(engine.stats().valid_blocks, live.size()) << "a valid block was lost or duplicated";
    }
  }
  EXPECT_EQ(engine.stats().user_blocks, lbas.size());
  EXPECT_GE(engine.stats().wa(), 1.0);
  return {engine.stats().wa(), engine.stats().segments_collected};
}

class EngineTest : public ::testing::TestWithParam<std::string> {};

TEST_P(EngineTest, InvariantsHoldUnderGc) {
  for (auto sel : {Selection::kGreedy, Selection::kCostBenefit}) {
    ReplayResult r = Replay(GetParam(), sel, 5, true);
    EXPECT_GT(r.collected, 100u) << "GC must run";
  }
}

INSTANTIATE_TEST_SUITE_P(Placements, EngineTest, ::testing::ValuesIn(PlacementNames()));

TEST(EngineOrderingTest, SeparationBeatsNoSepOnSkewedWrites) {
  for (auto sel : {Selection::kGreedy, Selection::kCostBenefit}) {
    double nosep = Replay("nosep", sel, 9, false).wa;
    double sepbit = Replay("sepbit", sel, 9, false).wa;
    double fk = Replay("fk", sel, 9, false).wa;
    std::printf("WA nosep %.3f sepbit %.3f fk %.3f\n", nosep, sepbit, fk);
    EXPECT_LT(sepbit, nosep);
    EXPECT_LT(fk, nosep);
  }
}

TEST(EngineTest, TrimsInvalidate) {
  auto p = std::move(MakePlacement("nosep")).value();
  CountingStore store(8);
  EngineOptions o;
  o.segment_blocks = 8;
  LogEngine engine(o, *p, store);
  ASSERT_TRUE(engine.Write(0, 16, 1).ok());
  EXPECT_EQ(engine.stats().valid_blocks, 16u);
  ASSERT_TRUE(engine.Trim(4, 8).ok());
  EXPECT_EQ(engine.stats().valid_blocks, 8u);
  EXPECT_EQ(engine.ClassOf(5), -1);
  EXPECT_EQ(engine.ClassOf(3), 0);
  EXPECT_TRUE(engine.CheckInvariants().ok());
}

}  // namespace
}  // namespace eraid
