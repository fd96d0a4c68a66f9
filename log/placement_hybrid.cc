#include <cmath>

#include "log/placement_internal.h"

namespace eraid::placement_internal {
namespace {

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

}  // namespace

std::unique_ptr<Placement> MakeHybrid() { return std::make_unique<Hybrid>(); }

}  // namespace eraid::placement_internal
