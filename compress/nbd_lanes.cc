// Synchronous reads (Read, ReadBytes) on read lanes: connections of their own, each
// driven by the one thread that took it, so a read does not wait for the poller.
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

Status NbdBackend::ReadBytes(uint64_t offset_bytes, std::span<std::byte> out) {
  if (out.empty() || offset_bytes + out.size() > BlocksToBytes(capacity_blocks_) ||
      offset_bytes + out.size() < offset_bytes) {
    return Status::InvalidArgument("read of " + std::to_string(out.size()) + " bytes at " +
                                   std::to_string(offset_bytes) + " is outside " + name());
  }
  if (lanes_ok_.load(std::memory_order_relaxed)) {
    if (std::optional<Status> s = ReadOnLane(offset_bytes, out)) return *std::move(s);
  }
  auto r = std::make_shared<Request>();
  r->sync = true;
  r->kind = Kind::kRead;
  r->offset = offset_bytes;
  r->length = out.size();
  r->buf = std::make_unique_for_overwrite<std::byte[]>(r->length);
  r->out = out.data();
  Issue(r);
  while (!r->finished.load(std::memory_order_acquire))
    r->finished.wait(false, std::memory_order_acquire);
  return r->status;
}

void NbdBackend::ReadBytesMany(std::span<const ByteExtent> extents,
                               std::span<const std::span<std::byte>> out,
                               std::span<Status> results) {
  if (extents.size() < 2) return Backend::ReadBytesMany(extents, out, results);
  const uint64_t end = BlocksToBytes(capacity_blocks_);
  std::vector<size_t> order;
  order.reserve(extents.size());
  for (size_t i = 0; i < extents.size(); ++i) {
    const ByteExtent& e = extents[i];
    if (e.length == 0 || e.offset > end || e.length > end - e.offset || out[i].size() != e.length) {
      results[i] =
          Status::InvalidArgument(name() + ": read of " + std::to_string(e.length) + " bytes at " +
                                  std::to_string(e.offset) + " is outside the device");
      continue;
    }
    order.push_back(i);
  }
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return extents[a].offset < extents[b].offset; });
  // Ranges: order[first, first + count) read as [offset, offset + length), into the
  // request's own buffer, from which each extent is copied out once.
  struct Range {
    uint64_t offset, length;
    size_t first, count;
    std::shared_ptr<Request> r;
  };
  std::vector<Range> ranges;
  for (size_t k = 0; k < order.size(); ++k) {
    const ByteExtent& e = extents[order[k]];
    if (!ranges.empty()) {
      Range& last = ranges.back();
      const uint64_t last_end = last.offset + last.length;
      const uint64_t new_end = std::max(last_end, e.offset + e.length);
      if (e.offset <= last_end + kCoalesceGapBytes && new_end - last.offset <= kMaxRangeBytes) {
        last.length = new_end - last.offset;
        ++last.count;
        continue;
      }
    }
    ranges.push_back({e.offset, e.length, k, 1, nullptr});
  }
  // All issued before any is waited for (Issue waits only for a free slot, which the
  // poller frees as answers come).
  for (Range& g : ranges) {
    g.r = std::make_shared<Request>();
    g.r->sync = true;
    g.r->kind = Kind::kRead;
    g.r->offset = g.offset;
    g.r->length = g.length;
    g.r->buf = std::make_unique_for_overwrite<std::byte[]>(g.length);
    g.r->out = nullptr;  // scattered from buf below
    Issue(g.r);
  }
  for (Range& g : ranges) {
    while (!g.r->finished.load(std::memory_order_acquire))
      g.r->finished.wait(false, std::memory_order_acquire);
    for (size_t k = g.first; k < g.first + g.count; ++k) {
      const size_t i = order[k];
      results[i] = g.r->status;
      if (g.r->status.ok())
        std::memcpy(out[i].data(), g.r->buf.get() + (extents[i].offset - g.offset),
                    extents[i].length);
    }
  }
}

Status NbdBackend::Read(Lba lba, std::span<std::byte> buf) {
  ERAID_RETURN_IF_ERROR(CheckExtent(lba, buf.size()));
  return ReadBytes(BlocksToBytes(lba.value), buf);
}

void NbdBackend::MaybeLaneFlush() {
  auto r = std::make_shared<Request>();
  {
    std::lock_guard lock(mu_);
    if (lanes_open_.load(std::memory_order_relaxed) == 0 || lane_flush_in_flight_ || failed() ||
        completed_writes_ <= flushed_writes_ ||
        NowNs() - oldest_unflushed_ns_ < kLaneFlushMs * 1000000ull ||
        pending_.size() >= options_.queue_depth) {
      return;
    }
    r->kind = Kind::kFlush;
    r->internal = true;
    r->id = next_id_++;
    r->start_ns = NowNs();
    pending_.emplace(r->id, r);
    RegisterLocked(*r);
    lane_flush_in_flight_ = true;
  }
  Send(r);
}

bool NbdBackend::OverlapsDirtyLocked(uint64_t offset, uint64_t length) const {
  // Entries start at most dirty_max_length_ before the read and end after its start.
  auto it = dirty_.lower_bound(offset >= dirty_max_length_ ? offset - dirty_max_length_ : 0);
  for (; it != dirty_.end() && it->first < offset + length; ++it) {
    if (it->second.end > offset) return true;
  }
  return false;
}

