// RAID10: every data chunk of slot-1 has a copy in slot-2, one device over; the row's
// remaining chunk in each slot is unused and trimmed.
#include <cstring>

#include "raid/scheme.h"

namespace eraid {
namespace {

class Raid10 final : public Scheme {
 public:
  raid_format::SegmentScheme id() const override { return raid_format::SegmentScheme::kRaid10; }
  bool has_parity() const override { return false; }

  void RowWrites(const ArrayGeometry& g, SegmentId s, uint32_t row,
                 std::span<const std::byte> row_data, bool with_data, AlignedBuffer*,
                 std::vector<DeviceWrite>* out) const override {
    const uint64_t chunk_bytes = BlocksToBytes(g.chunk_blocks);
    ERAID_CHECK(row_data.size() == g.data_devices() * chunk_bytes);  // a whole row
    for (uint32_t j = 0; j < g.data_devices(); ++j) {
      uint64_t pos = g.PositionOf(row, j, 0);
      auto chunk = row_data.subspan(j * chunk_bytes, chunk_bytes);
      if (with_data) {
        Place p = g.Primary(s, pos);
        out->push_back({p.device, p.lba, chunk});
      }
      Place m = g.Mirror(s, pos);
      ERAID_CHECK(m.device != g.Primary(s, pos).device);  // the copies on two devices
      out->push_back({m.device, m.lba, chunk});
    }
  }

  bool ReadAlternative(const ArrayGeometry& g, SegmentId s, uint64_t pos, const BlockReader& read,
                       const BlockCheck& check, std::span<std::byte> out) const override {
    Place m = g.Mirror(s, pos);
    ERAID_CHECK(out.size() == kBlockSize);
    return ReadOne(read, m.device, m.lba, out) && check(out);
  }

  void RedundancyTrims(const ArrayGeometry& g, SegmentId s,
                       std::vector<DeviceTrim>* out) const override {
    for (uint32_t d = 0; d < g.devices; ++d) {
      out->push_back({d, g.Slot2Start(s), g.slot_blocks()});
    }
  }
};

}  // namespace

const Scheme& Raid10Scheme() {
  static const Raid10 scheme;
  return scheme;
}

const Scheme& Raid5Scheme();

const Scheme& SchemeFor(raid_format::SegmentScheme scheme) {
  return scheme == raid_format::SegmentScheme::kRaid10 ? Raid10Scheme() : Raid5Scheme();
}

}  // namespace eraid
