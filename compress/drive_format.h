// On-flash structures of the emulated compressing drive (CompressedDrive), with their
// encoders and decoders. The byte layout is documented in docs/format/compressed-drive.md;
// this file and that page change together, and kDriveFormatVersion with them.
//
// Flash layout, in 4 KiB blocks:
//   [0]                   superblock
//   [1, 1+S)              checkpoint slot 0        (S = checkpoint slot blocks)
//   [1+S, 1+2S)           checkpoint slot 1
//   [1+2S, ...)           erase units, EU i at data_start + i * eu_blocks
// An erase unit is a byte stream of records: an EU-header record, then data and trim
// records, each starting at a multiple of the drive's record alignment (format 2: 16
// bytes, the gap zeros; format 1: 1, back to back). A record may cross a page boundary,
// never an EU boundary.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>

#include "common/status.h"
#include "common/types.h"
#include "compress/codec.h"

namespace eraid::drive_format {

// The superblock's. Version 2 added the record alignment (16 bytes), which lets the map
// hold a record's place in 6 bytes on drives of up to 8 TiB; version 1 drives (records
// back to back) are still read and written, up to 32 GiB of flash (DriveMap).
inline constexpr uint32_t kDriveFormatVersion = 2;
inline constexpr uint32_t kDriveFormatVersionUnaligned = 1;
inline constexpr uint32_t kRecordAlignShift = 4;  // what version 2 writes
// A checkpoint's version says how its map is laid out: 1, dense (one u64 per LBA); 2,
// sparse (a bitmap of the 512-entry map pages present, then those pages). Both are read;
// version 2 is written unless its pages would not fit the slot (then version 1, which the
// slot was sized for).
inline constexpr uint32_t kCheckpointVersionDense = 1;
inline constexpr uint32_t kCheckpointVersionSparse = 2;
inline constexpr uint64_t kMapPageEntries = 512;
inline constexpr uint64_t kMapPageBytes = kMapPageEntries * 8;
inline constexpr uint64_t kSuperblockMagic = 0x3156524444494152ull;  // "RAIDDRV1"
inline constexpr uint64_t kCheckpointMagic = 0x3154504b43445245ull;  // "ERDCKPT1"
inline constexpr uint32_t kRecordMagic = 0x43455245u;                // "EREC"

inline constexpr uint32_t kRecordHeaderBytes = 32;
inline constexpr uint32_t kMaxRecordBytes = kRecordHeaderBytes + kMaxCompressedBlockBytes;
inline constexpr uint32_t kCheckpointEuEntryBytes = 16;
// A checkpoint EU entry's flags byte (offset 12). Sealed: the EU takes no more records in
// this incarnation, so a crash recovery has nothing to scan past its write pointer. (Older
// drives wrote 1 for every used EU: their EUs are scanned past it, as they always were.)
inline constexpr uint8_t kCkptEuUsed = 1, kCkptEuSealed = 2;
inline constexpr uint32_t kCheckpointHeaderBytes = 68;
static_assert(kCheckpointHeaderBytes <= kBlockSize);

enum class RecordType : uint8_t { kData = 1, kTrim = 2, kEuHeader = 3 };

// One record's header. For kData, count_blocks is 1 and the payload is the compressed
// block; for kTrim, [lba, lba+count_blocks) was trimmed; for kEuHeader, lba is the EU
// index and seq its generation (every later record in the EU has a larger seq).
struct RecordHeader {
  RecordType type = RecordType::kData;
  Codec codec = Codec::kRaw;
  uint16_t payload_bytes = 0;
  uint64_t lba = 0;
  uint64_t seq = 0;
  uint32_t count_blocks = 0;

