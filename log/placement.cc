#include "log/placement.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "log/lba_table.h"

namespace eraid {
namespace {

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

class NoSep final : public Placement {
 public:
  const char* name() const override { return "nosep"; }
  uint32_t classes() const override { return 1; }
  uint32_t UserWrite(uint64_t, const PlacementContext&) override { return 0; }
  uint32_t GcWrite(uint64_t, uint64_t, uint32_t, const PlacementContext&) override { return 0; }
  bool GcBandsFor(uint32_t, const PlacementContext&, GcAgeBands* out) const override {
    *out = {1, {UINT64_MAX}, {0}};
    return true;
  }
};

class SepGC final : public Placement {
 public:
  const char* name() const override { return "sepgc"; }
  uint32_t classes() const override { return 2; }
  uint32_t UserWrite(uint64_t, const PlacementContext&) override { return 0; }
  uint32_t GcWrite(uint64_t, uint64_t, uint32_t, const PlacementContext&) override { return 1; }
  bool GcBandsFor(uint32_t, const PlacementContext&, GcAgeBands* out) const override {
    *out = {1, {UINT64_MAX}, {1}};
    return true;
  }
};

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

class FutureKnowledge final : public Placement {
 public:
  explicit FutureKnowledge(std::shared_ptr<const std::vector<uint64_t>> lifespans)
      : lifespans_(std::move(lifespans)) {}
  const char* name() const override { return "fk"; }
  uint32_t classes() const override { return 6; }
  uint32_t UserWrite(uint64_t lba, const PlacementContext& ctx) override {
    uint64_t life = ctx.now - 1 < lifespans_->size() ? (*lifespans_)[ctx.now - 1] : UINT64_MAX;
    if (life == UINT64_MAX) life = UINT64_MAX - ctx.now;  // never again: as far as possible
    written_.at(lba) = ctx.now;
    life_.at(lba) = life;
    return Classify(lba, ctx);
  }
  uint32_t GcWrite(uint64_t lba, uint64_t, uint32_t, const PlacementContext& ctx) override {
    return Classify(lba, ctx);
  }

 private:
  uint32_t Classify(uint64_t lba, const PlacementContext& ctx) const {
    const uint64_t remaining = written_.get(lba) + life_.get(lba) - ctx.now;
    return static_cast<uint32_t>(std::min<uint64_t>(remaining / ctx.segment_blocks, classes() - 1));
  }
  std::shared_ptr<const std::vector<uint64_t>> lifespans_;
  LbaArray<uint64_t> written_{0}, life_{0};
};

class Oracle final : public Placement {
 public:
  explicit Oracle(std::shared_ptr<const std::vector<uint64_t>> lifespans)
      : lifespans_(std::move(lifespans)) {}
  const char* name() const override { return "oracle"; }
  uint32_t classes() const override { return kRing + kFar + 1; }
  uint32_t UserWrite(uint64_t lba, const PlacementContext& ctx) override {
    Advance(ctx);
    const uint64_t life =
        ctx.now - 1 < lifespans_->size() ? (*lifespans_)[ctx.now - 1] : UINT64_MAX;
    const uint64_t death = life == UINT64_MAX ? UINT64_MAX : ctx.now + life;
    death_.at(lba) = death;
    return Classify(death, ctx);
  }
  uint32_t GcWrite(uint64_t lba, uint64_t, uint32_t, const PlacementContext& ctx) override {
    return Classify(death_.get(lba), ctx);
  }

