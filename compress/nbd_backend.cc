// A Backend over libnbd: asynchronous requests on one connection driven by a poller
// thread, deadlines, failure. Synchronous reads on lanes of their own: nbd_lanes.cc.
#include <fcntl.h>
#include <libnbd.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/thread_priority.h"
#include "compress/nbd_internal.h"

namespace eraid {

using namespace nbd_internal;

bool NbdBackend::IsUri(const std::string& path) {
  for (const char* p :
       {"nbd://", "nbds://", "nbd+unix://", "nbds+unix://", "nbd+vsock://", "nbds+vsock://"}) {
    if (path.rfind(p, 0) == 0) return true;
  }
  return false;
}

std::string NbdBackend::Redact(const std::string& uri) {
  const size_t q = uri.find('?');
  std::string base = uri.substr(0, q);
  const size_t scheme_end = base.find("://");
  if (scheme_end != std::string::npos) {
    const size_t auth = scheme_end + 3;
    const size_t path = base.find('/', auth);
    const size_t at = base.rfind('@', path == std::string::npos ? base.size() : path);
    if (at != std::string::npos && at >= auth) base.erase(auth, at + 1 - auth);
  }
  if (q == std::string::npos) return base;
  // Of the query only the socket: a TLS key's or certificate's path and a user name are
  // left out.
  std::string kept;
  size_t start = q + 1;
  while (start <= uri.size()) {
    size_t end = uri.find('&', start);
    if (end == std::string::npos) end = uri.size();
    const std::string param = uri.substr(start, end - start);
    if (param.rfind("socket=", 0) == 0) kept += (kept.empty() ? "?" : "&") + param;
    start = end + 1;
  }
  return base + kept;
}

namespace nbd_internal {
namespace {
struct Closer {
  nbd_handle* h;
  ~Closer() {
    if (h) nbd_close(h);
  }
};

}  // namespace

Result<nbd_handle*> Connect(const std::string& uri, uint32_t timeout_ms, bool* timed_out) {
  const std::string shown = NbdBackend::Redact(uri);
  nbd_handle* h = nbd_create();
  if (h == nullptr) return Status::IoError(LastError("nbd_create"));
  Closer closer{h};
  // tls-psk-file= and tls-certificates= in the URI name local files.
  if (nbd_set_uri_allow_local_file(h, true) == -1)
    return Status::IoError(LastError("nbd_set_uri_allow_local_file"));
  if (nbd_aio_connect_uri(h, uri.c_str()) == -1) {
    const int err = nbd_get_errno();
    const std::string msg = LastError(("connect to " + shown).c_str());
    return err == EINVAL || err == ENOTSUP ? Status::InvalidArgument(msg) : Status::IoError(msg);
  }
  const uint64_t deadline = NowNs() + timeout_ms * 1000000ull;
  while (nbd_aio_is_connecting(h) == 1) {
    const uint64_t now = NowNs();
    if (now >= deadline) {
      if (timed_out != nullptr) *timed_out = true;
      return Status::IoError("connect to " + shown + ": no answer within " +
                             std::to_string(timeout_ms) + " ms");
    }
    const int ms = static_cast<int>(std::min<uint64_t>((deadline - now) / 1000000 + 1, 100));
    if (nbd_poll(h, ms) == -1) return Status::IoError(LastError(("connect to " + shown).c_str()));
  }
  if (nbd_aio_is_ready(h) != 1) return Status::IoError(LastError(("connect to " + shown).c_str()));
  closer.h = nullptr;
  return h;
}
}  // namespace nbd_internal

Result<std::unique_ptr<NbdBackend>> NbdBackend::Open(const std::string& uri,
                                                     const NbdBackendOptions& options) {
  if (!IsUri(uri))
    return Status::InvalidArgument("'" + uri +
                                   "' is not an NBD URI (nbd://, nbds://, nbd+unix://)");
  if (options.timeout_ms == 0 || options.timeout_ms > kMaxTimeoutMs) {
    return Status::InvalidArgument("the I/O timeout must be 1 ms .. 1 day");
  }
  if (options.queue_depth == 0 || options.queue_depth > 4096) {
    return Status::InvalidArgument("NBD queue depth must be 1..4096");
  }
  const std::string shown = Redact(uri);
  ERAID_ASSIGN_OR_RETURN(nbd_handle * h, Connect(uri, options.timeout_ms));
  Closer closer{h};
  const int64_t size = nbd_get_size(h);
  if (size < 0) return Status::IoError(LastError(("size of " + shown).c_str()));
  if (size < static_cast<int64_t>(kBlockSize))
    return Status::InvalidArgument(shown + " is smaller than one 4 KiB block");
  if (nbd_is_read_only(h) == 1) return Status::InvalidArgument(shown + " is read-only");
  const int event_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (event_fd < 0) return Status::IoError(std::string("eventfd: ") + std::strerror(errno));
  auto b = std::unique_ptr<NbdBackend>(
      new NbdBackend(h, uri, options, static_cast<uint64_t>(size) / kBlockSize, event_fd));
  closer.h = nullptr;
  return b;
}

NbdBackend::NbdBackend(nbd_handle* h, std::string uri, const NbdBackendOptions& options,
                       uint64_t capacity_blocks, int event_fd)
    : h_(h),
      uri_(std::move(uri)),
      options_(options),
      capacity_blocks_(capacity_blocks),
      event_fd_(event_fd),
      timeout_ms_(options.timeout_ms) {
  can_zero_ = nbd_can_zero(h_) == 1;
  can_flush_ = nbd_can_flush(h_) == 1;
  fd_ = nbd_aio_get_fd(h_);
  lanes_ok_.store(can_flush_ && nbd_can_multi_conn(h_) == 1, std::memory_order_relaxed);
  poller_ = std::thread([this] { Poller(); });
}

NbdBackend::~NbdBackend() {
  stop_.store(true, std::memory_order_release);
  Wake();
  poller_.join();
  for (auto& lane : lanes_) nbd_close(lane->h);  // reads only: nothing to say goodbye for
  if (!failed() || drained()) {
    // A polite goodbye, for as long as the deadline allows: the server then knows the
    // client is gone rather than lost.
    if (nbd_aio_disconnect(h_, 0) == 0) {
      const uint64_t deadline = NowNs() + std::min<uint64_t>(timeout_ms(), 1000) * 1000000ull;
      while (nbd_aio_is_closed(h_) != 1 && nbd_aio_is_dead(h_) != 1 && NowNs() < deadline) {
        if (nbd_poll(h_, 50) == -1) break;
      }
    }
  }
  nbd_close(h_);
  ::close(event_fd_);
}

void NbdBackend::Wake() {
  const uint64_t one = 1;
  (void)!::write(event_fd_, &one, sizeof(one));
}

void NbdBackend::Issue(std::shared_ptr<Request> r) {
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return pending_.size() < options_.queue_depth || failed(); });
    if (failed()) {
      const std::string why = error_;
      lock.unlock();
      Finish(r, Status::IoError(name() + " has failed: " + why));
      return;
    }
    r->id = next_id_++;
    r->start_ns = NowNs();
    pending_.emplace(r->id, r);
    async_pending_ += r->queued();
    RegisterLocked(*r);
  }
  Send(r);
}

