#include "raid/geometry.h"

#include <gtest/gtest.h>

#include <set>

namespace eraid {
namespace {

// For every device count and chunk size: in every row the n data chunks and the parity
// sit on n+1 distinct devices, a block's two copies never share a device, and no two
// positions share a place.
TEST(GeometryTest, PlacementInvariantsSweep) {
  for (uint32_t devices = 3; devices <= 16; ++devices) {
    for (uint32_t chunk : {1u, 4u, 16u, 256u}) {
      auto g = PlanGeometry(devices, chunk, 3, 1 << 20);
      ASSERT_TRUE(g.ok()) << g.status().ToString();
      for (uint32_t seg : {0u, 1u, g->segments - 1}) {
        SegmentId s(seg);
        std::set<std::pair<uint32_t, uint64_t>> places;
        for (uint64_t pos = 0; pos < g->segment_positions(); ++pos) {
          Place p = g->Primary(s, pos), m = g->Mirror(s, pos);
          ASSERT_NE(p.device, m.device);
          ASSERT_NE(p.device, g->ParityDevice(s, g->RowOf(pos)));
          ASSERT_GE(p.lba, g->SegmentStart(s));
          ASSERT_LT(m.lba, g->SegmentStart(s) + g->segment_span_blocks());
          ASSERT_TRUE(places.insert({p.device, p.lba}).second);
          ASSERT_TRUE(places.insert({m.device, m.lba}).second);
        }
        for (uint32_t row = 0; row < g->rows_per_slot; ++row) {
          Place q = g->Parity(s, row, 0);
          ASSERT_TRUE(places.insert({q.device, q.lba}).second) << "parity collides";
        }
      }
      EXPECT_LE(g->device_blocks_needed(), 1u << 20);
      EXPECT_EQ(g->meta_blocks % chunk, 0u);
    }
  }
}

TEST(GeometryTest, RejectsBadShapes) {
  EXPECT_FALSE(PlanGeometry(2, 16, 4, 1 << 20).ok());
  EXPECT_FALSE(PlanGeometry(17, 16, 4, 1 << 20).ok());
  EXPECT_FALSE(PlanGeometry(4, 3, 4, 1 << 20).ok());
  EXPECT_FALSE(PlanGeometry(4, 512, 4, 1 << 20).ok());
  EXPECT_FALSE(PlanGeometry(4, 16, 0, 1 << 20).ok());
  EXPECT_FALSE(PlanGeometry(4, 256, 64, 1000).ok());
}

}  // namespace
}  // namespace eraid
