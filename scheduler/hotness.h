// Segment hotness by second chance (CLOCK): one reference bit per segment, set when the
// segment is read or one of its blocks is invalidated. The hand sweeps the segments in
// order; a set bit is cleared and passed by (the segment is hot: it was used since the
// hand last came by); a bit still clear when the hand comes round again marks the segment
// cold. Touch is O(1) (an atomic store), memory is two bytes per segment.
//
// Thread-safety: Touch may be called from any thread at any time; Advance, IsCold and
// Reset from one thread at a time (the scheduler's).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

namespace eraid {

class ClockHotness {
 public:
  explicit ClockHotness(uint32_t segments);

  void Touch(uint32_t s) { ref_[s].store(1, std::memory_order_relaxed); }
  // Moves the hand over `steps` segments (wrapping).
  void Advance(uint32_t steps);
  // Cold: the hand found its bit clear on its last pass (and nothing touched it since).
  bool IsCold(uint32_t s) const { return cold_[s] && !ref_[s].load(std::memory_order_relaxed); }
  // A newly opened or freed segment starts hot (its bit set): it gets a full pass.
  void Reset(uint32_t s);
  uint32_t hand() const { return hand_; }
  uint32_t size() const { return n_; }

 private:
  uint32_t n_;
  uint32_t hand_ = 0;
  std::unique_ptr<std::atomic<uint8_t>[]> ref_;
  std::unique_ptr<bool[]> cold_;
};

}  // namespace eraid
