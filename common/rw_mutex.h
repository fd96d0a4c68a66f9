// RwMutex: a reader-writer lock that prefers writers. std::shared_mutex (glibc's default
// rwlock) lets a steady stream of readers starve a writer forever: with fio reading at a
// high queue depth, the volume's writes and the array's conversions would never run.
// Here a waiting writer stops new readers from entering. Usable with std::lock_guard,
// std::unique_lock (exclusive) and std::shared_lock (shared).
#pragma once

#include <pthread.h>

#include <cassert>

namespace eraid {

class RwMutex {
 public:
  RwMutex() {
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&lock_, &attr);
    pthread_rwlockattr_destroy(&attr);
  }
  ~RwMutex() { pthread_rwlock_destroy(&lock_); }
  RwMutex(const RwMutex&) = delete;
  RwMutex& operator=(const RwMutex&) = delete;

  void lock() {
    [[maybe_unused]] int rc = pthread_rwlock_wrlock(&lock_);
    assert(rc == 0);
  }
  void unlock() { pthread_rwlock_unlock(&lock_); }
  void lock_shared() {
    [[maybe_unused]] int rc = pthread_rwlock_rdlock(&lock_);
    assert(rc == 0);
  }
  void unlock_shared() { pthread_rwlock_unlock(&lock_); }

 private:
  pthread_rwlock_t lock_;
};

}  // namespace eraid