 private:
  static constexpr uint32_t kRing = 64, kFar = 40;
  // Windows are segment-size runs of user writes; window w's blocks die in
  // [w * S, (w + 1) * S), and at most S blocks can (one user write kills one block).
  uint32_t Classify(uint64_t death, const PlacementContext& ctx) const {
    if (death == UINT64_MAX) return kRing + kFar;
    const uint64_t window = death / ctx.segment_blocks, ahead = window - current_;
    if (ahead < kRing) return static_cast<uint32_t>(window % kRing);
    const auto far = static_cast<uint32_t>(std::bit_width(ahead / kRing) - 1);
    return kRing + std::min(far, kFar - 1);
  }
  // Seals the classes of windows that have ended (all their blocks are dead).
  void Advance(const PlacementContext& ctx) {
    const uint64_t window = (ctx.now - 1) / ctx.segment_blocks;
    for (; current_ < window; ++current_)
      seal_requests_.push_back(static_cast<uint32_t>(current_ % kRing));
  }
  std::shared_ptr<const std::vector<uint64_t>> lifespans_;
  uint64_t current_ = 0;
  LbaArray<uint64_t> death_{UINT64_MAX};
};

// Hybrid (docs/log.md, "Hybrid"): a block's class is where its predicted next invalidation
// falls on a log2 scale of the log's size. The prediction is its LBA's rewrite interval,
// averaged (an exponentially weighted mean of log2 intervals: per-LBA temperature, as
// DAC and FADaC have, that follows a moving hot set, as SepBIT's last lifespan does),
// then shrunk toward the mean by how well such predictions have come true so far (a
// least-squares line through (prediction, next interval) pairs, exponentially
// forgotten): on a workload without per-LBA skew (uniform) every prediction falls to the
// mean and user writes share a class, where separation by noise would cost WA.
//   user writes  bins 0..11 by the prediction: [V/2^11 .. V) in octaves, V = valid blocks;
//                class 12: LBAs never written before
//   GC rewrites  classes 13..25, bins of max(prediction, age) (a survivor is at least as
//                cold as it has proven to be; an LBA written once: its age, one octave on)
// State: 6 bytes per LBA written (the user time of its last write, 32 bits — an interval
// of 2^32 writes or more reads as its remainder — and the average, 16-bit fixed point).
class Hybrid final : public Placement {
 public:
  const char* name() const override { return "hybrid"; }
  uint32_t classes() const override { return 2 * (kBins + 1); }

  uint32_t UserWrite(uint64_t lba, const PlacementContext& ctx) override {
    uint16_t& avg = average_.at(lba);
    uint32_t& last = last_.at(lba);
    uint32_t cls = kBins;  // never written: unknown
    if (avg != kNever) {
      const double v =
          std::log2(double(static_cast<uint32_t>(static_cast<uint32_t>(ctx.now) - last)));
      double mean = v;
      if (avg != kOnce) {
        const double before = Decode(avg);
        Learn(before, v);
        mean = kWeight * v + (1 - kWeight) * before;
      }
      avg = Encode(mean);
      cls = Bin(Predict(mean), ctx);
    } else {
      avg = kOnce;
    }
    last = static_cast<uint32_t>(ctx.now);
    return cls;
  }

  uint32_t GcWrite(uint64_t lba, uint64_t user_time, uint32_t,
                   const PlacementContext& ctx) override {
    const uint16_t avg = average_.get(lba);
    const double age = std::log2(double(std::max<uint64_t>(1, ctx.now - user_time)));
    const double prediction =
        avg == kNever || avg == kOnce ? age + 1 : std::max(Predict(Decode(avg)), age);
    return kBins + 1 + Bin(prediction, ctx);
  }
  void Prefetch(uint64_t lba) const override {
    average_.Prefetch(lba);
    last_.Prefetch(lba);
  }
  PlacementStats stats() const override {
    PlacementStats s;
    s.lba_state_bytes = average_.bytes() + last_.bytes();
    return s;
  }

 private:
  static constexpr uint32_t kBins = 12;
  static constexpr double kWeight = 0.25;           // of the newest interval in the average
  static constexpr double kForget = 1.0 / 65536;    // the fit's memory: ~64Ki user writes
  static constexpr uint16_t kNever = 0, kOnce = 1;  // average_ values below any average
  static constexpr double kFixed = 256;             // 8 fraction bits: log2 up to 255

  static uint16_t Encode(double log2_interval) {
    return static_cast<uint16_t>(std::clamp(log2_interval * kFixed, 0.0, 65533.0)) + 2;
  }
  static double Decode(uint16_t v) { return (v - 2) / kFixed; }

  void Learn(double p, double v) {
    n_ += 1 - n_ * kForget;
    sp_ += p - sp_ * kForget;
    sv_ += v - sv_ * kForget;
    spp_ += p * p - spp_ * kForget;
    spv_ += p * v - spv_ * kForget;
  }
  // The fitted outcome for a prediction: mean + slope * (p - mean), slope in [0, 1].
  double Predict(double p) const {
    if (n_ < 1024) return p;  // too little seen to judge
    const double mp = sp_ / n_, mv = sv_ / n_;
    const double var = spp_ / n_ - mp * mp, cov = spv_ / n_ - mp * mv;
    const double slope = var > 1e-9 ? std::clamp(cov / var, 0.0, 1.0) : 0.0;
    return mv + slope * (p - mp);
  }
  // Octaves below the log's size; the last bin is everything at or beyond it.
  static uint32_t Bin(double log2_interval, const PlacementContext& ctx) {
    const double size = std::log2(std::max<double>(1.0, double(ctx.valid_blocks)));
    const double b = std::floor(log2_interval - size) + kBins - 1;
    return static_cast<uint32_t>(std::clamp(b, 0.0, double(kBins - 1)));
  }

