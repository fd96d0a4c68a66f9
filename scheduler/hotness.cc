#include "scheduler/hotness.h"

namespace eraid {

ClockHotness::ClockHotness(uint32_t segments)
    : n_(segments), ref_(new std::atomic<uint8_t>[segments]), cold_(new bool[segments]) {
  for (uint32_t s = 0; s < n_; ++s) {
    ref_[s].store(1, std::memory_order_relaxed);
    cold_[s] = false;
  }
}

void ClockHotness::Advance(uint32_t steps) {
  if (n_ == 0) return;
  for (uint32_t i = 0; i < steps; ++i) {
    const uint32_t s = hand_;
    // exchange: a Touch racing with the hand is either seen now or kept for next time.
    cold_[s] = ref_[s].exchange(0, std::memory_order_relaxed) == 0;
    hand_ = hand_ + 1 == n_ ? 0 : hand_ + 1;
  }
}

void ClockHotness::Reset(uint32_t s) {
  ref_[s].store(1, std::memory_order_relaxed);
  cold_[s] = false;
}

}  // namespace eraid
