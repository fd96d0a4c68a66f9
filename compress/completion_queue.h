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

#include "common/clock.h"
#include "compress/backend.h"

namespace eraid {

class CompletionQueue {
 public:
  explicit CompletionQueue(const Clock& clock = SystemClock::Default()) : clock_(clock) {}

  // Queues `done(status)` to run from Poll() no earlier than `ready_ns` (0 = now).
  void Push(IoCallback done, Status status, uint64_t ready_ns = 0);
  // Runs the ready callbacks; with wait, first blocks until one is ready (if any queued).
  size_t Poll(bool wait);
  size_t size() const;
  const Clock& clock() const { return clock_; }

 private:
  struct Entry {
    IoCallback done;
    Status status;
    uint64_t ready_ns;
  };
  const Clock& clock_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Entry> entries_;
};

}  // namespace eraid
