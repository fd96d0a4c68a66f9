#include "scheduler/hotness.h"

#include <algorithm>
#include <cmath>

namespace eraid {

SegmentHotness::SegmentHotness(uint32_t segments, const HotnessOptions& options, uint64_t now_ns)
    : n_(segments),
      options_(options),
      reads_(new std::atomic<uint32_t>[segments]),
      invalidations_(new std::atomic<uint32_t>[segments]),
      score_(new float[segments]),
      read_score_(new float[segments]),
      chance_(new uint16_t[segments]),
      converted_(new uint16_t[segments]),
      generation_(new uint16_t[segments]),
      epoch_start_ns_(now_ns) {
  if (options_.epoch_ms == 0) options_.epoch_ms = 1;
  if (options_.cooldown_epochs == 0) {
    options_.cooldown_epochs =
        static_cast<uint32_t>(std::max<uint64_t>(1, options_.half_life_ms / options_.epoch_ms));
  }
  for (uint32_t s = 0; s < n_; ++s) {
    reads_[s].store(0, std::memory_order_relaxed);
    invalidations_[s].store(0, std::memory_order_relaxed);
    score_[s] = read_score_[s] = 0;
    chance_[s] = converted_[s] = generation_[s] = 0;
  }
}

bool SegmentHotness::MaybeCloseEpoch(uint64_t now_ns,
                                     const std::function<SegmentNow(uint32_t)>& segment_now) {
  const uint64_t epoch_ns = options_.epoch_ms * 1'000'000;
  if (now_ns < epoch_start_ns_ + epoch_ns || now_ns < next_check_ns_) return false;
  uint64_t accesses = 0;
  for (uint32_t s = 0; s < n_; ++s) {
    accesses += reads_[s].load(std::memory_order_relaxed) +
                invalidations_[s].load(std::memory_order_relaxed);
  }
  if (accesses < options_.min_epoch_accesses) {
    next_check_ns_ = now_ns + epoch_ns / 4;  // a nearly idle volume: keep counting
    return false;
  }
  // Decay for the epoch's length, but for no more than four epochs: time without I/O
  // teaches nothing about which segments are hot.
  const double length_ns = double(std::min(now_ns - epoch_start_ns_, 4 * epoch_ns));
  const float decay = float(std::exp2(-length_ns / (double(options_.half_life_ms) * 1e6)));
  uint64_t reads_all = 0, reads_mirrored = 0, invalidations_all = 0;
  ++epoch_;  // the stamps below are judged against the epoch that starts now
  for (uint32_t s = 0; s < n_; ++s) {
    const uint32_t r = reads_[s].exchange(0, std::memory_order_relaxed);
    const uint32_t v = invalidations_[s].exchange(0, std::memory_order_relaxed);
    const SegmentNow now = segment_now(s);
    const uint16_t gen = static_cast<uint16_t>(now.generation);
    if (gen != generation_[s]) {  // freed and allocated again: the old data's score is not its
      generation_[s] = gen;
      score_[s] = read_score_[s] = 0;
      chance_[s] = 0;
    }
    score_[s] =
        score_[s] * decay +
        float(kReadWeight * uint64_t(r) + kInvalidationWeight * uint64_t(v)) / float(kReadWeight);
    read_score_[s] = read_score_[s] * decay + float(r);
    reads_all += r;
    invalidations_all += v;
    if (now.mirrored) reads_mirrored += r;
    // Stamps that have done their work are cleared, so none is old enough to wrap.
    if (chance_[s] != 0 && Since(chance_[s]) > 2) chance_[s] = 0;
    if (converted_[s] != 0 && Since(converted_[s]) >= options_.cooldown_epochs) converted_[s] = 0;
  }
  epoch_start_ns_ = now_ns;
  next_check_ns_ = 0;
  last_epoch_reads_ = reads_all;
  last_epoch_invalidations_ = invalidations_all;
  if (reads_all > 0) read_coverage_ = double(reads_mirrored) / double(reads_all);
  return true;
}

SegmentHotness::Offer SegmentHotness::OfferDemotion(uint32_t s) {
  ERAID_CHECK(s < n_);
  const uint16_t mark = chance_[s];
  if (mark != 0) {
    const uint32_t since = Since(mark);
    if (since >= 1 && since <= 2) return Offer::kDemote;
    if (since == 0) return Offer::kWaiting;
  }
  chance_[s] = Stamp();
  return Offer::kMarked;
}

void SegmentHotness::Converted(uint32_t s) {
  ERAID_CHECK(s < n_);
  converted_[s] = Stamp();
  chance_[s] = 0;
}

bool SegmentHotness::InCooldown(uint32_t s) const {
  ERAID_CHECK(s < n_);
  return converted_[s] != 0 && Since(converted_[s]) < options_.cooldown_epochs;
}

}  // namespace eraid
