// Block codec: compresses one 4 KiB block at a time, as a drive with transparent
// compression does. zstd does the work; a block that does not shrink is stored raw.
//
// Thread-safety: the functions keep one zstd context per thread and may be called from
// any number of threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/types.h"

namespace eraid {

enum class Codec : uint8_t { kRaw = 0, kZstd = 1 };

struct CodecConfig {
  bool enabled = true;  // false: every block is stored raw ("--compression none")
  // Chosen by measurement (docs/benchmarks.md): on fio-style data every level reaches the
  // same ratio, and a negative level does it several times faster than level 3.
  int zstd_level = -3;
};

// Parses "zstd:LEVEL", "zstd" or "none".
Result<CodecConfig> ParseCodecConfig(const std::string& text);

// Compresses a 4 KiB block into `out` (at least kMaxCompressedBlockBytes). Returns the
// codec used and the payload size; a block that does not shrink comes back kRaw, 4096.
struct Compressed {
  Codec codec;
  uint32_t size_bytes;
};
inline constexpr uint32_t kMaxCompressedBlockBytes = kBlockSize;
Compressed CompressBlock(const CodecConfig& config, const std::byte* in, std::byte* out);

// Blocks compressed once by the host, in the form a compressing drive stores them:
// block i's payload (CompressBlock(config, ...)'s output) at payload(i), every block's at
// the same 4 KiB stride. A RAID10 row reaches two drives with the same bytes; the array
// compresses the row once, outside its locks, and hands both drives these records
// (Backend::SubmitWritePacked) instead of the drives compressing a copy each
// (docs/block-device.md, "The write path"). Shared: the drives' write caches keep it,
// instead of a copy, until their workers have stored it.
struct PackedBlocks {
  PackedBlocks(const CodecConfig& c, size_t blocks)
      : config(c),
        sizes(blocks),
        bytes(std::make_unique_for_overwrite<std::byte[]>(blocks * kBlockSize)) {}
  std::byte* payload(size_t i) { return bytes.get() + i * kBlockSize; }
  const std::byte* payload(size_t i) const { return bytes.get() + i * kBlockSize; }
  // Whether a drive compressing with `c` would have produced these records.
  bool Matches(const CodecConfig& c) const {
    return c.enabled == config.enabled && (!c.enabled || c.zstd_level == config.zstd_level);
  }

  const CodecConfig config;
  std::vector<Compressed> sizes;  // {kRaw, 0}: block i not packed (the drive encodes it)
  std::unique_ptr<std::byte[]> bytes;
};

// Restores a 4 KiB block. Corruption if the payload does not decode to exactly 4 KiB.
Status DecompressBlock(Codec codec, std::span<const std::byte> payload, std::byte* out);

}  // namespace eraid
