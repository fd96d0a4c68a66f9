#include "common/crc32c.h"

#include <isa-l/crc.h>

#include <climits>

namespace eraid {

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size_bytes) {
  // ISA-L's crc32_iscsi takes and returns the raw (non-inverted) register, so the standard
  // pre/post inversion is applied here. Its length is an int: feed large buffers in pieces.
  uint32_t reg = ~crc;
  auto* p = static_cast<unsigned char*>(const_cast<void*>(data));
  while (size_bytes > 0) {
    int n =
        size_bytes > static_cast<size_t>(INT_MAX / 2) ? INT_MAX / 2 : static_cast<int>(size_bytes);
    reg = crc32_iscsi(p, n, reg);
    p += n;
    size_bytes -= static_cast<size_t>(n);
  }
  return ~reg;
}

uint32_t Crc32c(const void* data, size_t size_bytes) { return Crc32cExtend(0, data, size_bytes); }

uint32_t Crc32cReference(const void* data, size_t size_bytes) {
  constexpr uint32_t kPolyReflected = 0x82F63B78u;
  uint32_t crc = 0xFFFFFFFFu;
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < size_bytes; ++i) {
    crc ^= p[i];
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (kPolyReflected & (0u - (crc & 1u)));
  }
  return ~crc;
}

}  // namespace eraid
