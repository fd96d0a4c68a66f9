#include <cmath>

#include "log/placement_internal.h"

namespace eraid::placement_internal {
namespace {

// SepBIT's per-LBA last write times (user time, from 1; 0: never written).
// A replay's: one array, 8 bytes per LBA up to the highest — dense and fastest.
class DenseWriteTimes {
 public:
  // A replay reports the FIFO's unique LBAs (the paper's memory figure): it keeps them.
  static constexpr bool kCountsUnique = true;
  uint64_t get(uint64_t lba, uint64_t /*now*/) const { return t_.get(lba); }
  void set(uint64_t lba, uint64_t now) { t_.at(lba) = now; }
  void Prefetch(uint64_t lba) const { t_.Prefetch(lba); }
  uint64_t bytes() const { return t_.bytes(); }

 private:
  LbaArray<uint64_t> t_;
};
// A volume's: pages over the LBAs written, and 4 bytes a time: the time modulo
// M = 2^32 - 1, plus one (0 stays "never"), read back as the latest time at or before now
// with that remainder. Exact for every time SepBIT looks at (the FIFO spans fewer than M
// writes); an LBA left unwritten for M blocks (16 TiB) of writes reads as younger than it
// is, which may place its next write with the short-lived ones — where it goes, never
// what is stored.
class PagedWriteTimes {
 public:
  // A volume keeps only the FIFO's length, which is all the class needs: its LBAs took 8
  // bytes per valid block until the first l is known (the FIFO is then every write).
  static constexpr bool kCountsUnique = false;
  uint64_t get(uint64_t lba, uint64_t now) const {
    const uint32_t t = t_.get(lba);
    if (t == 0) return 0;
    return now - (now % kM + kM - (t - 1)) % kM;
  }
  void set(uint64_t lba, uint64_t now) { t_.at(lba) = static_cast<uint32_t>(now % kM + 1); }
  void Prefetch(uint64_t lba) const { t_.Prefetch(lba); }
  uint64_t bytes() const { return t_.bytes(); }

 private:
  static constexpr uint64_t kM = UINT32_MAX;
  PagedLbaArray<uint32_t> t_;
};

// A bit per user time over a sliding window [first, last]: set, cleared and tested
// near the window's ends, the words before the window dropped now and then.
class TimeBits {
 public:
  void Set(uint64_t t) {
    const uint64_t w = Word(t);
    if (w >= words_.size()) words_.resize(w + 1, 0);
    words_[w] |= Bit(t);
  }
  void Clear(uint64_t t) {
    if (t >= base_ && Word(t) < words_.size()) words_[Word(t)] &= ~Bit(t);
  }
  bool Test(uint64_t t) const {
    return t >= base_ && Word(t) < words_.size() && (words_[Word(t)] & Bit(t)) != 0;
  }
  // Times before t will not be asked about again.
  void DropBefore(uint64_t t) {
    if (t < base_) return;
    const uint64_t w = Word(t);
    if (w > 1024 && w * 2 > words_.size()) {  // compact: the dropped words are most of it
      words_.erase(words_.begin(), words_.begin() + static_cast<long>(w));
      base_ += w * 64;
    }
  }
  uint64_t bytes() const { return words_.capacity() * sizeof(uint64_t); }

 private:
  uint64_t Word(uint64_t t) const { return (t - base_) >> 6; }
  static uint64_t Bit(uint64_t t) { return uint64_t{1} << (t & 63); }
  std::vector<uint64_t> words_;
  uint64_t base_ = 0;  // the time of words_[0]'s bit 0 (a multiple of 64)
};

template <typename LastWrites>
class SepBIT final : public Placement {
 public:
  const char* name() const override { return "sepbit"; }
  uint32_t classes() const override { return 6; }

