#include "raid/xor.h"

#include <isa-l/raid.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace eraid {

void XorReference(std::span<const std::byte* const> srcs, std::byte* dst, size_t len) {
  std::memcpy(dst, srcs[0], len);
  for (size_t s = 1; s < srcs.size(); ++s) {
    for (size_t i = 0; i < len; ++i) dst[i] ^= srcs[s][i];
  }
}

namespace {
// Unaligned buffers: 8 bytes at a time (the compiler vectorises it), then the tail.
void XorWords(std::span<const std::byte* const> srcs, std::byte* dst, size_t len) {
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t acc, w;
    std::memcpy(&acc, srcs[0] + i, 8);
    for (size_t s = 1; s < srcs.size(); ++s) {
      std::memcpy(&w, srcs[s] + i, 8);
      acc ^= w;
    }
    std::memcpy(dst + i, &acc, 8);
  }
  for (; i < len; ++i) {
    std::byte b = srcs[0][i];
    for (size_t s = 1; s < srcs.size(); ++s) b ^= srcs[s][i];
    dst[i] = b;
  }
}
}  // namespace

void XorBlocks(std::span<const std::byte* const> srcs, std::byte* dst, size_t len) {
  if (srcs.size() == 1) {
    std::memcpy(dst, srcs[0], len);
    return;
  }
  bool aligned = len % 32 == 0 && len <= INT32_MAX && reinterpret_cast<uintptr_t>(dst) % 32 == 0;
  for (const std::byte* s : srcs) aligned &= reinterpret_cast<uintptr_t>(s) % 32 == 0;
  if (!aligned) return XorWords(srcs, dst, len);
  std::vector<void*> array(srcs.size() + 1);
  for (size_t i = 0; i < srcs.size(); ++i) array[i] = const_cast<std::byte*>(srcs[i]);
  array.back() = dst;
  if (xor_gen(static_cast<int>(array.size()), static_cast<int>(len), array.data()) != 0) {
    XorWords(srcs, dst, len);
  }
}

}  // namespace eraid
