// The placements' shared parts (placement.cc chooses among them by name): per-LBA
// arrays, and each family's maker. SepBIT in placement_sepbit.cc, Hybrid in
// placement_hybrid.cc, the baselines the papers compare against (NoSep, SepGC, DAC,
// FADaC, WARCIP) and the two that know the future (FK, the oracle; trace replay only) in
// placement_baselines.cc.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "log/lba_table.h"
#include "log/placement.h"

namespace eraid::placement_internal {

constexpr double kInfinity = std::numeric_limits<double>::max();

// A per-LBA array that grows on demand (traces give no volume size up front).
template <typename T>
class LbaArray {
 public:
  explicit LbaArray(T fill = T{}) : fill_(fill) {}
  T get(uint64_t lba) const { return lba < v_.size() ? v_[lba] : fill_; }
  T& at(uint64_t lba) {
    if (lba >= v_.size()) {
      // Reserved exactly: resize alone takes twice the old size (libstdc++ grows capacity
      // by at least the current size). Not an LbaTable: its lazily faulted pages made
      // SepBIT's replay a third slower (every lookup lands on a new page at first).
      const uint64_t n = std::max<uint64_t>(lba + 1, v_.size() * 3 / 2 + 1024);
      v_.reserve(n);
      v_.resize(n, fill_);
    }
    return v_[lba];
  }
  uint64_t bytes() const { return v_.capacity() * sizeof(T); }
  void Prefetch(uint64_t lba) const {
    if (lba < v_.size()) __builtin_prefetch(&v_[lba]);
  }

 private:
  T fill_;
  std::vector<T> v_;
};

// LbaArray's interface over a PagedLbaTable (entries start at zero): per-LBA state that
// takes memory only for the runs of LBAs written — a live volume's, whose writes may be
// scattered over a large LBA space, where one array over all of it would cost 8 bytes per
// LBA of the volume however little of it is written.
template <typename T>
class PagedLbaArray {
 public:
  T get(uint64_t lba) const { return lba < t_.size() ? t_[lba] : T{}; }
  T& at(uint64_t lba) {
    if (lba >= t_.size()) t_.resize(std::max<uint64_t>(lba + 1, t_.size() * 3 / 2 + 4096));
    return t_.ref(lba);
  }
  void Prefetch(uint64_t lba) const {
    if (lba < t_.size()) t_.Prefetch(lba);
  }
  uint64_t bytes() const { return t_.bytes(); }

 private:
  PagedLbaTable<T> t_;
};

// SepBIT; `paged`: per-LBA state in pages (a live volume's sparse LBA space).
std::unique_ptr<Placement> MakeSepBIT(bool paged);
std::unique_ptr<Placement> MakeHybrid();
// nosep, sepgc, dac, fadac, warcip; fk and oracle given `future` (else InvalidArgument).
// nullptr if `name` is none of them.
Result<std::unique_ptr<Placement>> MakeBaseline(
    const std::string& name, std::shared_ptr<const std::vector<uint64_t>> future);

}  // namespace eraid::placement_internal
