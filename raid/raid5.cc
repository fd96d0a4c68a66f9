// RAID5: n data chunks and one rotating parity chunk per row, in slot-1; slot-2 empty
// except for the mirrored copies of a partial row that a flush made durable before the
// row's parity existed (array.cc keeps them until the parity is durable).
#include <algorithm>
#include <cstring>

#include "raid/scheme.h"
#include "raid/xor.h"

namespace eraid {
namespace {

class Raid5 final : public Scheme {
 public:
  raid_format::SegmentScheme id() const override { return raid_format::SegmentScheme::kRaid5; }
  bool has_parity() const override { return true; }

  void RowWrites(const ArrayGeometry& g, SegmentId s, uint32_t row,
                 std::span<const std::byte> row_data, bool with_data, AlignedBuffer* scratch,
                 std::vector<DeviceWrite>* out) const override {
    const uint64_t chunk_bytes = BlocksToBytes(g.chunk_blocks);
    const uint32_t n = g.data_devices();
    ERAID_CHECK(row_data.size() == n * chunk_bytes);  // a whole row
    if (with_data) {
      for (uint32_t j = 0; j < n; ++j) {
        Place p = g.Primary(s, g.PositionOf(row, j, 0));
        out->push_back({p.device, p.lba, row_data.subspan(j * chunk_bytes, chunk_bytes)});
      }
    }
    scratch->resize(chunk_bytes);
    std::vector<const std::byte*> srcs(n);
    for (uint32_t j = 0; j < n; ++j) srcs[j] = row_data.data() + j * chunk_bytes;
    XorBlocks(srcs, scratch->data(), chunk_bytes);
    Place p = g.Parity(s, row, 0);
    // The parity's device holds none of the row's data chunks.
    ERAID_CHECK(p.device == g.ParityDevice(s, row) &&
                p.device != g.Primary(s, g.PositionOf(row, 0, 0)).device);
    out->push_back({p.device, p.lba, *scratch});
  }

  bool ReadAlternative(const ArrayGeometry& g, SegmentId s, uint64_t pos, const BlockReader& read,
                       const BlockCheck& check, std::span<std::byte> out) const override {
    // 1. XOR of the other n-1 data blocks and the parity block at the same offset.
    const uint32_t row = g.RowOf(pos);
    const uint64_t off = pos % g.chunk_blocks;
    const uint32_t me = static_cast<uint32_t>((pos % g.row_blocks()) / g.chunk_blocks);
    ERAID_CHECK(out.size() == kBlockSize && me < g.data_devices());
    //    All n of them are read at once.
    AlignedBuffer blocks(BlocksToBytes(g.data_devices()));
    std::vector<BlockRead> reads;
    std::vector<const std::byte*> srcs;
    for (uint32_t j = 0; j < g.data_devices(); ++j) {
      if (j == me) continue;
      Place p = g.Primary(s, g.PositionOf(row, j, off));
      reads.push_back({p.device, p.lba, {blocks.data() + BlocksToBytes(srcs.size()), kBlockSize}});
      srcs.push_back(reads.back().out.data());
    }
    Place parity = g.Parity(s, row, off);
    reads.push_back(
        {parity.device, parity.lba, {blocks.data() + BlocksToBytes(srcs.size()), kBlockSize}});
    srcs.push_back(reads.back().out.data());
    std::vector<bool> ok;
    read(reads, &ok);
    if (std::find(ok.begin(), ok.end(), false) == ok.end()) {
      XorBlocks(srcs, out.data(), kBlockSize);
      if (check(out)) return true;
    }
    // 2. A partial row's mirror, if a flush left one.
    Place m = g.Mirror(s, pos);
    return ReadOne(read, m.device, m.lba, out) && check(out);
  }

  void RedundancyTrims(const ArrayGeometry& g, SegmentId s,
                       std::vector<DeviceTrim>* out) const override {
    for (uint32_t row = 0; row < g.rows_per_slot; ++row) {
      Place p = g.Parity(s, row, 0);
      out->push_back({p.device, p.lba, g.chunk_blocks});
    }
  }
};

}  // namespace

const Scheme& Raid5Scheme() {
  static const Raid5 scheme;
  return scheme;
}

}  // namespace eraid