NbdBackend::Lane* NbdBackend::TakeLane() {
  {
    std::lock_guard lock(lanes_mu_);
    if (!idle_lanes_.empty()) {
      Lane* lane = idle_lanes_.back();
      idle_lanes_.pop_back();
      return lane;
    }
    if (lanes_.size() + lanes_connecting_ >= kMaxLanes) return nullptr;
    ++lanes_connecting_;
  }
  // A new connection, within the deadline. A host that does not answer in time is one
  // that would not answer the read either: the backend fails. One that answers but will
  // not take another connection (or not the same export) only closes the lanes.
  auto lane = std::make_unique<Lane>();
  bool refused = false;
  bool timed_out = false;
  Result<nbd_handle*> h = Connect(uri_, timeout_ms(), &timed_out);
  if (!h.ok()) {
    if (timed_out) {
      Fail(h.status().message());
    } else {
      refused = true;
    }
  } else {
    lane->h = *h;
    lane->fd = nbd_aio_get_fd(lane->h);
    if (nbd_get_size(lane->h) != static_cast<int64_t>(BlocksToBytes(capacity_blocks_)) ||
        nbd_can_multi_conn(lane->h) != 1) {
      nbd_close(lane->h);
      lane->h = nullptr;
      refused = true;
    }
  }
  std::lock_guard lock(lanes_mu_);
  --lanes_connecting_;
  if (lane->h == nullptr) {
    if (refused) lanes_ok_.store(false, std::memory_order_relaxed);
    return nullptr;
  }
  lanes_.push_back(std::move(lane));
  lanes_open_.store(static_cast<uint32_t>(lanes_.size()), std::memory_order_relaxed);
  return lanes_.back().get();
}

void NbdBackend::GiveLane(Lane* lane, bool broken) {
  std::lock_guard lock(lanes_mu_);
  if (!broken) {
    idle_lanes_.push_back(lane);
    return;
  }
  // Closed at once: libnbd then holds no pointer into the reader's buffer.
  nbd_close(lane->h);
  std::erase_if(lanes_, [&](const auto& l) { return l.get() == lane; });
  lanes_open_.store(static_cast<uint32_t>(lanes_.size()), std::memory_order_relaxed);
}

std::optional<Status> NbdBackend::ReadOnLane(uint64_t offset, std::span<std::byte> out) {
  {
    std::lock_guard lock(mu_);
    if (failed() || OverlapsDirtyLocked(offset, out.size())) return std::nullopt;
  }
  Lane* lane = TakeLane();
  if (lane == nullptr) {
    if (failed()) return Status::IoError(name() + " has failed: " + link_stats().error);
    return std::nullopt;
  }
  const uint64_t start = NowNs();
  auto fail = [&](const std::string& why) {  // the first failure's reason is the one kept
    GiveLane(lane, /*broken=*/true);
    Fail(why);
    std::lock_guard lock(mu_);
    return Status::IoError(name() + " has failed: " + error_);
  };
  // Into the caller's buffer: if the read is given up on, the lane is closed first.
  const int64_t cookie =
      nbd_aio_pread(lane->h, out.data(), out.size(), offset, NBD_NULL_COMPLETION, 0);
  if (cookie == -1) return fail(LastError("connection lost"));
  for (;;) {
    const int done = nbd_aio_command_completed(lane->h, cookie);
    if (done == 1) break;
    if (done == -1) {
      const int err = nbd_get_errno();
      return fail(std::string(std::strerror(err != 0 ? err : EIO)) + " (offset " +
                  std::to_string(offset) + ")");
    }
    // The main connection (or another lane) failed it meanwhile: Fail keeps that reason.
    if (failed()) return fail("");
    const uint32_t limit_ms = timeout_ms();
    const uint64_t now = NowNs(), due = start + limit_ms * 1000000ull;
    if (now >= due) {
      {
        std::lock_guard lock(mu_);
        ++timeouts_;
      }
      return fail("a request got no answer within " + std::to_string(limit_ms) + " ms");
    }
    const unsigned dir = nbd_aio_get_direction(lane->h);
    pollfd p{lane->fd, 0, 0};
    if (dir & LIBNBD_AIO_DIRECTION_READ) p.events |= POLLIN;
    if (dir & LIBNBD_AIO_DIRECTION_WRITE) p.events |= POLLOUT;
    const int n =
        ::poll(&p, 1, static_cast<int>(std::min<uint64_t>((due - now) / 1000000 + 1, 100)));
    if (n < 0 && errno != EINTR) return fail(std::string("poll: ") + std::strerror(errno));
    int rc = 0;
    if (p.revents & (POLLIN | POLLHUP | POLLERR))
      rc = nbd_aio_notify_read(lane->h);
    else if (p.revents & POLLOUT)
      rc = nbd_aio_notify_write(lane->h);
    if (rc == -1) return fail(LastError("connection lost"));
  }
  GiveLane(lane, /*broken=*/false);
  std::lock_guard lock(mu_);
  RecordLatencyLocked(NowNs() - start);
  ++lane_reads_;
  return Status::Ok();
}

}  // namespace eraid
