#include "raid/metadata.h"

#include <cstring>

#include "common/crc32c.h"
#include "common/encoding.h"

namespace eraid::raid_format {

const char* SchemeName(SegmentScheme s) {
  switch (s) {
    case SegmentScheme::kFree:
      return "free";
    case SegmentScheme::kRaid5:
      return "raid5";
    case SegmentScheme::kRaid10:
      return "raid10";
  }
  return "?";
}

namespace {
constexpr size_t kSuperBytes = 128;
}

void EncodeSuperblock(const Superblock& sb, std::span<std::byte> block) {
  std::memset(block.data(), 0, kBlockSize);
  Writer w(block);
  w.U64(kSuperMagic);
  w.U32(kVersion);
  w.U32(sb.device_index);
  w.U64(sb.array_id);
  w.U64(sb.generation);
  w.U32(sb.geometry.devices);
  w.U32(sb.geometry.chunk_blocks);
  w.U32(sb.geometry.rows_per_slot);
  w.U32(sb.geometry.segments);
  w.U64(sb.geometry.meta_blocks);
  w.U64(sb.device_blocks);
  for (uint32_t i = 0; i < kMaxDevices; ++i) w.U8(static_cast<uint8_t>(sb.states[i]));
  PutLe32(block.data() + kSuperBytes - 4, Crc32c(block.data(), kSuperBytes - 4));
}

Result<Superblock> DecodeSuperblock(std::span<const std::byte> block) {
  Reader r(block);
  if (r.U64() != kSuperMagic) return Status::Corruption("not an eraid array device (bad magic)");
  if (GetLe32(block.data() + kSuperBytes - 4) != Crc32c(block.data(), kSuperBytes - 4)) {
    return Status::Corruption("array superblock CRC mismatch");
  }
  uint32_t version = r.U32();
  if (version != kVersion) {
    return Status::NotSupported("array format version " + std::to_string(version));
  }
  Superblock sb;
  sb.device_index = r.U32();
  sb.array_id = r.U64();
  sb.generation = r.U64();
  sb.geometry.devices = r.U32();
  sb.geometry.chunk_blocks = r.U32();
  sb.geometry.rows_per_slot = r.U32();
  sb.geometry.segments = r.U32();
  sb.geometry.meta_blocks = r.U64();
  sb.device_blocks = r.U64();
  for (uint32_t i = 0; i < kMaxDevices; ++i) {
    uint8_t s = r.U8();
    if (s > 2) return Status::Corruption("bad device state in superblock");
    sb.states[i] = static_cast<DeviceState>(s);
  }
  ERAID_RETURN_IF_ERROR(sb.geometry.Validate(sb.device_blocks).WithContext("superblock geometry"));
  if (sb.device_index >= sb.geometry.devices)
    return Status::Corruption("device index out of range");
  return sb;
}

uint32_t BitmapBlocks(uint32_t segments) {
  return 1 + (segments * kBitmapEntryBytes + kBlockSize - 1) / kBlockSize;
}

void EncodeBitmap(uint64_t seq, std::span<const SegmentEntry> entries, std::span<std::byte> out) {
  std::memset(out.data(), 0, out.size());
  std::byte* p = out.data() + kBlockSize;
  for (const SegmentEntry& e : entries) {
    p[0] = static_cast<std::byte>(e.scheme);
    p[1] = static_cast<std::byte>(e.sealed);
    PutLe32(p + 4, e.frontier);
    PutLe64(p + 8, e.generation);
    p += kBitmapEntryBytes;
  }
  Writer w(out);
  w.U64(kBitmapMagic);
  w.U32(kVersion);
  w.U32(static_cast<uint32_t>(entries.size()));
  w.U64(seq);
  w.U32(Crc32c(out.data() + kBlockSize, entries.size() * kBitmapEntryBytes));
  PutLe32(out.data() + 60, Crc32c(out.data(), 60));
}

Result<uint64_t> DecodeBitmap(std::span<const std::byte> in, std::vector<SegmentEntry>* entries) {
  if (in.size() < kBlockSize) return Status::Corruption("bitmap shorter than its header block");
  Reader r(in);
  if (r.U64() != kBitmapMagic) return Status::Corruption("bad bitmap magic");
  if (GetLe32(in.data() + 60) != Crc32c(in.data(), 60))
    return Status::Corruption("bitmap header CRC");
  if (r.U32() != kVersion) return Status::NotSupported("bitmap version");
  uint32_t n = r.U32();
  uint64_t seq = r.U64();
  uint32_t crc = r.U32();
  if (kBlockSize + uint64_t{n} * kBitmapEntryBytes > in.size() || n != entries->size()) {
    return Status::Corruption("bitmap size does not match the geometry");
  }
  if (Crc32c(in.data() + kBlockSize, n * kBitmapEntryBytes) != crc)
    return Status::Corruption("bitmap CRC");
  const std::byte* p = in.data() + kBlockSize;
  for (auto& e : *entries) {
    auto scheme = std::to_integer<uint8_t>(p[0]);
    if (scheme > 2) return Status::Corruption("bad scheme in bitmap");
    e = {static_cast<SegmentScheme>(scheme), std::to_integer<uint8_t>(p[1]) != 0, GetLe32(p + 4),
         GetLe64(p + 8)};
    p += kBitmapEntryBytes;
  }
  return seq;
}

void EncodeJournal(const JournalRecord& r, std::span<std::byte> block) {
  std::memset(block.data(), 0, kBlockSize);
  PutLe32(block.data(), kJournalMagic);
  PutLe64(block.data() + 4, r.seq);
  PutLe32(block.data() + 12, r.segment);
  block[16] = static_cast<std::byte>(r.entry.scheme);
  block[17] = static_cast<std::byte>(r.entry.sealed);
  PutLe32(block.data() + 20, r.entry.frontier);
  PutLe64(block.data() + 24, r.entry.generation);
  PutLe32(block.data() + 32, Crc32c(block.data(), 32));
}

Result<JournalRecord> DecodeJournal(std::span<const std::byte> block) {
  if (GetLe32(block.data()) != kJournalMagic) return Status::NotFound("no journal record");
  if (GetLe32(block.data() + 32) != Crc32c(block.data(), 32))
    return Status::Corruption("journal CRC");
  JournalRecord r;
  r.seq = GetLe64(block.data() + 4);
  r.segment = GetLe32(block.data() + 12);
  auto scheme = std::to_integer<uint8_t>(block[16]);
  if (scheme > 2) return Status::Corruption("bad scheme in journal");
  r.entry = {static_cast<SegmentScheme>(scheme), std::to_integer<uint8_t>(block[17]) != 0,
             GetLe32(block.data() + 20), GetLe64(block.data() + 24)};
  return r;
}

namespace {
// MurmurHash3's 32-bit finalizer: a bijection whose multiplications carry, so that
// MixCheck(a) ^ MixCheck(b) ^ MixCheck(c) != MixCheck(a ^ b ^ c) but by chance.
uint32_t MixCheck(uint32_t h) {
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}
}  // namespace

void EncodeSummary(const Summary& s, std::span<std::byte> block) {
  std::memset(block.data(), 0, kBlockSize);
  PutLe32(block.data(), kSummaryMagic);
  PutLe32(block.data() + 4, kSummaryVersion);
  PutLe32(block.data() + 8, s.segment);
  PutLe32(block.data() + 12, s.position);
  PutLe64(block.data() + 16, s.generation);
  PutLe32(block.data() + 24, static_cast<uint32_t>(s.entries.size()));
  std::byte* p = block.data() + kSummaryHeaderBytes;
  for (const SummaryEntry& e : s.entries) {
    PutLe64(p, e.tag_lba);
    PutLe64(p + 8, e.tag_time);
    PutLe32(p + 16, e.crc);
    p += kSummaryEntryBytes;
  }
  // CRC over the whole block with the check field zero, mixed (metadata.h).
  PutLe32(block.data() + 28, MixCheck(Crc32c(block.data(), kBlockSize)));
}

Result<Summary> DecodeSummary(std::span<const std::byte> block) {
  if (GetLe32(block.data()) != kSummaryMagic) return Status::NotFound("no summary");
  std::byte copy[kBlockSize];
  std::memcpy(copy, block.data(), kBlockSize);
  PutLe32(copy + 28, 0);
  const uint32_t version = GetLe32(block.data() + 4);
  if (version != 1 && version != kSummaryVersion) return Status::NotSupported("summary version");
  const uint32_t crc = Crc32c(copy, kBlockSize);
  if ((version == 1 ? crc : MixCheck(crc)) != GetLe32(block.data() + 28))
    return Status::Corruption("summary CRC");
  Summary s;
  s.segment = GetLe32(block.data() + 8);
  s.position = GetLe32(block.data() + 12);
  s.generation = GetLe64(block.data() + 16);
  uint32_t n = GetLe32(block.data() + 24);
  // Zero entries is valid: a summary that fell on the last slot of a row describes nothing.
  if (n > kSummaryCapacity) return Status::Corruption("summary entry count");
  const std::byte* p = block.data() + kSummaryHeaderBytes;
  s.entries.resize(n);
  for (auto& e : s.entries) {
    e = {GetLe64(p), GetLe64(p + 8), GetLe32(p + 16)};
    p += kSummaryEntryBytes;
  }
  return s;
}

}  // namespace eraid::raid_format
