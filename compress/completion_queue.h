// CompletionQueue: the finished-operation list for backends that do their work inside
// Submit*() (memory, the emulated drive, the fault injector). It keeps the Backend
// contract — callbacks run only from Poll() — and optionally holds each completion until
// a ready time, which is how added latency is modelled.
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <vector>

#include "common/clock.h"
#include "compress/backend.h"

namespace eraid {

class CompletionQueue {
 public:
  explicit CompletionQueue(const Clock& clock = SystemClock::Default()) : clock_(clock) {}

  // Queues `done(status)` to run from Poll() no earlier than `ready_ns` (0 = now).
  void Push(IoCallback done, Status status, uint64_t ready_ns = 0);
  // Runs the ready callbacks; with wait, first blocks until one is ready (if any queued),
  // or until another thread's Poll has run some or a Push came: then it returns 0, for the
  // caller to look again. (Several threads waiting on one queue each wait for their own
  // operation; one that slept until the next due entry woke only then, though another
  // thread had delivered its completion long before.)
  size_t Poll(bool wait);
  size_t size() const;
  const Clock& clock() const { return clock_; }

 private:
  struct Entry {
    IoCallback done;
    Status status;
    uint64_t ready_ns;
  };
  // Takes the entries due now and runs them, after `lock` (held) is released.
  size_t PollLocked(std::unique_lock<std::mutex>& lock);
  // Runs the callbacks, then wakes the waiters in Poll (theirs may have been among them).
  size_t Deliver(std::vector<Entry>& ready);
  const Clock& clock_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Entry> entries_;
  uint64_t changes_ = 0;  // deliveries and pushes so far, for the waiters in Poll
};

}  // namespace eraid
