#include "common/clock.h"

#include <sys/prctl.h>

#include <chrono>

namespace eraid {

uint64_t SystemClock::NowNanos() const {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

SystemClock& SystemClock::Default() {
  static SystemClock clock;
  return clock;
}

void LowerTimerSlack() {
  thread_local bool lowered = false;
  if (lowered) return;
  lowered = true;
  (void)::prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
}

}  // namespace eraid
