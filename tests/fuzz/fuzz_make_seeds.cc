// Writes a seed corpus for fuzz_decoders into the directory given: one valid encoding of
// each structure the decoders read (with the selector byte fuzz_decoders expects), so the
// fuzzer starts past the magic numbers and CRCs.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "compress/codec.h"
#include "compress/drive_format.h"
#include "raid/metadata.h"

namespace {

void Write(const std::string& dir, const std::string& name, uint8_t selector,
           const std::vector<std::byte>& body) {
  std::ofstream f(dir + "/" + name, std::ios::binary);
  f.put(static_cast<char>(selector));
  f.write(reinterpret_cast<const char*>(body.data()), static_cast<std::streamsize>(body.size()));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_make_seeds DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  namespace rf = eraid::raid_format;
  namespace df = eraid::drive_format;
  using Bytes = std::vector<std::byte>;
  Bytes block(eraid::kBlockSize);
  {
    rf::Superblock sb;
    sb.array_id = 0x1234;
    sb.device_index = 1;
    sb.generation = 7;
    auto g = eraid::PlanGeometry(4, 4, 4, 4096);
    if (g.ok()) sb.geometry = *g;
    sb.device_blocks = 4096;
    rf::EncodeSuperblock(sb, block);
    Write(dir, "raid-superblock", 0, block);
  }
  {
    std::vector<rf::SegmentEntry> entries(10);
    entries[1] = {rf::SegmentScheme::kRaid5, true, 48, 3};
    entries[2] = {rf::SegmentScheme::kRaid10, false, 0, 4};
    Bytes bitmap(static_cast<size_t>(rf::BitmapBlocks(10)) * eraid::kBlockSize);
    rf::EncodeBitmap(9, entries, bitmap);
    Write(dir, "raid-bitmap", 1, bitmap);
  }
  {
    rf::JournalRecord r{12, 3, {rf::SegmentScheme::kRaid5, true, 40, 11}};
    rf::EncodeJournal(r, block);
    Write(dir, "raid-journal", 2, block);
  }
  {
    rf::Summary s{5, 11, 0, {{100, 1, 0xabcd}, {101, 2, 0x1234}}};
    rf::EncodeSummary(s, block);
    Write(dir, "raid-summary", 3, block);
  }
  {
    Bytes plain(eraid::kBlockSize, std::byte{'a'}), packed(eraid::kMaxCompressedBlockBytes);
    auto c = eraid::CompressBlock(eraid::CodecConfig{}, plain.data(), packed.data());
    Bytes record(df::kRecordHeaderBytes + c.size_bytes);
    df::RecordHeader h;
    h.codec = c.codec;
    h.payload_bytes = static_cast<uint16_t>(c.size_bytes);
    h.lba = 9;
    h.seq = 77;
    h.count_blocks = 1;
    std::copy(packed.begin(), packed.begin() + c.size_bytes,
              record.begin() + df::kRecordHeaderBytes);
    df::EncodeRecordHeader(h, std::span<const std::byte>(packed.data(), c.size_bytes),
                           record.data());
    Write(dir, "drive-record", 4, record);
    Bytes payload{std::byte{static_cast<uint8_t>(c.codec)}};
    payload.insert(payload.end(), packed.begin(), packed.begin() + c.size_bytes);
    Write(dir, "zstd-payload", 7, payload);
  }
  {
    df::Superblock sb{16, 4096, 8192, 64, 250, 40, 2000};
    df::EncodeSuperblock(sb, block);
    Write(dir, "drive-superblock", 5, block);
    df::CheckpointHeader ch{10, 11, 2, 8192, 250, 69536, 0x55};
    df::EncodeCheckpointHeader(ch, block);
    Write(dir, "drive-checkpoint", 6, block);
  }
  const std::string codec = "zstd:3";
  Write(dir, "codec", 8,
        Bytes(reinterpret_cast<const std::byte*>(codec.data()),
              reinterpret_cast<const std::byte*>(codec.data()) + codec.size()));
  return 0;
}
