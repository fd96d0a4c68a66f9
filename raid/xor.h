// Parity: XOR of n equal-length buffers, with ISA-L's xor_gen where the buffers allow it
// (32-byte aligned, length a multiple of 32) and a word-wise loop otherwise.
// XorReference is a plain byte loop, kept to test both against.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <span>

namespace eraid {

// dst = srcs[0] ^ srcs[1] ^ ... ; REQUIRES: !srcs.empty(); dst may not alias a source.
void XorBlocks(std::span<const std::byte* const> srcs, std::byte* dst, size_t len);
void XorReference(std::span<const std::byte* const> srcs, std::byte* dst, size_t len);

}  // namespace eraid