void NbdBackend::Send(const std::shared_ptr<Request>& r) {
  nbd_completion_callback cb;
  cb.callback = [](void* user_data, int* error) {
    auto* t = static_cast<Token*>(user_data);
    t->self->Complete(t->id, *error);
    return 1;  // retired here: nothing else asks for the command
  };
  cb.user_data = new Token{this, r->id, r};
  cb.free = [](void* user_data) { delete static_cast<Token*>(user_data); };
  int64_t cookie = -1;
  switch (r->kind) {
    case Kind::kRead:
      cookie = nbd_aio_pread(h_, r->buf.get(), r->length, r->offset, cb, 0);
      break;
    case Kind::kWrite:
      cookie = nbd_aio_pwrite(h_, r->buf.get(), r->length, r->offset, cb, 0);
      break;
    case Kind::kZero:
      cookie = nbd_aio_zero(h_, r->length, r->offset, cb, 0);
      break;
    case Kind::kFlush:
      cookie = nbd_aio_flush(h_, cb, 0);
      break;
  }
  if (cookie == -1) {
    // Not issued: the connection is gone (libnbd calls free but never the callback), and
    // with it the backend.
    const std::string why = LastError("connection lost");
    bool mine = false;
    {
      std::lock_guard lock(mu_);
      mine = pending_.erase(r->id) > 0;
      if (mine) async_pending_ -= r->queued();
    }
    Fail(why);
    if (mine) Finish(r, Status::IoError(name() + " has failed: " + why));
    return;
  }
  // libnbd sent what it could at once; if the socket took it all, the poller (waiting for
  // replies) needs no wake-up: a system call and a context switch saved per request.
  // Otherwise it must wait for the socket to take the rest.
  if (nbd_aio_get_direction(h_) & LIBNBD_AIO_DIRECTION_WRITE) Wake();
}

