// CRC32C (Castagnoli, the iSCSI polynomial), as stored beside every block and in every
// on-disk structure. Crc32c() is ISA-L's crc32_iscsi; Crc32cReference() is a plain
// bitwise loop kept to test it against.
//
// Convention: the standard CRC32C (init ~0, final xor ~0): Crc32c("123456789") ==
// 0xE3069283. Extend() continues a CRC over more bytes: Crc32c(a+b) == Extend(Crc32c(a), b).
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace eraid {

uint32_t Crc32c(const void* data, size_t size_bytes);
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size_bytes);
uint32_t Crc32cReference(const void* data, size_t size_bytes);

inline uint32_t Crc32c(std::span<const std::byte> data) { return Crc32c(data.data(), data.size()); }

}  // namespace eraid
