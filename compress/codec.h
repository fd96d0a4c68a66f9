// Block codec: compresses one 4 KiB block at a time, as a drive with transparent
// compression does. zstd does the work; a block that does not shrink is stored raw.
//
// Thread-safety: the functions keep one zstd context per thread and may be called from
// any number of threads.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
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

// Recent compressions, shared by the emulated drives of one array, so the two copies of
// a mirrored block cost one compression: a RAID10 row reaches two drives with the same
// bytes, and each drive compresses what it is given. It changes no stored byte — the
// output is CompressBlock's, reused only for an input equal byte for byte (and the same
// codec settings). A real drive compresses in hardware; this saves only the emulation's
// CPU. Direct-mapped by a hash of a sample of the input (SlotHash: a word of every cache
// line; a CRC32C of the whole block was 3 of every 4 CRCs a mirrored write computed): an
// entry is overwritten by the next block that maps to it, and each hit uses it up a little: a drive's miss leaves it for one
// more copy (a block has one mirror), a Prime for two.
//
// Prime is how the host does the compression once, in the thread that received the
// write and outside every lock, before the block goes down the stack: the drives then
// find it done (docs/block-device.md, "The write path").
//
// Thread-safety: Compress() and Prime() may be called from any number of threads (a lock
// per entry).
class CompressionMemo {
 public:
  explicit CompressionMemo(size_t entries = 4096);
  ~CompressionMemo();
  // CompressBlock(config, in, out), with the result taken from the memo when it has it.
  Compressed Compress(const CodecConfig& config, const std::byte* in, std::byte* out);
  // Compresses the block into the memo for the next two Compress() calls of it (both
  // copies of a mirrored block; a RAID5 data block uses one).
  void Prime(const CodecConfig& config, const std::byte* in);
  // Which entry a block maps to (before the modulo); any block-to-number function would
  // do, since a hit is confirmed by comparing the whole block.
  static uint64_t SlotHash(const std::byte* in);
  uint64_t primed() const { return primed_.load(std::memory_order_relaxed); }
  uint64_t hits() const { return hits_.load(std::memory_order_relaxed); }
  uint64_t misses() const { return misses_.load(std::memory_order_relaxed); }

 private:
  struct Entry;
  const size_t size_;
  std::unique_ptr<Entry[]> entries_;
  std::atomic<uint64_t> hits_{0}, misses_{0}, primed_{0};
};

// Restores a 4 KiB block. Corruption if the payload does not decode to exactly 4 KiB.
Status DecompressBlock(Codec codec, std::span<const std::byte> payload, std::byte* out);

}  // namespace eraid
