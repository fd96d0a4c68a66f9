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
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/check.h"

namespace eraid {

// __builtin_prefetch, kept: GCC 12 drops a prefetch whose block does nothing else (one
// under `if`, as in PagedLbaTable::Prefetch), which the empty asm, using its address, stops.
inline void PrefetchRead(const void* p) {
  __builtin_prefetch(p);
  asm volatile("" ::"r"(p));
}

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

// PagedLbaTable<T>: an LBA-indexed table that holds RAM only for the runs of kPage LBAs
// in which an entry was ever set, so its cost follows the blocks written, not the
// volume's size. An LbaTable still costs a whole 4 KiB page (512 map entries) for each
// page any write touched, and random writes over a large volume touch every page: 4 GiB
// of random 64 KiB writes over a 37 GB volume held 94 MB of map. Here a directory (an
// LbaTable of 4-byte page numbers, 1/4 byte per LBA) points at pages of kPage entries,
// handed out in order from a pool (an LbaTable too: grown without copying, its memory
// touched only as pages are handed out). Pages are never given back: an entry set to
// zero keeps its page.
//
// Reads never allocate: operator[] returns a value (T{} for a page never set). Writes go
// through ref(), which makes the page. All entries start T{}. Not thread-safe.
//
// Dense (chosen before the first resize): no directory, the pool indexed by LBA — an
// LbaTable behind the same interface, for a trace replay, whose working set is dense and
// whose every block pays for the directory's extra load (a fifth of SepBIT's replay time).
template <typename T, unsigned kPageBits = 4>
class PagedLbaTable {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  static constexpr uint64_t kPage = uint64_t{1} << kPageBits;

  void set_dense(bool dense) { dense_ = dense; }  // REQUIRES: size() == 0
  // Dense only: the entries, for loops that index them directly (valid until a resize).
  T* dense_data() {
    ERAID_CHECK(dense_);
    return pool_.data();
  }
  uint64_t size() const { return size_; }
  // Grows to n entries (never shrinks). REQUIRES for reads and writes: i < size().
  void resize(uint64_t n) {
    if (n <= size_) return;
    if (dense_) {
      pool_.resize(n);
    } else {
      dir_.resize((n + kPage - 1) >> kPageBits);
    }
    size_ = n;
  }
  T operator[](uint64_t i) const {
    if (dense_) return pool_[i];
    const uint32_t p = dir_[i >> kPageBits];
    return p == 0 ? T{} : Page(p)[i & (kPage - 1)];
  }
  T& ref(uint64_t i) {
    if (dense_) return pool_[i];
    uint32_t& p = dir_[i >> kPageBits];
    if (p == 0) p = NewPage();
    return Page(p)[i & (kPage - 1)];
  }
  // Starts loading entry i into the cache (the directory is small and usually cached).
  void Prefetch(uint64_t i) const {
    if (dense_) {
      PrefetchRead(&pool_[i]);
      return;
    }
    const uint32_t p = dir_[i >> kPageBits];
    if (p != 0) PrefetchRead(&Page(p)[i & (kPage - 1)]);
  }
  // fn(i, T&) for every entry of every page that exists (entries set at some time), in
  // LBA order: a scan that passes over the volume's never-written runs a page at a time.
  template <typename Fn>
  void ForEachPaged(Fn&& fn) {
    if (dense_) {
      for (uint64_t i = 0; i < size_; ++i) fn(i, pool_[i]);
      return;
    }
    const uint64_t n_dir = dir_.size();
    for (uint64_t d = 0; d < n_dir; ++d) {
      const uint32_t p = dir_[d];
      if (p == 0) continue;
      T* const page = Page(p);
      const uint64_t first = d << kPageBits, end = std::min(size_, first + kPage);
      for (uint64_t i = first; i < end; ++i) fn(i, page[i - first]);
    }
  }
  template <typename Fn>
  void ForEachPaged(Fn&& fn) const {
    const_cast<PagedLbaTable*>(this)->ForEachPaged(
        [&](uint64_t i, T& v) { fn(i, static_cast<const T&>(v)); });
  }
  uint64_t pages() const { return n_pages_; }
  // Memory held: pages handed out and the directory's extent (an upper bound on its RAM).
  uint64_t bytes() const {
    return dense_ ? size_ * sizeof(T)
                  : n_pages_ * kPage * sizeof(T) + dir_.size() * sizeof(uint32_t);
  }

 private:
  T* Page(uint32_t p) { return pool_.data() + (uint64_t{p} << kPageBits); }
  const T* Page(uint32_t p) const { return pool_.data() + (uint64_t{p} << kPageBits); }
  uint32_t NewPage() {
    // Page 0 is never handed out: a directory entry of 0 means "no page".
    if (pool_.size() == 0) pool_.resize(kPage * 1024);
    if ((uint64_t{n_pages_} + 2) << kPageBits > pool_.size()) pool_.resize(pool_.size() * 2);
    return ++n_pages_;
  }

  LbaTable<uint32_t> dir_;  // page number of each run of kPage LBAs; 0: none
  LbaTable<T> pool_;        // the pages, page p at entry p * kPage
  uint32_t n_pages_ = 0;
  uint64_t size_ = 0;
  bool dense_ = false;
};

}  // namespace eraid
