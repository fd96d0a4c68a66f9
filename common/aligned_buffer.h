// AlignedBuffer: a byte vector whose storage is 64-byte aligned, for buffers handed to
// ISA-L (xor_gen wants 32-byte alignment) and to O_DIRECT-capable devices.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace eraid {

template <typename T, size_t kAlign>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() = default;
  template <typename U>
  AlignedAllocator(const AlignedAllocator<U, kAlign>&) {}  // NOLINT
  T* allocate(size_t n) {
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(kAlign)));
  }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t(kAlign)); }
  template <typename U>
  struct rebind {
    using other = AlignedAllocator<U, kAlign>;
  };
  bool operator==(const AlignedAllocator&) const { return true; }
};

using AlignedBuffer = std::vector<std::byte, AlignedAllocator<std::byte, 64>>;

}  // namespace eraid
