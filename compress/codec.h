// Block codec: compresses one 4 KiB block at a time, as a drive with transparent
// compression does. zstd does the work; a block that does not shrink is stored raw.
//
// Thread-safety: the functions keep one zstd context per thread and may be called from
// any number of threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

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

// Restores a 4 KiB block. Corruption if the payload does not decode to exactly 4 KiB.
Status DecompressBlock(Codec codec, std::span<const std::byte> payload, std::byte* out);

}  // namespace eraid
