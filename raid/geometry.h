// ArrayGeometry: where every block of an elastic segment lives on the n+1 devices.
//
// Every device has the same layout: a metadata area of `meta_blocks`, then segments of
// 2R chunks each (slot-1 = rows 0..R-1, slot-2 = rows R..2R-1), at the same LBAs on
// every device. A segment's data positions 0 .. R*n*chunk_blocks-1 fill slot-1 row by
// row; within row r the parity device is P = (segment + r) mod (n+1), and data chunk j
// sits on device (P + 1 + j) mod (n+1). That placement is the same in both schemes:
//   RAID5:  slot-1 row r = n data chunks + parity on P; slot-2 trimmed.
//   RAID10: slot-1 as RAID5 but P's chunk unused (trimmed); slot-2 row r holds the copy
//           of data chunk j on device (P + 2 + j) mod (n+1) — one device over, so the
//           two copies never share a device; device P+1's slot-2 chunk is unused.
// Conversion therefore never moves data: it only adds the other redundancy and trims
// the old one.
//
// Thread-safety: a value type.
#pragma once

#include <cstdint>

#include "common/check.h"
#include "common/status.h"
#include "common/types.h"

namespace eraid {

inline constexpr uint32_t kMinDevices = 3;
inline constexpr uint32_t kMaxDevices = 16;
inline constexpr uint32_t kMaxChunkBlocks = 256;  // 1 MiB

struct Place {
  uint32_t device;
  uint64_t lba;
};

struct ArrayGeometry {
  uint32_t devices = 0;        // n + 1
  uint32_t chunk_blocks = 0;   // power of two, 1..256
  uint32_t rows_per_slot = 0;  // R
  uint64_t meta_blocks = 0;    // metadata area at the start of every device
  uint32_t segments = 0;

  uint32_t data_devices() const { return devices - 1; }
  uint64_t row_blocks() const { return uint64_t{data_devices()} * chunk_blocks; }
  // Data positions per segment (user data and summaries): R * n * chunk.
  uint64_t segment_positions() const { return uint64_t{rows_per_slot} * row_blocks(); }
  // Blocks one segment spans on each device: 2R chunks.
  uint64_t segment_span_blocks() const { return 2ull * rows_per_slot * chunk_blocks; }
  uint64_t SegmentStart(SegmentId s) const {
    ERAID_CHECK(s.value < segments);
    return meta_blocks + uint64_t{s.value} * segment_span_blocks();
  }
  // Slot-2 of a segment on each device: R chunks after slot-1's.
  uint64_t slot_blocks() const { return uint64_t{rows_per_slot} * chunk_blocks; }
  uint64_t Slot2Start(SegmentId s) const { return SegmentStart(s) + slot_blocks(); }
  uint64_t device_blocks_needed() const {
    return meta_blocks + uint64_t{segments} * segment_span_blocks();
  }

  uint32_t RowOf(uint64_t pos) const {
    ERAID_CHECK(pos < segment_positions());
    return static_cast<uint32_t>(pos / row_blocks());
  }
  uint32_t ParityDevice(SegmentId s, uint32_t row) const {
    ERAID_CHECK(s.value < segments && row < rows_per_slot);
    return (s.value + row) % devices;
  }

  // Slot-1 place of data position `pos` (both schemes).
  Place Primary(SegmentId s, uint64_t pos) const {
    ERAID_CHECK(pos < segment_positions() && s.value < segments);
    uint64_t chunk = pos / chunk_blocks;
    auto row = static_cast<uint32_t>(chunk / data_devices());
    auto j = static_cast<uint32_t>(chunk % data_devices());
    return {(ParityDevice(s, row) + 1 + j) % devices,
            SegmentStart(s) + uint64_t{row} * chunk_blocks + pos % chunk_blocks};
  }
  // Slot-2 place of the copy of `pos` (RAID10, and RAID5's mirrored partial rows).
  Place Mirror(SegmentId s, uint64_t pos) const {
    Place p = Primary(s, pos);
    uint32_t row = RowOf(pos);
    return {(p.device + 1) % devices,
            SegmentStart(s) + uint64_t{rows_per_slot + row} * chunk_blocks + pos % chunk_blocks};
  }
  // Place of the parity block covering offset `off` (0..chunk_blocks-1) of row `row`.
  Place Parity(SegmentId s, uint32_t row, uint64_t off) const {
    ERAID_CHECK(off < chunk_blocks);
    return {ParityDevice(s, row), SegmentStart(s) + uint64_t{row} * chunk_blocks + off};
  }
  // Position of data chunk j, offset off, of row `row`.
  uint64_t PositionOf(uint32_t row, uint32_t j, uint64_t off) const {
    ERAID_CHECK(row < rows_per_slot && j < data_devices() && off < chunk_blocks);
    return uint64_t{row} * row_blocks() + uint64_t{j} * chunk_blocks + off;
  }

  // InvalidArgument unless devices, chunk and R are in range and the segments fit
  // `device_blocks`.
  Status Validate(uint64_t device_blocks) const;
};

// Chooses meta_blocks and the number of segments that fit devices of `device_blocks`.
Result<ArrayGeometry> PlanGeometry(uint32_t devices, uint32_t chunk_blocks, uint32_t rows_per_slot,
                                   uint64_t device_blocks);

}  // namespace eraid
