// NbdBackend's private parts, shared by nbd_backend.cc and nbd_lanes.cc: a request, a
// read lane, libnbd's token for one command.
#pragma once

#include <libnbd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "compress/nbd_backend.h"

namespace eraid {
namespace nbd_internal {

inline uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}
inline std::string LastError(const char* what) {
  const char* e = nbd_get_error();
  return std::string(what) + ": " + (e ? e : "unknown libnbd error");
}
constexpr uint64_t kMaxTimeoutMs = 24ull * 3600 * 1000;

// A connected handle, within the deadline; the caller closes it. *timed_out (if given)
// tells a server that did not answer in time from one that refused.
Result<nbd_handle*> Connect(const std::string& uri, uint32_t timeout_ms, bool* timed_out = nullptr);

}  // namespace nbd_internal

struct NbdBackend::Request {
  uint64_t id = 0;
  Kind kind = Kind::kRead;
  uint64_t offset = 0, length = 0;
  // Write data, or where a read lands: the request's own, so that a request given up on
  // at a deadline, which libnbd may still be sending or receiving, never touches the
  // caller's memory.
  std::unique_ptr<std::byte[]> buf;
  // Reads: the caller's buffer, filled when the read completes; null for a caller that
  // takes the data from buf itself once the request has finished (ReadBytesMany).
  std::byte* out = nullptr;
  IoCallback done;
  uint64_t start_ns = 0;
  // Synchronous requests (Read, ReadBytes) are waited for on their own flag, not queued:
  // a completion wakes its one waiter, not every reader.
  bool sync = false;
  // The poller's own flush for the lanes (MaybeLaneFlush): nobody waits for it.
  bool internal = false;
  std::atomic<bool> finished{false};
  Status status;
  // Writes and trims: their entry in dirty_. Flushes: the completion seq they cover.
  std::multimap<uint64_t, Dirty>::iterator dirty;
  bool has_dirty = false;
  uint64_t flush_covers = 0;
  // Completed through the completion queue (Poll), and counted in async_pending_.
  bool queued() const { return !sync && !internal; }
};

// A read lane: a connection of its own, driven by the one thread that took it.
struct NbdBackend::Lane {
  nbd_handle* h = nullptr;
  int fd = -1;
};

// libnbd's user_data for one command: keeps the request (and its buffer) alive until
// libnbd calls free, which it does exactly once, after the last callback.
struct NbdBackend::Token {
  NbdBackend* self;
  uint64_t id;
  std::shared_ptr<Request> keep;
};

}  // namespace eraid
