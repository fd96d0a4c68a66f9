// An injectable clock. Code that measures or waits on time takes a Clock&, so tests drive
// time by hand (ManualClock) and replay deterministically.
//
// Thread-safety: SystemClock is stateless; ManualClock is safe to read and advance from
// any thread.
#pragma once

#include <atomic>
#include <cstdint>

namespace eraid {

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic nanoseconds since an arbitrary epoch.
  virtual uint64_t NowNanos() const = 0;
  uint64_t NowMicros() const { return NowNanos() / 1000; }
};

class SystemClock final : public Clock {
 public:
  uint64_t NowNanos() const override;
  static SystemClock& Default();
};

class ManualClock final : public Clock {
 public:
  explicit ManualClock(uint64_t start_ns = 0) : now_ns_(start_ns) {}
  uint64_t NowNanos() const override { return now_ns_.load(std::memory_order_acquire); }
  void AdvanceNanos(uint64_t d) { now_ns_.fetch_add(d, std::memory_order_acq_rel); }

 private:
  std::atomic<uint64_t> now_ns_;
};

// Makes this thread's timed sleeps end close to when asked (1 us of timer slack, not the
// default 50 us): for threads that wait out modeled device latencies. Once per thread.
void LowerTimerSlack();

}  // namespace eraid
