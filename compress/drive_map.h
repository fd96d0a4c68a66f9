// DriveMap: the emulated drive's FTL map, LBA -> packed record location (PackLoc; 0 =
// unmapped, 1 = kLostBlock), held in 6 bytes an entry, in runs of 16 entries that exist
// only while one of their entries is not 0.
//
// A drive exports an expanded logical space (its flash times the expansion factor), most
// of which an array never writes, or writes and trims again as its segments come and go.
// One flat array over that space cost 8 bytes per logical block from the first open (1 GiB
// of RAM for four 64 GiB drives) and made every checkpoint write all of it. Pages of 512
// entries cost 8 bytes per mapped block only where writes fill whole pages; an array's do
// not: a RAID10 segment leaves one chunk in four of each device's slot-1 unwritten, a
// RAID5 one all of slot-2, so a page held 4/3 to 2 times its mapped entries. Runs of 16
// entries (an array chunk is 16 blocks or a multiple, and chunk-aligned: every hole is
// whole runs) cost 6 bytes per mapped block, 96 bytes per run, plus a 4-byte directory
// entry per 16 logical blocks (calloc'd: resident only where runs were made).
//
// 6 bytes hold a location when the record's offset and footprint are multiples of the
// drive's record alignment 2^a (format 2: a = 4): (offset >> a) in the top 35 + a bits,
// (footprint >> a) in the 13 - a below. Flash of up to 2^(35 + 2a) bytes: 8 TiB at a = 4,
// 32 GiB for a format-1 drive (a = 0), which the drive checks at open (MaxFlashBytes).
//
// The checkpoint still writes 512-entry pages of 8-byte PackLoc words, those with an entry
// that is not 0 (docs/format/compressed-drive.md, "Sparse map"): CopyPage assembles one
// from its runs.
//
// Thread-safety: none; the drive holds its lock around every call.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

#include "common/check.h"
#include "compress/drive_format.h"

namespace eraid {

class DriveMap {
 public:
  static constexpr uint32_t kPageShift = 9;  // the checkpoint's pages
  static constexpr uint64_t kPageEntries = uint64_t{1} << kPageShift;
  static constexpr uint32_t kRunShift = 4;
  static constexpr uint64_t kRunEntries = uint64_t{1} << kRunShift;

  // Flash bytes whose every location fits an entry, for records aligned to 2^align_shift.
  static constexpr uint64_t MaxFlashBytes(uint32_t align_shift) {
    return uint64_t{1} << (kEntryBits - drive_format::kLocLengthBits + 2 * align_shift);
  }

  explicit DriveMap(uint64_t size, uint32_t align_shift)
      : align_shift_(align_shift),
        size_(size),
        runs_in_dir_((size + kRunEntries - 1) >> kRunShift),
        dir_(static_cast<uint32_t*>(std::calloc(std::max<uint64_t>(runs_in_dir_, 1), 4))),
        page_runs_((size + kPageEntries - 1) >> kPageShift, 0) {
    if (!dir_) throw std::bad_alloc();
  }

  uint64_t size() const { return size_; }
  uint64_t page_count() const { return page_runs_.size(); }
  // Checkpoint pages that hold at least one entry that is not 0.
  uint64_t resident_pages() const { return resident_pages_; }
  // Runs that exist now (each holds at least one entry that is not 0).
  uint64_t resident_runs() const { return pool_.size() - free_.size(); }
  // RAM held: the run pool and its side tables as far as used (a vector's capacity past
  // its size is not touched, so not resident), and the directory's 4 KiB pages that hold
  // a run (the rest of the calloc'd directory was never touched).
  uint64_t bytes() const {
    uint64_t dir_pages = 0;
    constexpr uint64_t kPagesPerDirPage = 4096 / 4 / (kPageEntries >> kRunShift);  // 32
    for (uint64_t k = 0; k < page_runs_.size(); k += kPagesPerDirPage) {
      const uint64_t end = std::min<uint64_t>(page_runs_.size(), k + kPagesPerDirPage);
      dir_pages += std::any_of(page_runs_.begin() + static_cast<long>(k),
                               page_runs_.begin() + static_cast<long>(end),
                               [](uint8_t n) { return n != 0; });
    }
    return pool_.size() * sizeof(Run) + used_.size() + free_.size() * 4 + page_runs_.size() +
           dir_pages * 4096;
  }

  // Whether an entry can hold `loc`: 0, kLostBlock, or a location inside the mappable
  // flash whose offset and footprint are multiples of the alignment.
  bool Holds(uint64_t loc) const {
    if (loc <= drive_format::kLostBlock) return true;
    const uint64_t offset = drive_format::LocOffset(loc);
    const uint64_t mask = (uint64_t{1} << align_shift_) - 1;
    return offset > 0 && offset < MaxFlashBytes(align_shift_) &&
           ((offset | drive_format::LocLength(loc)) & mask) == 0;
  }

  uint64_t Get(uint64_t lba) const {
    const uint32_t r = dir_[lba >> kRunShift];
    return r == 0 ? 0 : Expand(pool_[r - 1].Load(lba & (kRunEntries - 1)));
  }

