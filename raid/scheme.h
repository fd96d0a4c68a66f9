// The per-level part of the array, one small table of operations per scheme (raid5.cc,
// raid10.cc). The array core (array.cc) knows nothing of levels: it keeps the row buffer,
// the summaries, the CRCs, the bitmap and device failures, and asks the scheme where a
// row's redundancy goes and how to find another copy of a block.
//
// Both schemes share slot-1's data placement (geometry.h), so a scheme only ever adds or
// removes redundancy: RAID5 the parity chunk of each row, RAID10 the slot-2 copies.
//
// Thread-safety: stateless; called under the array lock.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "common/aligned_buffer.h"
#include "raid/geometry.h"
#include "raid/metadata.h"

namespace eraid {

// One block-range operation on one device, planned by a scheme and run by the array.
struct DeviceWrite {
  uint32_t device;
  uint64_t lba;
  std::span<const std::byte> data;
};
struct DeviceTrim {
  uint32_t device;
  uint64_t lba;
  uint64_t count_blocks;
};

// A block to read: from `device` at `lba` into `out`.
struct BlockRead {
  uint32_t device;
  uint64_t lba;
  std::span<std::byte> out;
};
// Reads the blocks, all in flight together (a degraded RAID5 read's n surviving blocks
// wait on their n drives at once, not one after another); (*ok)[i] is whether reads[i]
// was served (false where its device is down or fails it).
using BlockReader = std::function<void(std::span<const BlockRead> reads, std::vector<bool>* ok)>;
// One block through a BlockReader: whether it was served.
inline bool ReadOne(const BlockReader& read, uint32_t device, uint64_t lba,
                    std::span<std::byte> out) {
  const BlockRead r{device, lba, out};
  std::vector<bool> ok;
  read(std::span(&r, 1), &ok);
  return ok[0];
}
// True if the bytes are the block wanted (its CRC matches).
using BlockCheck = std::function<bool(std::span<const std::byte>)>;

class Scheme {
 public:
  virtual ~Scheme() = default;
  virtual raid_format::SegmentScheme id() const = 0;

  // Whether the redundancy is parity, computed over a whole row. A row that a flush makes
  // durable before it is full then has none yet: its new blocks are mirrored into slot-2
  // (where RAID10 keeps its copies) until the row's parity is durable, and those copies
  // are trimmed after (array_rows.cc). Where the redundancy is copies, they are the
  // slot-2 blocks themselves and stay.
  virtual bool has_parity() const = 0;

  // The writes that store row `row` (its data in `row`, row_blocks() blocks): the data
  // chunks in slot-1 if `with_data`, and this scheme's redundancy. Parity is computed
  // into `scratch`, which must outlive the writes.
  virtual void RowWrites(const ArrayGeometry& g, SegmentId s, uint32_t row,
                         std::span<const std::byte> row_data, bool with_data,
                         AlignedBuffer* scratch, std::vector<DeviceWrite>* out) const = 0;

  // Recovers position `pos` without its primary copy, trying each copy this scheme can
  // offer (and, for RAID5, a partial row's slot-2 mirror) until `check` accepts one.
  // `read` declines blocks of devices that are down.
  virtual bool ReadAlternative(const ArrayGeometry& g, SegmentId s, uint64_t pos,
                               const BlockReader& read, const BlockCheck& check,
                               std::span<std::byte> out) const = 0;

  // The trims that drop this scheme's redundancy from the segment (after a conversion).
  virtual void RedundancyTrims(const ArrayGeometry& g, SegmentId s,
                               std::vector<DeviceTrim>* out) const = 0;
};

const Scheme& SchemeFor(raid_format::SegmentScheme scheme);

}  // namespace eraid