void NbdBackend::Complete(uint64_t id, int error) {
  if (error != 0) {
    // An error answer, or the connection lost under the request: the drive has failed.
    // Fail completes this request with the others in flight (it makes no libnbd call, so
    // it is safe in a callback).
    bool mine = false;
    uint64_t offset = 0;
    {
      std::lock_guard lock(mu_);
      auto it = pending_.find(id);
      mine = it != pending_.end();
      if (mine) offset = it->second->offset;
    }
    if (mine) Fail(std::string(std::strerror(error)) + " (offset " + std::to_string(offset) + ")");
    return;
  }
  std::shared_ptr<Request> r;
  bool was_full = false;
  {
    // All under the lock: a request counts in in_flight() until its completion is queued,
    // and its data is in the caller's buffer before (Poll then sees both).
    std::lock_guard lock(mu_);
    auto it = pending_.find(id);
    if (it == pending_.end()) return;  // given up on at a deadline
    was_full = pending_.size() >= options_.queue_depth;
    r = std::move(it->second);
    pending_.erase(it);
    async_pending_ -= r->queued();
    const uint64_t now = NowNs();
    RecordLatencyLocked(now - r->start_ns);
    if (r->has_dirty) {
      r->dirty->second.seq = ++completed_writes_;
      if (oldest_unflushed_ns_ == 0) oldest_unflushed_ns_ = now;
    }
    if (r->kind == Kind::kFlush) {
      // Every write completed before the flush was sent is now seen by every connection.
      flushed_writes_ = std::max(flushed_writes_, r->flush_covers);
      std::erase_if(dirty_, [&](const auto& e) { return e.second.seq <= flushed_writes_; });
      if (dirty_.empty()) dirty_max_length_ = 0;
      oldest_unflushed_ns_ = completed_writes_ > flushed_writes_ ? now : 0;
      if (r->internal) lane_flush_in_flight_ = false;
    }
    if (r->kind == Kind::kRead && r->out != nullptr) std::memcpy(r->out, r->buf.get(), r->length);
    if (r->queued()) completions_.push_back({std::move(r->done), Status::Ok()});
  }
  if (r->internal) return;
  if (r->sync) {
    Finish(r, Status::Ok());
  } else {
    cv_.notify_all();  // Poll(wait), and a submitter waiting for a slot
  }
  if (was_full && r->sync) cv_.notify_all();
}

void NbdBackend::RegisterLocked(Request& r) {
  if (r.kind == Kind::kWrite || r.kind == Kind::kZero) {
    r.dirty = dirty_.emplace(r.offset, Dirty{r.offset + r.length, kInFlight});
    r.has_dirty = true;
    dirty_max_length_ = std::max(dirty_max_length_, r.length);
  } else if (r.kind == Kind::kFlush) {
    r.flush_covers = completed_writes_;
  }
}

void NbdBackend::RecordLatencyLocked(uint64_t ns) {
  const double us = static_cast<double>(ns) / 1000.0;
  ++latency_[std::clamp(static_cast<int>(4.0 * std::log2(us + 1.0)), 0, kBuckets - 1)];
  ++requests_;
}

void NbdBackend::Finish(const std::shared_ptr<Request>& r, Status s) {
  if (r->internal) return;
  if (r->sync) {
    r->status = std::move(s);
    r->finished.store(true, std::memory_order_release);
    r->finished.notify_one();
    return;
  }
  {
    std::lock_guard lock(mu_);
    completions_.push_back({std::move(r->done), std::move(s)});
  }
  cv_.notify_all();
}

void NbdBackend::Fail(const std::string& why) {
  std::vector<std::shared_ptr<Request>> waiting;  // synchronous ones
  const Status error = Status::IoError(name() + " has failed: " + why);
  {
    // The queued completions in the same critical section as the clear: a request counts
    // in in_flight() until its completion is queued.
    std::lock_guard lock(mu_);
    if (failed()) return;
    error_ = why;
    failed_.store(true, std::memory_order_release);
    for (auto& [id, r] : pending_) {
      abandoned_ += r->kind == Kind::kWrite || r->kind == Kind::kZero;
      if (r->internal) continue;
      if (r->sync) {
        waiting.push_back(std::move(r));
      } else {
        completions_.push_back({std::move(r->done), error});
      }
    }
    pending_.clear();
    async_pending_ = 0;
    if (abandoned_ > 0) drained_.store(false, std::memory_order_release);
  }
  // The connection stays with libnbd, which goes on driving it (Drain) until every
  // request it sent has its answer: only then can none of them still be carried out.
  for (auto& r : waiting) Finish(r, error);
  cv_.notify_all();
  Wake();
}

