// ChangeTracker: what a device may lack, against the flushes that make its writes durable.
#include "raid/change_tracker.h"

#include <gtest/gtest.h>

namespace eraid {
namespace {

class ChangeTrackerTest : public ::testing::Test {
 protected:
  ChangeTrackerTest() : g_(PlanGeometry(4, 4, 2, 4096).value()), t_(g_, 4) {}
  uint64_t Lba(uint32_t segment, uint64_t offset = 0) const {
    return g_.SegmentStart(SegmentId(segment)) + offset;
  }
  std::vector<uint32_t> Owed(uint32_t d) const {
    std::vector<uint32_t> v;
    const auto m = t_.Missing(d);
    for (uint32_t s = 0; s < m.size(); ++s) {
      if (m[s]) v.push_back(s);
    }
    return v;
  }
  ArrayGeometry g_;
  ChangeTracker t_;
};

TEST_F(ChangeTrackerTest, AFlushCoversWhatCompletedBeforeItWasSubmitted) {
  ASSERT_GE(g_.segments, 10u);
  t_.Mark(1, Lba(3));
  t_.Mark(2, Lba(4));  // other devices are apart
  EXPECT_EQ(Owed(1), std::vector<uint32_t>{3});
  const uint64_t f1 = t_.FlushBegin(1);
  t_.Mark(1, Lba(5));  // submitted after the flush: not covered by it
  EXPECT_EQ(Owed(1), (std::vector<uint32_t>{3, 5}));
  t_.FlushDone(1, f1, true);
  EXPECT_EQ(Owed(1), std::vector<uint32_t>{5});
  EXPECT_EQ(Owed(2), std::vector<uint32_t>{4});
}

TEST_F(ChangeTrackerTest, AWriteInFlightAcrossAFlushStaysOwed) {
  t_.Mark(0, Lba(7));                   // submitted
  const uint64_t f = t_.FlushBegin(0);  // the flush does not wait for it
  t_.Mark(0, Lba(7));                   // completed after the flush was submitted
  t_.FlushDone(0, f, true);
  EXPECT_EQ(Owed(0), std::vector<uint32_t>{7});
  const uint64_t f2 = t_.FlushBegin(0);
  t_.FlushDone(0, f2, true);
  EXPECT_TRUE(Owed(0).empty());
}

TEST_F(ChangeTrackerTest, AFailedFlushKeepsEverythingAndALaterOneCoversOlderSets) {
  t_.Mark(0, Lba(1));
  const uint64_t f1 = t_.FlushBegin(0);
  t_.Mark(0, Lba(2));
  const uint64_t f2 = t_.FlushBegin(0);
  t_.FlushDone(0, f1, false);
  EXPECT_EQ(Owed(0), (std::vector<uint32_t>{1, 2}));
  t_.Mark(0, Lba(6));
  t_.FlushDone(0, f2, true);  // submitted after everything in both sets completed
  EXPECT_EQ(Owed(0), std::vector<uint32_t>{6});
}

TEST_F(ChangeTrackerTest, RangesMetadataRestartAndInvalidate) {
  t_.Mark(3, 0, g_.meta_blocks);  // the metadata area: no segment
  EXPECT_TRUE(Owed(3).empty());
  t_.Mark(3, Lba(2, g_.segment_span_blocks() - 1), 2);  // the last block of 2, the first of 3
  EXPECT_EQ(Owed(3), (std::vector<uint32_t>{2, 3}));
  t_.Mark(3, Lba(g_.segments - 1), 10 * g_.segment_span_blocks());  // past the end: clamped
  EXPECT_EQ(Owed(3).back(), g_.segments - 1);
  EXPECT_TRUE(t_.valid(3));
  t_.Invalidate(3);
  EXPECT_FALSE(t_.valid(3));
  t_.Restart(3);
  EXPECT_TRUE(t_.valid(3));
  EXPECT_TRUE(Owed(3).empty());
}

}  // namespace
}  // namespace eraid
