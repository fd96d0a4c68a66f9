#include "compress/completion_queue.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

namespace eraid {

void CompletionQueue::Push(IoCallback done, Status status, uint64_t ready_ns) {
  {
    std::lock_guard lock(mu_);
    entries_.push_back({std::move(done), std::move(status), ready_ns});
    ++changes_;
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
    if (entries_.empty()) return 0;
    const uint64_t now = clock_.NowNanos();
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
    if (ready.empty()) {
      if (!wait) return 0;
      // Only entries due later: sleep until the first is due — or until another thread
      // delivers some (the one this caller waits for may be among them) or pushes one.
      const uint64_t seen = changes_;
      LowerTimerSlack();
      cv_.wait_for(lock, std::chrono::nanoseconds(earliest - now),
                   [&] { return changes_ != seen; });
      if (changes_ != seen) return 0;
      return PollLocked(lock);
    }
  }
  return Deliver(ready);
}

size_t CompletionQueue::PollLocked(std::unique_lock<std::mutex>& lock) {
  std::vector<Entry> ready;
  const uint64_t now = clock_.NowNanos();
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->ready_ns <= now) {
      ready.push_back(std::move(*it));
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  lock.unlock();
  return Deliver(ready);
}

size_t CompletionQueue::Deliver(std::vector<Entry>& ready) {
  if (ready.empty()) return 0;
  for (auto& e : ready) e.done(std::move(e.status));
  {
    std::lock_guard lock(mu_);
    ++changes_;
  }
  cv_.notify_all();
  return ready.size();
}

}  // namespace eraid
