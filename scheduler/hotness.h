// Segment hotness: decayed access counts per segment, ranked by density, with the paper's
// second chance as the demotion rule (docs/scheduler.md, "Hotness").
//
// One reference bit per segment (plain CLOCK) measures recency, and at real rates
// everything is recent: at 140k reads/s over a few hundred segments every segment is read
// within any sweep, so nothing ever looks cold. Here each segment counts its accesses in
// the current epoch (an atomic add from the reader's thread); closing an epoch folds the
// counts into a score that decays exponentially in time:
//
//   score = score · 2^(−epoch_length / half_life) + reads + invalidations / 4
//
// Ranking by score per stored block (density) separates hot from warm at any I/O rate:
// the rate scales every score alike, the ratios stay. An epoch closes once it is at least
// `epoch_ms` long *and* holds at least `min_epoch_accesses` accesses, so a nearly idle
// volume keeps its ranking instead of decaying it to noise; the decay an epoch applies is
// capped at four epochs' worth for the same reason (an idle night does not erase the day).
//
// Second chance: a mirrored segment the scheduler would demote to make room is first only
// marked (OfferDemotion returns false); it is demoted when it is still the victim in a
// later epoch. A conversion also starts a cooldown: the segment is not converted back by
// hotness within `cooldown_epochs`.
//
// Memory: 22 bytes per segment (two 4-byte atomic counters, two float scores, and three
// 2-byte stamps: the epochs of its second-chance mark and of its last conversion, modulo
// 2^16, and the low bits of the allocation generation it counts for).
//
// Thread-safety: OnRead and OnInvalidate from any thread at any time (relaxed atomics);
// everything else from one thread at a time (the scheduler's decision lock).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

#include "common/check.h"

namespace eraid {

struct HotnessOptions {
  uint64_t half_life_ms = 10'000;      // a score halves in this much (active) time
  uint64_t epoch_ms = 1'000;           // shortest epoch
  uint64_t min_epoch_accesses = 1024;  // an epoch closes only after this many accesses
  // No conversion back by hotness within this many epochs (0: a half-life's worth).
  uint32_t cooldown_epochs = 0;
};

class SegmentHotness {
 public:
  // Reads weigh 1 in a score, invalidations 1/4 (docs/scheduler.md says why).
  static constexpr uint32_t kReadWeight = 4, kInvalidationWeight = 1;

  SegmentHotness(uint32_t segments, const HotnessOptions& options, uint64_t now_ns);

  void OnRead(uint32_t s) {
    ERAID_CHECK(s < n_);
    reads_[s].fetch_add(1, std::memory_order_relaxed);
  }
  void OnInvalidate(uint32_t s) {
    ERAID_CHECK(s < n_);
    invalidations_[s].fetch_add(1, std::memory_order_relaxed);
  }

  // What the epoch close needs to know of a segment now.
  struct SegmentNow {
    bool mirrored = false;    // RAID10: its reads count towards read_coverage()
    uint64_t generation = 0;  // a new allocation of the segment starts from a zero score
  };
  // Closes the epoch if it is due (see above): folds the counts into the scores, and
  // measures the share of the epoch's reads that went to mirrored segments. Returns
  // whether it closed one.
  bool MaybeCloseEpoch(uint64_t now_ns, const std::function<SegmentNow(uint32_t)>& segment_now);

  // Decayed accesses (in reads) of the segment as of the last closed epoch.
  float score(uint32_t s) const {
    ERAID_CHECK(s < n_);
    return score_[s];
  }
  // Of which reads, and the decayed invalidations themselves (not weighed): what a
  // mirror would serve, and how fast the segment is being emptied (docs/scheduler.md,
  // "What a conversion must pay for").
  float read_score(uint32_t s) const {
    ERAID_CHECK(s < n_);
    return read_score_[s];
  }
  float invalidation_score(uint32_t s) const {
    const float v = (score_[s] - read_score_[s]) * float(kReadWeight) / float(kInvalidationWeight);
    return v > 0 ? v : 0;  // (rounding)
  }
  // Epochs closed so far.
  uint32_t epoch() const { return epoch_; }
  // Of the reads in the last closed epoch, the share served by mirrored segments (-1 before
  // the first epoch with reads).
  double read_coverage() const { return read_coverage_; }
  uint64_t last_epoch_reads() const { return last_epoch_reads_; }
  uint64_t last_epoch_invalidations() const { return last_epoch_invalidations_; }

  // The second chance. kDemote if `s` was offered in an earlier epoch, no more than two
  // epochs ago (it is still the victim); kWaiting if it was offered in this epoch;
  // otherwise it is marked now: kMarked.
  enum class Offer { kMarked, kWaiting, kDemote };
  Offer OfferDemotion(uint32_t s);
  // The scheduler converted `s`: its cooldown starts, and its mark is spent.
  void Converted(uint32_t s);
  bool InCooldown(uint32_t s) const;
  uint32_t size() const { return n_; }
  const HotnessOptions& options() const { return options_; }

 private:
  uint16_t Epoch16() const { return static_cast<uint16_t>(epoch_); }
  // A 16-bit stamp of the current epoch: 1 + epoch, as 0 means none (cleared long before
  // it could wrap), and the epochs since one.
  uint16_t Stamp() const {
    return static_cast<uint16_t>(Epoch16() + 1) ? static_cast<uint16_t>(Epoch16() + 1) : 1;
  }
  uint32_t Since(uint16_t stamp) const { return static_cast<uint16_t>(Stamp() - stamp); }

  uint32_t n_;
  HotnessOptions options_;
  std::unique_ptr<std::atomic<uint32_t>[]> reads_, invalidations_;
  std::unique_ptr<float[]> score_, read_score_;
  std::unique_ptr<uint16_t[]> chance_, converted_, generation_;
  uint32_t epoch_ = 0;
  uint64_t epoch_start_ns_;
  uint64_t next_check_ns_ = 0;  // a due epoch short of accesses is looked at again then
  double read_coverage_ = -1;
  uint64_t last_epoch_reads_ = 0, last_epoch_invalidations_ = 0;
};

}  // namespace eraid
