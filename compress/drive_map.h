// DriveMap: the emulated drive's FTL map, LBA -> packed record location (0 = unmapped),
// held in pages of 512 entries that exist only while one of their entries is not 0.
//
// A drive exports an expanded logical space (its flash times the expansion factor), most
// of which an array never writes, or writes and trims again as its segments come and go.
// One flat array over that space cost 8 bytes per logical block from the first open (1 GiB
// of RAM for four 64 GiB drives) and made every checkpoint write all of it; paged, the map
// costs 8 bytes per *mapped* block plus 10 bytes per 512 logical blocks, and a checkpoint
// writes only the pages that exist (docs/format/compressed-drive.md, "Sparse map").
//
// Thread-safety: none; the drive holds its lock around every call.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/check.h"

namespace eraid {

class DriveMap {
 public:
  static constexpr uint32_t kPageShift = 9;
  static constexpr uint64_t kPageEntries = uint64_t{1} << kPageShift;
  using Page = std::array<uint64_t, kPageEntries>;

  explicit DriveMap(uint64_t size)
      : size_(size), pages_((size + kPageEntries - 1) >> kPageShift), used_(pages_.size(), 0) {}

  uint64_t size() const { return size_; }
  uint64_t page_count() const { return pages_.size(); }
  // Pages that exist now (each holds at least one entry that is not 0).
  uint64_t resident_pages() const { return resident_; }

  uint64_t Get(uint64_t lba) const {
    const Page* p = pages_[lba >> kPageShift].get();
    return p == nullptr ? 0 : (*p)[lba & (kPageEntries - 1)];
  }

  void Set(uint64_t lba, uint64_t value) {
    ERAID_CHECK(lba < size_);
    const uint64_t k = lba >> kPageShift;
    std::unique_ptr<Page>& p = pages_[k];
    if (p == nullptr) {
      if (value == 0) return;
      p = std::make_unique<Page>();  // value-initialised: all unmapped
      ++resident_;
    }
    uint64_t& e = (*p)[lba & (kPageEntries - 1)];
    used_[k] += static_cast<uint16_t>((value != 0) - (e != 0));
    e = value;
    if (used_[k] == 0) {
      p.reset();
      --resident_;
    }
  }

  // Page k's entries, or nullptr if all of them are 0.
  const Page* page(uint64_t k) const { return pages_[k].get(); }

  // Calls fn(lba, value) for every entry that is not 0, in LBA order.
  template <typename Fn>
  void ForEachSet(Fn&& fn) const {
    for (uint64_t k = 0; k < pages_.size(); ++k) {
      const Page* p = pages_[k].get();
      if (p == nullptr) continue;
      for (uint64_t i = 0; i < kPageEntries; ++i) {
        if ((*p)[i] != 0) fn((k << kPageShift) | i, (*p)[i]);
      }
    }
  }

  void Clear() {
    for (auto& p : pages_) p.reset();
    std::fill(used_.begin(), used_.end(), uint16_t{0});
    resident_ = 0;
  }

 private:
  uint64_t size_;
  std::vector<std::unique_ptr<Page>> pages_;
  std::vector<uint16_t> used_;  // per page: entries that are not 0 (<= 512)
  uint64_t resident_ = 0;
};

}  // namespace eraid