void NbdBackend::TakeWake() {
  uint64_t v;
  (void)!::read(event_fd_, &v, sizeof(v));
}

void NbdBackend::Drain() {
  // libnbd counts a request in flight from its submission until its answer (or until the
  // connection dies: a reset, TCP giving up, a killed host): queued requests are sent
  // whole, so the server never sees half of one, and every answer means that request is
  // done.
  if (nbd_aio_in_flight(h_) <= 0 || nbd_aio_is_dead(h_) == 1 || nbd_aio_is_closed(h_) == 1) {
    EndDrain();
    pollfd e{event_fd_, POLLIN, 0};
    if (::poll(&e, 1, 100) > 0) TakeWake();
    return;
  }
  const unsigned dir = nbd_aio_get_direction(h_);
  pollfd p[2] = {{fd_, 0, 0}, {event_fd_, POLLIN, 0}};
  if (dir & LIBNBD_AIO_DIRECTION_READ) p[0].events |= POLLIN;
  if (dir & LIBNBD_AIO_DIRECTION_WRITE) p[0].events |= POLLOUT;
  if (::poll(p, 2, 100) <= 0) return;
  if (p[1].revents & POLLIN) TakeWake();
  if (p[0].revents & (POLLIN | POLLHUP | POLLERR))
    (void)nbd_aio_notify_read(h_);
  else if (p[0].revents & POLLOUT)
    (void)nbd_aio_notify_write(h_);
}

void NbdBackend::EndDrain() {
  if (drained()) return;
  {
    std::lock_guard lock(mu_);
    drained_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

Status NbdBackend::SetTimeout(uint32_t timeout_ms) {
  if (timeout_ms == 0 || timeout_ms > kMaxTimeoutMs) {
    return Status::InvalidArgument("timeout must be 1 ms .. 1 day, got " +
                                   std::to_string(timeout_ms) + " ms");
  }
  timeout_ms_.store(timeout_ms, std::memory_order_relaxed);
  Wake();  // the poller sleeps toward the old deadline
  return Status::Ok();
}

Status NbdBackend::WaitDrained(uint32_t timeout_ms) {
  std::unique_lock lock(mu_);
  if (cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return drained(); }))
    return Status::Ok();
  return Status::Busy(name() + ": " + std::to_string(abandoned_) +
                      " writes were in flight when it failed (" + error_ +
                      ") and its host may still carry them out: the old connection has not ended "
                      "(the host is hung or unreachable)");
}

void NbdBackend::Poller() {
  NameThisThread("nbd-poller");
  while (!stop_.load(std::memory_order_acquire)) {
    if (failed()) {
      Drain();
      continue;
    }
    const unsigned dir = nbd_aio_get_direction(h_);
    pollfd p[2] = {{fd_, 0, 0}, {event_fd_, POLLIN, 0}};
    if (dir & LIBNBD_AIO_DIRECTION_READ) p[0].events |= POLLIN;
    if (dir & LIBNBD_AIO_DIRECTION_WRITE) p[0].events |= POLLOUT;
    // Sleep until the socket is ready, a request is submitted, or the oldest request's
    // deadline (at most 100 ms, so stop_ is seen).
    int wait_ms = 100;
    uint64_t oldest = 0;
    {
      std::lock_guard lock(mu_);
      if (!pending_.empty()) oldest = pending_.begin()->second->start_ns;
    }
    const uint32_t limit_ms = timeout_ms();
    const uint64_t limit_ns = limit_ms * 1000000ull;
    if (oldest != 0) {
      const uint64_t now = NowNs();
      const uint64_t due = oldest + limit_ns;
      if (now >= due) {
        {
          std::lock_guard lock(mu_);
          ++timeouts_;
        }
        Fail("a request got no answer within " + std::to_string(limit_ms) + " ms");
        continue;
      }
      wait_ms = static_cast<int>(std::min<uint64_t>((due - now) / 1000000 + 1, 100));
    }
    MaybeLaneFlush();
    const int n = ::poll(p, 2, wait_ms);
    if (n < 0 && errno != EINTR) continue;
    if (p[1].revents & POLLIN) TakeWake();
    int rc = 0;
    if (p[0].revents & (POLLIN | POLLHUP | POLLERR))
      rc = nbd_aio_notify_read(h_);
    else if (p[0].revents & POLLOUT)
      rc = nbd_aio_notify_write(h_);
    if (rc == -1) {
      Fail(LastError("connection lost"));
    } else if (nbd_aio_is_dead(h_) == 1 || nbd_aio_is_closed(h_) == 1) {
      Fail("connection lost: the server closed it");
    }
  }
}