  double n_ = 0, sp_ = 0, sv_ = 0, spp_ = 0, spv_ = 0;
  LbaArray<uint16_t> average_{kNever};
  LbaArray<uint32_t> last_{0};
};

class Dac final : public Placement {
 public:
  const char* name() const override { return "dac"; }
  uint32_t classes() const override { return 6; }
  uint32_t UserWrite(uint64_t lba, const PlacementContext&) override {
    int8_t& level = level_.at(lba);
    if (level < 0)
      level = 0;
    else if (level < static_cast<int8_t>(classes() - 1))
      ++level;
    return static_cast<uint32_t>(level);
  }
  void Prefetch(uint64_t lba) const override { level_.Prefetch(lba); }
  uint32_t GcWrite(uint64_t lba, uint64_t, uint32_t, const PlacementContext&) override {
    int8_t& level = level_.at(lba);
    if (level > 0) --level;
    return static_cast<uint32_t>(std::max<int8_t>(level, 0));
  }

 private:
  LbaArray<int8_t> level_{-1};
};

class Fadac final : public Placement {
 public:
  const char* name() const override { return "fadac"; }
  uint32_t classes() const override { return 6; }
  void OnRequest(uint64_t, uint64_t blocks, const PlacementContext& ctx) override {
    if (ctx.valid_blocks == 0) return;
    const auto v = static_cast<double>(ctx.valid_blocks);
    fading_ = fading_ + static_cast<double>(blocks) / v - fading_ / v;
  }
  void Prefetch(uint64_t lba) const override { count_.Prefetch(lba); }
  uint32_t UserWrite(uint64_t lba, const PlacementContext&) override {
    ++count_.at(lba);
    return Classify(lba);
  }
  uint32_t GcWrite(uint64_t lba, uint64_t, uint32_t, const PlacementContext&) override {
    if (count_.get(lba) > 0) --count_.at(lba);
    return Classify(lba);
  }

 private:
  uint32_t Classify(uint64_t lba) const {
    double bound = fading_;
    uint32_t level = 0;
    const auto count = static_cast<double>(count_.get(lba));
    if (bound != 0.0) {
      while (count > bound) {
        bound *= 10;
        ++level;
      }
    }
    return std::min(level, classes() - 1);
  }
  double fading_ = 0;
  LbaArray<uint32_t> count_{0};
};

// WARCIP (Yang et al., SYSTOR'19) with the reference simulator's semantics: class 0 takes
// GC rewrites; user writes join the cluster whose centre (mean rewrite interval, in trace
// microseconds) is nearest. Every 256 sealed user segments, a cluster with more than half
// of the writes is split (if fewer than the maximum exist), else the first small one is
// marked to be merged away when its segment next seals.
class Warcip final : public Placement {
 public:
  const char* name() const override { return "warcip"; }
  uint32_t classes() const override { return kMax; }

  uint32_t UserWrite(uint64_t lba, const PlacementContext& ctx) override {
    const int64_t last = last_us_.get(lba);
    const double ui = last < 0 ? 0.0
                               : static_cast<double>(ctx.timestamp_us) - static_cast<double>(last) +
                                     static_cast<double>(penalty_us_.get(lba));
    last_us_.at(lba) = static_cast<int64_t>(ctx.timestamp_us);
    penalty_us_.at(lba) = 0;
    size_t nearest = 1;
    double best = std::numeric_limits<double>::max();
    for (size_t i = centers_.size() - 1; i >= 1; --i) {
      const double diff = std::abs(centers_[i] - ui);
      if (diff < best) {
        nearest = i;
        best = diff;
      }
    }
    centers_[nearest] = (centers_[nearest] * static_cast<double>(blocks_[nearest]) + ui) /
                        static_cast<double>(blocks_[nearest] + 1);
    ++blocks_[nearest];
    ++writes_[nearest];
    ++total_writes_;
    return static_cast<uint32_t>(nearest);
  }