  // Room for `runs` runs without the pool moving (a checkpoint's load knows how many pages
  // it brings, and so how many runs at most).
  void Reserve(uint64_t runs) {
    pool_.reserve(runs);
    used_.reserve(runs);
  }
  void Set(uint64_t lba, uint64_t loc) {
    ERAID_CHECK(lba < size_);
    const uint64_t value = Compact(loc);
    uint32_t& r = dir_[lba >> kRunShift];
    if (r == 0) {
      if (value == 0) return;
      r = NewRun();
      if (page_runs_[lba >> kPageShift]++ == 0) ++resident_pages_;
    }
    Run& run = pool_[r - 1];
    const uint64_t i = lba & (kRunEntries - 1);
    uint8_t& used = used_[r - 1];
    used = static_cast<uint8_t>(used + (value != 0) - (run.Load(i) != 0));
    run.Store(i, value);
    if (used == 0) {
      free_.push_back(r);
      r = 0;
      if (--page_runs_[lba >> kPageShift] == 0) --resident_pages_;
    }
  }

  // Checkpoint page k's entries into out[0, kPageEntries) (zeros where no run exists);
  // false, writing nothing, if every entry of the page is 0.
  bool CopyPage(uint64_t k, uint64_t* out) const {
    if (page_runs_[k] == 0) return false;
    const uint64_t first = k << (kPageShift - kRunShift);
    const uint64_t end = std::min(runs_in_dir_, first + (kPageEntries >> kRunShift));
    std::fill(out, out + kPageEntries, uint64_t{0});
    for (uint64_t d = first; d < end; ++d) {
      if (const uint32_t r = dir_[d]) {
        for (uint64_t i = 0; i < kRunEntries; ++i)
          out[(d - first) * kRunEntries + i] = Expand(pool_[r - 1].Load(i));
      }
    }
    return true;
  }

  // Calls fn(lba, value) for every entry that is not 0, in LBA order.
  template <typename Fn>
  void ForEachSet(Fn&& fn) const {
    for (uint64_t k = 0; k < page_runs_.size(); ++k) {
      if (page_runs_[k] == 0) continue;  // skips 32 directory entries at once
      const uint64_t first = k << (kPageShift - kRunShift);
      const uint64_t end = std::min(runs_in_dir_, first + (kPageEntries >> kRunShift));
      for (uint64_t d = first; d < end; ++d) {
        const uint32_t r = dir_[d];
        if (r == 0) continue;
        for (uint64_t i = 0; i < kRunEntries; ++i) {
          if (const uint64_t v = pool_[r - 1].Load(i)) fn((d << kRunShift) | i, Expand(v));
        }
      }
    }
  }

  void Clear() {
    // Only where runs are: the rest of the directory is zero, and untouched (not resident).
    for (uint64_t k = 0; k < page_runs_.size(); ++k) {
      if (page_runs_[k] == 0) continue;
      const uint64_t first = k << (kPageShift - kRunShift);
      const uint64_t end = std::min(runs_in_dir_, first + (kPageEntries >> kRunShift));
      std::fill(dir_.get() + first, dir_.get() + end, uint32_t{0});
      page_runs_[k] = 0;
    }
    std::vector<Run>().swap(pool_);
    std::vector<uint8_t>().swap(used_);
    std::vector<uint32_t>().swap(free_);
    resident_pages_ = 0;
  }

 private:
  static constexpr uint32_t kEntryBits = 48;
  // 48-bit entries, split so a run packs without padding.
  struct Run {
    std::array<uint16_t, kRunEntries> lo{};
    std::array<uint32_t, kRunEntries> hi{};
    uint64_t Load(uint64_t i) const { return uint64_t{hi[i]} << 16 | lo[i]; }
    void Store(uint64_t i, uint64_t v) {
      lo[i] = static_cast<uint16_t>(v);
      hi[i] = static_cast<uint32_t>(v >> 16);
    }
  };
  static_assert(sizeof(Run) == kRunEntries * kEntryBits / 8);
  // PackLoc <-> entry. 0 (unmapped) and 1 (kLostBlock) are kept as they are: no record
  // lies at offset 0 (the superblock), so no location packs to either.
  uint64_t Compact(uint64_t loc) const {
    if (loc <= drive_format::kLostBlock) return loc;
    ERAID_CHECK(Holds(loc));
    return (drive_format::LocOffset(loc) >> align_shift_)
               << (drive_format::kLocLengthBits - align_shift_) |
           (drive_format::LocLength(loc) >> align_shift_);
  }
  uint64_t Expand(uint64_t v) const {
    if (v <= drive_format::kLostBlock) return v;
    const uint32_t length_bits = drive_format::kLocLengthBits - align_shift_;
    return drive_format::PackLoc((v >> length_bits) << align_shift_,
                                 static_cast<uint32_t>(v & ((uint64_t{1} << length_bits) - 1))
                                     << align_shift_);
  }
  struct FreeDeleter {
    void operator()(uint32_t* p) const { std::free(p); }
  };
  // A run of all zeros: a freed one, or a new one at the pool's end. Returns index + 1.
  uint32_t NewRun() {
    if (!free_.empty()) {
      const uint32_t r = free_.back();
      free_.pop_back();
      return r;  // its entries are all 0 again (used fell to 0)
    }
    ERAID_CHECK(pool_.size() < UINT32_MAX);
    pool_.emplace_back();
    used_.push_back(0);
    return static_cast<uint32_t>(pool_.size());
  }

  uint32_t align_shift_;
  uint64_t size_;
  uint64_t runs_in_dir_;
  std::unique_ptr<uint32_t[], FreeDeleter> dir_;  // per 16 LBAs: its run's index + 1, or 0
  std::vector<Run> pool_;
  std::vector<uint8_t> used_;       // per run of the pool: its entries that are not 0
  std::vector<uint32_t> free_;      // runs of the pool not in use (index + 1)
  std::vector<uint8_t> page_runs_;  // per checkpoint page: its runs (<= 32)
  uint64_t resident_pages_ = 0;
};

}  // namespace eraid
