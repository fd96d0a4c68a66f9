// On-device metadata of an elastic array, present on every device so that it survives
// the loss of any one: the superblock, the segment bitmap as checkpoints plus a journal
// of changes, and the per-batch segment summaries. Byte layouts: docs/format/raid.md.
//
// Metadata area of every device (4 KiB blocks):
//   [0], [1]                        superblock slots (generation g goes to slot g % 2)
//   [2, 2+B)  and  [2+B, 2+2B)      bitmap checkpoint slots A and B
//   [2+2B, 2+2B+J)                  journal ring: record with seq s in block s % J
// then padding to a whole chunk.
//
// Thread-safety: pure encode/decode functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "common/types.h"
#include "raid/geometry.h"

namespace eraid::raid_format {

inline constexpr uint32_t kVersion = 1;
inline constexpr uint64_t kSuperMagic = 0x3152524144494152ull;   // "RAIDRR1"-ish
inline constexpr uint64_t kBitmapMagic = 0x31504d5442444945ull;  // "EIDBTMP1"
inline constexpr uint32_t kJournalMagic = 0x4c4e524au;           // "JRNL"
inline constexpr uint32_t kSummaryMagic = 0x4d555345u;           // "ESUM"
// Summary blocks of version 2 carry a check that survives no XOR of blocks (below);
// version 1's (a plain CRC32C) is still read.
inline constexpr uint32_t kSummaryVersion = 2;
inline constexpr uint32_t kJournalBlocks = 64;
inline constexpr uint32_t kBitmapEntryBytes = 16;
inline constexpr uint32_t kSummaryHeaderBytes = 64;
inline constexpr uint32_t kSummaryEntryBytes = 24;
// Data blocks one summary block describes.
inline constexpr uint32_t kSummaryCapacity =
    (kBlockSize - kSummaryHeaderBytes) / kSummaryEntryBytes;
static_assert(kSummaryCapacity == 168);

enum class SegmentScheme : uint8_t { kFree = 0, kRaid5 = 1, kRaid10 = 2 };
const char* SchemeName(SegmentScheme s);

enum class DeviceState : uint8_t { kOk = 0, kFailed = 1, kRebuilding = 2 };

struct Superblock {
  uint64_t array_id = 0;
  uint32_t device_index = 0;
  uint64_t generation = 0;  // larger wins across devices
  ArrayGeometry geometry;
  uint64_t device_blocks = 0;
  DeviceState states[kMaxDevices] = {};
};
void EncodeSuperblock(const Superblock& sb, std::span<std::byte> block);
Result<Superblock> DecodeSuperblock(std::span<const std::byte> block);

// The bitmap entry of one segment.
struct SegmentEntry {
  SegmentScheme scheme = SegmentScheme::kFree;
  bool sealed = false;
  uint32_t frontier = 0;    // sealed: positions written (summaries included)
  uint64_t generation = 0;  // journal seq of the record that opened the segment
};

uint32_t BitmapBlocks(uint32_t segments);
// Checkpoint: header (magic, version, seq, segments, CRC of entries, CRC of header) in
// the first 64 bytes, entries from byte 64.
void EncodeBitmap(uint64_t seq, std::span<const SegmentEntry> entries, std::span<std::byte> out);
// Returns the checkpoint's seq and fills `entries`.
Result<uint64_t> DecodeBitmap(std::span<const std::byte> in, std::vector<SegmentEntry>* entries);

struct JournalRecord {
  uint64_t seq = 0;
  uint32_t segment = 0;
  SegmentEntry entry;
};
void EncodeJournal(const JournalRecord& r, std::span<std::byte> block);
Result<JournalRecord> DecodeJournal(std::span<const std::byte> block);

// A summary block: written ahead of up to kSummaryCapacity data blocks, describing each
// (its CRC32C and two opaque words the volume above keeps: user LBA and write time).
struct SummaryEntry {
  uint64_t tag_lba = 0;
  uint64_t tag_time = 0;
  uint32_t crc = 0;
};
struct Summary {
  uint32_t segment = 0;
  uint64_t generation = 0;  // the segment's opening generation: stale summaries fail it
  uint32_t position = 0;    // where this summary block sits
  std::vector<SummaryEntry> entries;
};
// A summary's check is its CRC32C passed through a non-linear mix. A CRC is affine over
// XOR: the XOR of an odd number of valid summaries at the same offset of a RAID5 row is
// itself a valid summary (magic, version, segment and generation survive, and so may the
// position), whose entries' CRCs match the XOR of the data blocks. Reconstructing a row
// whose parity was never written (a partial row, parity zero) produced exactly that:
// recovery adopted a forged summary and served XORed blocks as data.
void EncodeSummary(const Summary& s, std::span<std::byte> block);
Result<Summary> DecodeSummary(std::span<const std::byte> block);

}  // namespace eraid::raid_format