  // The FIFO holds the last fifo_size() user writes, a contiguous run of user times, so
  // an LBA has an entry in it exactly when its last write is among them: the class needs
  // only each LBA's last write time (never cleared) and the FIFO's length. Counting its
  // unique LBAs (the paper's memory figure) takes a bit per entry: whether that write is
  // still its LBA's last (a later write of the LBA clears it). l is a real
  // number; against whole numbers of writes, x < l is x < ceil(l) and x > l is x > floor(l).
  uint32_t UserWrite(uint64_t lba, const PlacementContext& ctx) override {
    // Class 1 if the block this write invalidates was written within the last
    // min(l, |FIFO|) user writes, i.e. lived shorter than l.
    const uint64_t size = fifo_size();
    const uint64_t last = last_write_.get(lba, ctx.now);  // 0: never written
    const uint64_t age = ctx.now - last;
    const bool in_fifo = last != 0 && age <= size;
    const uint32_t cls = in_fifo && age < std::min(l_ceil_, size) ? 0 : 1;
    last_write_.set(lba, ctx.now);
    if constexpr (kCountsUnique) {
      unique_ += !in_fifo;
      if (in_fifo) last_of_lba_.Clear(last);
      last_of_lba_.Set(ctx.now);
    }
    ++fifo_length_;
    // Keep the FIFO no longer than min(valid blocks, l): one out per write, two while
    // shrinking after l dropped.
    if (size + 1 > ctx.valid_blocks || size + 1 > l_floor_) {
      PopFront(ctx.now);
      if (fifo_size() > l_floor_) PopFront(ctx.now);
    }
    peak_unique_ = std::max(peak_unique_, unique_);  // as the FIFO stands after the write
    return cls;
  }

  uint32_t GcWrite(uint64_t, uint64_t user_time, uint32_t from_class,
                   const PlacementContext& ctx) override {
    GcAgeBands bands;
    GcBandsFor(from_class, ctx, &bands);
    return bands.ClassOf(ctx.now - user_time);
  }
  // From class 1: class 3; others by age [0, 4l), [4l, 16l), [16l, inf): classes 4-6.
  bool GcBandsFor(uint32_t from_class, const PlacementContext&, GcAgeBands* out) const override {
    if (from_class == 0) {
      *out = {1, {UINT64_MAX}, {2}};
    } else {
      *out = {3, {Ceil(threshold_ * 4), Ceil(threshold_ * 16), UINT64_MAX}, {3, 4, 5}};
    }
    return true;
  }

  void SegmentCollected(uint32_t cls, uint64_t created, const PlacementContext& ctx) override {
    if (cls != 0) return;
    lifespan_total_ += static_cast<double>(ctx.now - created);
    if (++collected_ == kSegmentsPerUpdate) {
      threshold_ = lifespan_total_ / kSegmentsPerUpdate;
      l_floor_ = Floor(threshold_);
      l_ceil_ = Ceil(threshold_);
      collected_ = 0;
      lifespan_total_ = 0;
    }
  }

  PlacementStats stats() const override {
    return {threshold_ == kInfinity ? 0 : threshold_, unique_, peak_unique_, fifo_size(),
            last_write_.bytes() + last_of_lba_.bytes()};
  }
  void Prefetch(uint64_t lba) const override { last_write_.Prefetch(lba); }

 private:
  static constexpr int kSegmentsPerUpdate = 16;
  // Whole-number bounds of a non-negative real (saturating: infinity never reached).
  static uint64_t Floor(double x) { return x >= 0x1p64 ? UINT64_MAX : static_cast<uint64_t>(x); }
  static uint64_t Ceil(double x) {
    return x >= 0x1p64 ? UINT64_MAX : static_cast<uint64_t>(std::ceil(x));
  }
  static constexpr bool kCountsUnique = LastWrites::kCountsUnique;
  uint64_t fifo_size() const { return fifo_length_; }
  void PopFront(uint64_t now) {
    if constexpr (kCountsUnique) {
      // The head entry was written at user time now - size + 1; its LBA leaves the FIFO
      // if that was its last write.
      const uint64_t written = now - fifo_size() + 1;
      if (last_of_lba_.Test(written)) --unique_;
      last_of_lba_.DropBefore(written + 1);
    }
    --fifo_length_;
  }

  double threshold_ = kInfinity;  // l
  uint64_t l_floor_ = UINT64_MAX, l_ceil_ = UINT64_MAX;
  double lifespan_total_ = 0;
  int collected_ = 0;
  // kCountsUnique: per FIFO entry, by user time, whether it is its LBA's last write. A
  // bit read in time order, where the FIFO of LBAs it replaced cost a random lookup of the
  // head's last write time per write (a sixth of a one-block replay's placement work).
  TimeBits last_of_lba_;
  uint64_t fifo_length_ = 0;
  LastWrites last_write_;
  uint64_t unique_ = 0, peak_unique_ = 0;
};

}  // namespace

std::unique_ptr<Placement> MakeSepBIT(bool paged) {
  if (paged) return std::make_unique<SepBIT<PagedWriteTimes>>();
  return std::make_unique<SepBIT<DenseWriteTimes>>();
}

}  // namespace eraid::placement_internal