  uint32_t record_bytes() const { return kRecordHeaderBytes + payload_bytes; }
};
// The bytes a record of `record_bytes` takes in its EU: up to the next record's start.
inline constexpr uint32_t RecordFootprint(uint32_t record_bytes, uint32_t align_shift) {
  const uint32_t mask = (1u << align_shift) - 1;
  return (record_bytes + mask) & ~mask;
}

// Writes header + CRC32C(header[0,28) + payload) into out[0, 32).
void EncodeRecordHeader(const RecordHeader& h, std::span<const std::byte> payload, std::byte* out);
// Decodes the header at `in` (which must hold the whole record when check_crc) and
// verifies magic, type, length and, with check_crc, the CRC over header and payload.
Result<RecordHeader> DecodeRecord(std::span<const std::byte> in, bool check_crc);

struct Superblock {
  uint32_t eu_blocks = 0;
  uint64_t flash_blocks = 0;
  uint64_t logical_blocks = 0;
  uint64_t data_start_block = 0;
  uint32_t num_eus = 0;
  uint32_t ckpt_slot_blocks = 0;
  uint32_t expansion_milli = 0;  // expansion factor * 1000, for `inspect`
  uint32_t version = kDriveFormatVersion;
  uint32_t record_align_shift = kRecordAlignShift;  // records start at multiples of 2^this
};
void EncodeSuperblock(const Superblock& sb, std::span<std::byte> block);
Result<Superblock> DecodeSuperblock(std::span<const std::byte> block);

// Checkpoint flags. kCheckpointClean: written by Close with nothing after it — every
// erase unit's state and write pointer in the payload are exact, so an open need not
// scan the erase units for later records. (The field was zero before: a drive from
// then is scanned, as it always was.)
inline constexpr uint32_t kCheckpointClean = 1;

struct CheckpointHeader {
  uint32_t version = kCheckpointVersionSparse;
  uint32_t flags = 0;
  uint64_t ckpt_seq = 0;  // every record with seq <= ckpt_seq is reflected
  uint64_t next_seq = 0;
  uint64_t ckpt_count = 0;  // which checkpoint this is (the larger valid one wins)
  uint64_t logical_blocks = 0;
  uint32_t num_eus = 0;
  uint64_t payload_bytes = 0;
  uint32_t payload_crc = 0;
};
void EncodeCheckpointHeader(const CheckpointHeader& h, std::span<std::byte> block);
Result<CheckpointHeader> DecodeCheckpointHeader(std::span<const std::byte> block);

// Payload bytes of a dense checkpoint: 8 per LBA, 16 per EU.
inline uint64_t DensePayloadBytes(uint64_t logical_blocks, uint64_t num_eus) {
  return logical_blocks * 8 + num_eus * kCheckpointEuEntryBytes;
}
// A sparse checkpoint's page bitmap: a bit per map page, in whole u64 words.
inline uint64_t MapPages(uint64_t logical_blocks) {
  return (logical_blocks + kMapPageEntries - 1) / kMapPageEntries;
}
inline uint64_t MapBitmapBytes(uint64_t logical_blocks) {
  return (MapPages(logical_blocks) + 63) / 64 * 8;
}
// Payload bytes of a sparse checkpoint holding `pages` map pages.
inline uint64_t SparsePayloadBytes(uint64_t logical_blocks, uint64_t pages, uint64_t num_eus) {
  return MapBitmapBytes(logical_blocks) + pages * kMapPageBytes + num_eus * kCheckpointEuEntryBytes;
}
// Blocks one checkpoint slot needs: a header block plus a dense payload (the larger).
inline uint64_t CheckpointSlotBlocks(uint64_t logical_blocks, uint64_t num_eus) {
  return 1 + (DensePayloadBytes(logical_blocks, num_eus) + kBlockSize - 1) / kBlockSize;
}

// A record's place on flash, packed into one word (the checkpoint's map entries; DriveMap
// holds it in 6 bytes): bits [13, 64) absolute byte offset on flash, bits [0, 13) the
// record's footprint in bytes (RecordFootprint: its length, rounded up to the alignment).
inline constexpr uint32_t kLocLengthBits = 13;
static_assert(kMaxRecordBytes < (1u << kLocLengthBits));
inline constexpr uint64_t PackLoc(uint64_t offset_bytes, uint32_t length_bytes) {
  return (offset_bytes << kLocLengthBits) | length_bytes;
}
inline constexpr uint64_t LocOffset(uint64_t loc) { return loc >> kLocLengthBits; }
inline constexpr uint32_t LocLength(uint64_t loc) {
  return static_cast<uint32_t>(loc & ((1u << kLocLengthBits) - 1));
}
// Mapping-table values that are not locations.
inline constexpr uint64_t kUnmapped = 0;
// The LBA's only copy failed its CRC during GC: reads fail with Corruption until rewritten.
inline constexpr uint64_t kLostBlock = 1;

}  // namespace eraid::drive_format
