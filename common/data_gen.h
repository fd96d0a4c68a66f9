// Test and benchmark data of known compressibility, with the meaning of fio's
// buffer_compress_percentage: in every 512-byte chunk, `compress_pct` percent of the bytes
// are zeros and the rest are random. A 4 KiB block at 50% then compresses to about half.
//
// Thread-safety: pure given the generator passed in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>

namespace eraid {

inline void FillBlockWithCompressibility(std::span<std::byte> block, uint32_t compress_pct,
                                         std::mt19937_64& rng) {
  constexpr size_t kChunk = 512;
  for (size_t at = 0; at < block.size(); at += kChunk) {
    size_t n = std::min(kChunk, block.size() - at);
    size_t random_bytes = n * (100 - std::min<uint32_t>(compress_pct, 100)) / 100;
    for (size_t i = 0; i < random_bytes; i += 8) {
      uint64_t r = rng();
      std::memcpy(block.data() + at + i, &r, std::min<size_t>(8, random_bytes - i));
    }
    std::memset(block.data() + at + random_bytes, 0, n - random_bytes);
  }
}

}  // namespace eraid