  uint32_t GcWrite(uint64_t lba, uint64_t, uint32_t, const PlacementContext& ctx) override {
    penalty_us_.at(lba) = static_cast<int64_t>(ctx.timestamp_us) - last_us_.get(lba);
    return 0;
  }

  SealDecision OnSealed(uint32_t cls, const PlacementContext& ctx) override {
    segment_blocks_ = ctx.segment_blocks;
    SealDecision d;
    if (cls != 0) ++sealed_user_;
    if (next_merge_ == static_cast<int>(cls)) {
      d.reopen = false;
      centers_.erase(centers_.begin() + cls);
      blocks_.erase(blocks_.begin() + cls);
      writes_.erase(writes_.begin() + cls);
      next_merge_ = -1;
    } else {
      blocks_[cls] = 0;
    }
    if (sealed_user_ == kSplitMergePeriod) {
      sealed_user_ = 0;
      d.split_at = SplitAndMerge();
    }
    return d;
  }

 private:
  static constexpr uint32_t kMax = 6;
  static constexpr uint64_t kSplitMergePeriod = 256;
  int SplitAndMerge() {
    int split = -1;
    for (size_t i = 1; i < writes_.size(); ++i) {
      if (writes_[i] > total_writes_ / 2) {
        if (centers_.size() < kMax) {
          split = static_cast<int>(i);
          centers_.insert(centers_.begin() + static_cast<long>(i),
                          (centers_[i - 1] + centers_[i]) / 2);
          blocks_.insert(blocks_.begin() + static_cast<long>(i), 0);
          writes_.insert(writes_.begin() + static_cast<long>(i), 0);
          break;
        }
      }
    }
    if (split < 0 && writes_.size() > 2) {  // keep one user cluster (the reference would crash)
      for (size_t i = 1; i < writes_.size(); ++i) {
        if (writes_[i] < segment_blocks_) {
          if (next_merge_ == -1) next_merge_ = static_cast<int>(i);
          break;
        }
      }
    }
    total_writes_ = 0;
    std::fill(writes_.begin(), writes_.end(), 0);
    return split;
  }

  std::vector<double> centers_ = std::vector<double>(kMax, 0.0);
  std::vector<uint64_t> blocks_ = std::vector<uint64_t>(kMax, 0),
                        writes_ = std::vector<uint64_t>(kMax, 0);
  uint64_t total_writes_ = 0, sealed_user_ = 0, segment_blocks_ = 0;
  int next_merge_ = -1;
  LbaArray<int64_t> last_us_{-1}, penalty_us_{0};
};

}  // namespace

std::vector<std::string> PlacementNames() {
  return {"sepbit", "nosep", "sepgc", "fk", "oracle", "dac", "fadac", "warcip", "hybrid"};
}

Result<std::unique_ptr<Placement>> MakePlacement(
    const std::string& name, std::shared_ptr<const std::vector<uint64_t>> future, bool paged) {
  if (name == "sepbit") {
    if (paged) return std::unique_ptr<Placement>(new SepBIT<PagedWriteTimes>());
    return std::unique_ptr<Placement>(new SepBIT<DenseWriteTimes>());
  }
  if (name == "nosep") return std::unique_ptr<Placement>(new NoSep());
  if (name == "sepgc") return std::unique_ptr<Placement>(new SepGC());
  if (name == "dac") return std::unique_ptr<Placement>(new Dac());
  if (name == "hybrid") return std::unique_ptr<Placement>(new Hybrid());
  if (name == "fadac") return std::unique_ptr<Placement>(new Fadac());
  if (name == "warcip") return std::unique_ptr<Placement>(new Warcip());
  if (name == "fk" || name == "oracle") {
    if (!future)
      return Status::InvalidArgument(name + " needs the trace's future (trace replay only)");
    if (name == "oracle") return std::unique_ptr<Placement>(new Oracle(std::move(future)));
    return std::unique_ptr<Placement>(new FutureKnowledge(std::move(future)));
  }
  std::string all;
  for (const auto& n : PlacementNames()) all += (all.empty() ? "" : ", ") + n;
  return Status::InvalidArgument("unknown placement '" + name + "' (one of: " + all + ")");
}

}  // namespace eraid
