// The compressed drive's private parts, shared by its source files: the drive's
// geometry, an erase unit's state, an append stream. Nothing outside compress/ includes
// this.
#pragma once

#include <cstdint>
#include <vector>

#include "compress/compressed_drive.h"
#include "compress/drive_format.h"

namespace eraid {
namespace drive_internal {

// Append streams: user writes, GC relocations, trim records; then one per FlashAlloc range.
constexpr uint32_t kUserStream = 0;
constexpr uint32_t kGcStream = 1;
constexpr uint32_t kTrimStream = 2;
constexpr uint32_t kFirstRangeStream = 3;

}  // namespace drive_internal

struct CompressedDrive::Geometry {
  uint32_t eu_blocks;
  uint32_t num_eus;
  uint64_t logical_blocks;
  uint64_t data_start_block;
  uint32_t ckpt_slot_blocks;
  uint32_t format_version = drive_format::kDriveFormatVersion;
  uint32_t record_align_shift = drive_format::kRecordAlignShift;
};

struct CompressedDrive::Eu {
  // kErasing: garbage only, taken by the eraser; recorded as used until it is free.
  enum class State : uint8_t { kFree, kOpen, kSealed, kErasing };
  State state = State::kFree;
  uint32_t stream = 0;
  uint64_t gen = 0;                // seq of the EU-header record
  uint32_t write_ptr = 0;          // bytes of records written
  uint64_t live_bytes = 0;         // invariant 4
  uint64_t max_trim_seq = 0;       // newest trim record held; 0 if none
  uint64_t max_superseded_by = 0;  // newest record that made one of its records garbage
  bool writing = false;            // its pages are in flight to flash (flash_writes_)
};

struct CompressedDrive::Stream {
  int64_t eu = -1;                  // open EU, or -1
  std::vector<std::byte> buf;       // the open EU's bytes (zero beyond write_ptr)
  uint64_t synced_bytes = 0;        // prefix of buf known to be on flash
  uint64_t first_unsynced_seq = 0;  // oldest record not yet fully on flash; 0: none
  // Its latest page write of the open EU (WritePagesLocked), while it may be in flight.
  CompressedDrive::WriteDone last_write;
  bool active = false;  // a FlashAlloc range owns this stream
  uint64_t last_use = 0;
};

}  // namespace eraid
