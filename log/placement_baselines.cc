#include <bit>
#include <cmath>

#include "log/placement_internal.h"

namespace eraid::placement_internal {
namespace {

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

Result<std::unique_ptr<Placement>> MakeBaseline(
    const std::string& name, std::shared_ptr<const std::vector<uint64_t>> future) {
  if (name == "nosep") return std::unique_ptr<Placement>(std::make_unique<NoSep>());
  if (name == "sepgc") return std::unique_ptr<Placement>(std::make_unique<SepGC>());
  if (name == "dac") return std::unique_ptr<Placement>(std::make_unique<Dac>());
  if (name == "fadac") return std::unique_ptr<Placement>(std::make_unique<Fadac>());
  if (name == "warcip") return std::unique_ptr<Placement>(std::make_unique<Warcip>());
  if (name == "fk" || name == "oracle") {
    if (!future)
      return Status::InvalidArgument(name + " needs the trace's future (trace replay only)");
    if (name == "oracle")
      return std::unique_ptr<Placement>(std::make_unique<Oracle>(std::move(future)));
    return std::unique_ptr<Placement>(std::make_unique<FutureKnowledge>(std::move(future)));
  }
  return std::unique_ptr<Placement>();
}

}  // namespace eraid::placement_internal
