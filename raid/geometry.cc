#include "raid/geometry.h"

#include "raid/metadata.h"

namespace eraid {

Status ArrayGeometry::Validate(uint64_t device_blocks) const {
  if (devices < kMinDevices || devices > kMaxDevices) {
    return Status::InvalidArgument("devices must be 3..16 (n+1 with n >= 2), got " +
                                   std::to_string(devices));
  }
  if (chunk_blocks == 0 || chunk_blocks > kMaxChunkBlocks ||
      (chunk_blocks & (chunk_blocks - 1)) != 0) {
    return Status::InvalidArgument("chunk must be a power of two from 4 KiB to 1 MiB");
  }
  if (rows_per_slot == 0) return Status::InvalidArgument("rows per slot must be positive");
  if (segment_positions() > UINT32_MAX) return Status::InvalidArgument("segment too large");
  if (segments == 0) return Status::InvalidArgument("devices too small for one segment");
  if (meta_blocks % chunk_blocks != 0) return Status::InvalidArgument("metadata not chunk aligned");
  if (device_blocks_needed() > device_blocks) {
    return Status::InvalidArgument("segments do not fit the devices");
  }
  return Status::Ok();
}

Result<ArrayGeometry> PlanGeometry(uint32_t devices, uint32_t chunk_blocks, uint32_t rows_per_slot,
                                   uint64_t device_blocks) {
  ArrayGeometry g{devices, chunk_blocks, rows_per_slot, 0, 1};
  // Validate everything but the segment count first, for a clear message.
  g.meta_blocks = chunk_blocks ? chunk_blocks : 1;
  if (Status s = g.Validate(UINT64_MAX); !s.ok()) return s;
  uint64_t segments = device_blocks / g.segment_span_blocks();
  for (; segments > 0; --segments) {
    uint64_t meta = 2 + 2ull * raid_format::BitmapBlocks(static_cast<uint32_t>(segments)) +
                    raid_format::kJournalBlocks;
    meta = (meta + chunk_blocks - 1) / chunk_blocks * chunk_blocks;
    if (meta + segments * g.segment_span_blocks() <= device_blocks) {
      g.meta_blocks = meta;
      g.segments = static_cast<uint32_t>(segments);
      return g;
    }
  }
  return Status::InvalidArgument("devices of " + std::to_string(device_blocks) +
                                 " blocks are too small for one segment of " +
                                 std::to_string(g.segment_span_blocks()) + " blocks plus metadata");
}

}  // namespace eraid
