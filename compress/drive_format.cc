#include "compress/drive_format.h"

#include <cstring>

#include "common/crc32c.h"
#include "common/encoding.h"

namespace eraid::drive_format {

void EncodeRecordHeader(const RecordHeader& h, std::span<const std::byte> payload, std::byte* out) {
  PutLe32(out + 0, kRecordMagic);
  out[4] = static_cast<std::byte>(h.type);
  out[5] = static_cast<std::byte>(h.codec);
  PutLe16(out + 6, h.payload_bytes);
  PutLe64(out + 8, h.lba);
  PutLe64(out + 16, h.seq);
  PutLe32(out + 24, h.count_blocks);
  uint32_t crc = Crc32cExtend(Crc32c(out, 28), payload.data(), payload.size());
  PutLe32(out + 28, crc);
}

Result<RecordHeader> DecodeRecord(std::span<const std::byte> in, bool check_crc) {
  if (in.size() < kRecordHeaderBytes) return Status::Corruption("record truncated");
  const std::byte* p = in.data();
  if (GetLe32(p) != kRecordMagic) return Status::Corruption("bad record magic");
  RecordHeader h;
  auto type = std::to_integer<uint8_t>(p[4]);
  auto codec = std::to_integer<uint8_t>(p[5]);
  if (type < 1 || type > 3) return Status::Corruption("bad record type");
  if (codec > 1) return Status::Corruption("bad record codec");
  h.type = static_cast<RecordType>(type);
  h.codec = static_cast<Codec>(codec);
  h.payload_bytes = GetLe16(p + 6);
  h.lba = GetLe64(p + 8);
  h.seq = GetLe64(p + 16);
  h.count_blocks = GetLe32(p + 24);
  if (h.payload_bytes > kMaxCompressedBlockBytes ||
      (h.type != RecordType::kData && h.payload_bytes != 0)) {
    return Status::Corruption("bad record length");
  }
  if (check_crc) {
    if (in.size() < h.record_bytes()) return Status::Corruption("record truncated");
    uint32_t crc = Crc32cExtend(Crc32c(p, 28), p + kRecordHeaderBytes, h.payload_bytes);
    if (crc != GetLe32(p + 28)) return Status::Corruption("record CRC mismatch");
  }
  return h;
}

void EncodeSuperblock(const Superblock& sb, std::span<std::byte> block) {
  std::memset(block.data(), 0, block.size());
  Writer w(block);
  w.U64(kSuperblockMagic);
  w.U32(sb.version);
  w.U32(sb.eu_blocks);
  w.U64(sb.flash_blocks);
  w.U64(sb.logical_blocks);
  w.U64(sb.data_start_block);
  w.U32(sb.num_eus);
  w.U32(sb.ckpt_slot_blocks);
  w.U32(sb.expansion_milli);
  if (sb.version != kDriveFormatVersionUnaligned) w.U32(sb.record_align_shift);
  PutLe32(block.data() + 60, Crc32c(block.data(), 60));
}

Result<Superblock> DecodeSuperblock(std::span<const std::byte> block) {
  if (block.size() < 64) return Status::Corruption("superblock truncated");
  Reader r(block);
  if (r.U64() != kSuperblockMagic)
    return Status::Corruption("not an eraid compressed drive (bad magic)");
  uint32_t version = r.U32();
  if (GetLe32(block.data() + 60) != Crc32c(block.data(), 60)) {
    return Status::Corruption("drive superblock CRC mismatch");
  }
  if (version != kDriveFormatVersion && version != kDriveFormatVersionUnaligned) {
    return Status::NotSupported("drive format version " + std::to_string(version) +
                                " (this build reads " +
                                std::to_string(kDriveFormatVersionUnaligned) + " and " +
                                std::to_string(kDriveFormatVersion) + ")");
  }
  Superblock sb;
  sb.version = version;
  sb.eu_blocks = r.U32();
  sb.flash_blocks = r.U64();
  sb.logical_blocks = r.U64();
  sb.data_start_block = r.U64();
  sb.num_eus = r.U32();
  sb.ckpt_slot_blocks = r.U32();
  sb.expansion_milli = r.U32();
  sb.record_align_shift = version == kDriveFormatVersionUnaligned ? 0 : r.U32();
  if (version != kDriveFormatVersionUnaligned && sb.record_align_shift != kRecordAlignShift) {
    return Status::Corruption("drive superblock record alignment is " +
                              std::to_string(sb.record_align_shift) + " (version 2 has " +
                              std::to_string(kRecordAlignShift) + ")");
  }
  if (sb.eu_blocks == 0 || sb.num_eus == 0 ||
      sb.data_start_block != 1 + 2ull * sb.ckpt_slot_blocks ||
      sb.ckpt_slot_blocks < CheckpointSlotBlocks(sb.logical_blocks, sb.num_eus) ||
      sb.data_start_block + uint64_t{sb.num_eus} * sb.eu_blocks > sb.flash_blocks) {
    return Status::Corruption("drive superblock geometry is inconsistent");
  }
  return sb;
}

void EncodeCheckpointHeader(const CheckpointHeader& h, std::span<std::byte> block) {
  std::memset(block.data(), 0, kCheckpointHeaderBytes);
  Writer w(block);
  w.U64(kCheckpointMagic);
  w.U32(h.version);
  w.U32(h.flags);
  w.U64(h.ckpt_seq);
  w.U64(h.next_seq);
  w.U64(h.ckpt_count);
  w.U64(h.logical_blocks);
  w.U32(h.num_eus);
  w.U32(h.payload_crc);
  w.U64(h.payload_bytes);
  PutLe32(block.data() + 64, Crc32c(block.data(), 64));
}

Result<CheckpointHeader> DecodeCheckpointHeader(std::span<const std::byte> block) {
  if (block.size() < kCheckpointHeaderBytes) return Status::Corruption("checkpoint truncated");
  Reader r(block);
  if (r.U64() != kCheckpointMagic) return Status::Corruption("bad checkpoint magic");
  if (GetLe32(block.data() + 64) != Crc32c(block.data(), 64)) {
    return Status::Corruption("checkpoint header CRC mismatch");
  }
  CheckpointHeader h;
  h.version = r.U32();
  if (h.version != kCheckpointVersionDense && h.version != kCheckpointVersionSparse) {
    return Status::NotSupported("checkpoint version " + std::to_string(h.version));
  }
  h.flags = r.U32();
  h.ckpt_seq = r.U64();
  h.next_seq = r.U64();
  h.ckpt_count = r.U64();
  h.logical_blocks = r.U64();
  h.num_eus = r.U32();
  h.payload_crc = r.U32();
  h.payload_bytes = r.U64();
  return h;
}

}  // namespace eraid::drive_format
