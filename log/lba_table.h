// LbaTable<T>: an array indexed by LBA whose memory is taken from the OS only as its
// pages are first written.
//
// The log's map, its copy counts and a placement's per-LBA state are indexed by LBA over
// the whole volume. As std::vectors they grew by copying (twice the room at each step,
// both copies resident while it ran) and wrote zeros over every new entry, so an array
// written at a few random LBAs of a large volume held the whole table in RAM. Here the
// table is one anonymous mapping grown with mremap (no copy), whose new entries are the
// mapping's own zero pages: an entry never written costs no RAM, nor does its page.
//
// T is trivially copyable; new entries read as `fill` (T{} is free; any other fill is
// written out, as a vector would). Not thread-safe.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

namespace eraid {

template <typename T>
class LbaTable {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  LbaTable() = default;
  LbaTable(const LbaTable&) = delete;
  LbaTable& operator=(const LbaTable&) = delete;
  LbaTable(LbaTable&& o) noexcept { *this = std::move(o); }
  LbaTable& operator=(LbaTable&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(size_, o.size_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~LbaTable() {
    if (p_ != nullptr) ::munmap(p_, bytes_);
  }

  uint64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T& operator[](uint64_t i) { return p_[i]; }
  const T& operator[](uint64_t i) const { return p_[i]; }
  T* data() { return p_; }
  const T* data() const { return p_; }
  T* begin() { return p_; }
  T* end() { return p_ + size_; }
  const T* begin() const { return p_; }
  const T* end() const { return p_ + size_; }

  // Grows to n entries (never shrinks), the new ones `fill`. The mapping's room grows by
  // doubling: address space, not memory.
  void resize(uint64_t n, T fill = T{}) {
    if (n <= size_) return;
    if (n * sizeof(T) > bytes_) {
      const uint64_t want = std::max<uint64_t>(RoundUp(n * sizeof(T)), bytes_ * 2);
      void* m = p_ == nullptr ? ::mmap(nullptr, want, PROT_READ | PROT_WRITE,
                                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
                              : ::mremap(p_, bytes_, want, MREMAP_MAYMOVE);
      if (m == MAP_FAILED) throw std::bad_alloc();
      p_ = static_cast<T*>(m);
      bytes_ = want;
    }
    // Entries past size_ are zero (fresh pages, never written: the table never shrinks).
    if (!IsZero(fill)) std::fill(p_ + size_, p_ + n, fill);
    size_ = n;
  }

 private:
  static uint64_t RoundUp(uint64_t b) {
    constexpr uint64_t kPage = 4096;
    return (b + kPage - 1) / kPage * kPage;
  }
  static bool IsZero(const T& v) {
    T zero{};
    return std::memcmp(&v, &zero, sizeof(T)) == 0;
  }

  T* p_ = nullptr;
  uint64_t size_ = 0;
  uint64_t bytes_ = 0;
};

}  // namespace eraid