void NbdBackend::SubmitRead(Lba lba, std::span<std::byte> buf, IoCallback done) {
  auto r = std::make_shared<Request>();
  r->done = std::move(done);
  if (Status s = CheckExtent(lba, buf.size()); !s.ok()) return Finish(r, std::move(s));
  r->kind = Kind::kRead;
  r->offset = BlocksToBytes(lba.value);
  r->length = buf.size();
  r->buf = std::make_unique_for_overwrite<std::byte[]>(r->length);
  r->out = buf.data();
  Issue(std::move(r));
}

void NbdBackend::SubmitWrite(Lba lba, std::span<const std::byte> buf, IoCallback done) {
  auto r = std::make_shared<Request>();
  r->done = std::move(done);
  if (Status s = CheckExtent(lba, buf.size()); !s.ok()) return Finish(r, std::move(s));
  r->kind = Kind::kWrite;
  r->offset = BlocksToBytes(lba.value);
  r->length = buf.size();
  r->buf = std::make_unique_for_overwrite<std::byte[]>(r->length);
  std::memcpy(r->buf.get(), buf.data(), r->length);
  Issue(std::move(r));
}

void NbdBackend::SubmitTrim(Lba lba, uint64_t count_blocks, IoCallback done) {
  auto r = std::make_shared<Request>();
  r->done = std::move(done);
  if (Status s = CheckRange(lba, count_blocks); !s.ok()) return Finish(r, std::move(s));
  r->offset = BlocksToBytes(lba.value);
  r->length = BlocksToBytes(count_blocks);
  if (can_zero_) {
    r->kind = Kind::kZero;
  } else {  // a server without write-zeroes: zeros sent
    r->kind = Kind::kWrite;
    r->buf = std::make_unique<std::byte[]>(r->length);
  }
  Issue(std::move(r));
}

void NbdBackend::SubmitFlush(IoCallback done) {
  auto r = std::make_shared<Request>();
  r->done = std::move(done);
  // A server that cannot flush writes through (or keeps nothing volatile): nothing to ask.
  if (!can_flush_)
    return Finish(r, failed() ? Status::IoError(name() + " has failed") : Status::Ok());
  r->kind = Kind::kFlush;
  Issue(std::move(r));
}

size_t NbdBackend::Poll(bool wait) {
  std::deque<Done> ready;
  {
    std::unique_lock lock(mu_);
    if (wait) {
      cv_.wait(lock, [&] { return !completions_.empty() || async_pending_ == 0; });
    }
    ready.swap(completions_);
  }
  for (Done& d : ready) d.done(std::move(d.status));
  return ready.size();
}

size_t NbdBackend::in_flight() const {
  std::lock_guard lock(mu_);
  return completions_.size() + async_pending_;
}

NbdLinkStats NbdBackend::link_stats() const {
  NbdLinkStats s;
  s.uri = Redact(uri_);
  std::lock_guard lock(mu_);
  s.state = failed() ? "failed" : "connected";
  s.error = error_;
  s.abandoned = abandoned_;
  s.draining = !drained();
  s.requests = requests_;
  s.timeouts = timeouts_;
  auto quantile = [&](double q) -> uint64_t {
    if (requests_ == 0) return 0;
    const uint64_t want = static_cast<uint64_t>(std::ceil(q * static_cast<double>(requests_)));
    uint64_t seen = 0;
    for (int b = 0; b < kBuckets; ++b) {
      seen += latency_[b];
      // The bucket's middle: 2^((b + 0.5) / 4) - 1 µs.
      if (seen >= want) return static_cast<uint64_t>(std::exp2((b + 0.5) / 4.0) - 1.0 + 0.5);
    }
    return 0;
  };
  s.p50_us = quantile(0.50);
  s.p99_us = quantile(0.99);
  s.lane_reads = lane_reads_;
  s.lanes = lanes_open_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace eraid
