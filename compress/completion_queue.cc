#include "compress/completion_queue.h"

#include <thread>
#include <vector>

namespace eraid {

void CompletionQueue::Push(IoCallback done, Status status, uint64_t ready_ns) {
  {
    std::lock_guard lock(mu_);
    entries_.push_back({std::move(done), std::move(status), ready_ns});
  }
  cv_.notify_all();
}

size_t CompletionQueue::size() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

size_t CompletionQueue::Poll(bool wait) {
  std::vector<Entry> ready;
  {
    std::unique_lock lock(mu_);
    for (;;) {
      if (entries_.empty()) return 0;
      uint64_t now = clock_.NowNanos();
      uint64_t earliest = UINT64_MAX;
      for (auto it = entries_.begin(); it != entries_.end();) {
        if (it->ready_ns <= now) {
          ready.push_back(std::move(*it));
          it = entries_.erase(it);
        } else {
          earliest = std::min(earliest, it->ready_ns);
          ++it;
        }
      }
      if (!ready.empty() || !wait) break;
      // Only latency-delayed entries remain: sleep until the first is due.
      lock.unlock();
      LowerTimerSlack();
      std::this_thread::sleep_for(std::chrono::nanoseconds(earliest - now));
      lock.lock();
    }
  }
  for (auto& e : ready) e.done(std::move(e.status));
  return ready.size();
}

}  // namespace eraid
