#include "compress/file_backend.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

namespace eraid {

namespace {
std::string Errno(const std::string& what, int err) { return what + ": " + std::strerror(err); }

// Copies out of a file mapping, surviving a SIGBUS (the page could not be read, or lies
// past the end of a file someone truncated): the handler jumps back and the copy reports
// failure. Any other SIGBUS goes to the disposition that was there before.
thread_local sigjmp_buf* t_copy_jump = nullptr;
// Under TSan a SIGBUS taken in its memcpy interceptor kills the process whatever the
// handler does: TSan builds read through the ring.
#if defined(__SANITIZE_THREAD__)
constexpr bool kThreadSanitizer = true;
#else
constexpr bool kThreadSanitizer = false;
#endif
struct sigaction g_previous_sigbus;

void OnSigbus(int sig, siginfo_t* info, void* context) {
  if (t_copy_jump != nullptr) siglongjmp(*t_copy_jump, 1);
  if ((g_previous_sigbus.sa_flags & SA_SIGINFO) != 0 && g_previous_sigbus.sa_sigaction != nullptr) {
    g_previous_sigbus.sa_sigaction(sig, info, context);
  } else if (g_previous_sigbus.sa_handler != SIG_DFL && g_previous_sigbus.sa_handler != SIG_IGN) {
    g_previous_sigbus.sa_handler(sig);
  } else {
    ::signal(SIGBUS, SIG_DFL);  // returning re-runs the faulting access, which now kills
  }
}

void InstallSigbusHandler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = OnSigbus;
    // SA_NODEFER: the jump out does not restore the signal mask, so SIGBUS must not be
    // blocked while the handler runs.
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, &g_previous_sigbus);
  });
}

bool GuardedCopy(std::byte* dst, const std::byte* src, size_t n) {
  sigjmp_buf jump;
  if (sigsetjmp(jump, 0) != 0) {
    t_copy_jump = nullptr;
    return false;
  }
  t_copy_jump = &jump;
  // The handler reads t_copy_jump: keep the stores on either side of the copy.
  std::atomic_signal_fence(std::memory_order_seq_cst);
  std::memcpy(dst, src, n);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_copy_jump = nullptr;
  return true;
}
}  // namespace

Result<std::unique_ptr<FileBackend>> FileBackend::Open(const std::string& path,
                                                       const FileBackendOptions& options) {
  if (options.queue_depth == 0 || options.queue_depth > 4096) {
    return Status::InvalidArgument("queue depth must be 1..4096");
  }
  int flags = O_RDWR | O_CLOEXEC | (options.create ? O_CREAT : 0) | (options.direct ? O_DIRECT : 0);
  int fd = ::open(path.c_str(), flags, 0600);
  if (fd < 0) return Status::IoError(Errno("open " + path, errno));

  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return Status::IoError(Errno("stat " + path, err));
  }
  bool is_bdev = S_ISBLK(st.st_mode);
  uint64_t size_bytes = 0;
  if (is_bdev) {
    if (::ioctl(fd, BLKGETSIZE64, &size_bytes) != 0) {
      int err = errno;
      ::close(fd);
      return Status::IoError(Errno("BLKGETSIZE64 " + path, err));
    }
  } else if (options.create && options.size_bytes != 0) {
    if (!IsBlockAligned(options.size_bytes)) {
      ::close(fd);
      return Status::InvalidArgument("file size must be a multiple of 4096");
    }
    if (static_cast<uint64_t>(st.st_size) != options.size_bytes &&
        ::ftruncate(fd, static_cast<off_t>(options.size_bytes)) != 0) {
      int err = errno;
      ::close(fd);
      return Status::IoError(Errno("truncate " + path, err));
    }
    size_bytes = options.size_bytes;
  } else {
    size_bytes = static_cast<uint64_t>(st.st_size);
  }
  if (size_bytes < kBlockSize) {
    ::close(fd);
    return Status::InvalidArgument(path + " is smaller than one 4 KiB block");
  }
  auto backend = std::unique_ptr<FileBackend>(new FileBackend(
      path, fd, BytesToBlocks(size_bytes), is_bdev, options.queue_depth, options.direct));
  int rc = io_uring_queue_init(options.queue_depth, &backend->ring_, 0);
  if (rc < 0) {
    backend->ring_.ring_fd = -1;
    return Status::IoError(Errno("io_uring_queue_init", -rc));
  }
  if (options.mapped_reads && backend->buffered_ && !kThreadSanitizer) {
    void* m =
        ::mmap(nullptr, BlocksToBytes(backend->capacity_blocks_), PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) return Status::IoError(Errno("mmap " + path, errno));
    (void)::madvise(m, BlocksToBytes(backend->capacity_blocks_), MADV_RANDOM);  // advice only
    InstallSigbusHandler();
    backend->map_ = static_cast<const std::byte*>(m);
  }
  return backend;
}

FileBackend::FileBackend(std::string path, int fd, uint64_t capacity_blocks, bool is_block_device,
                         uint32_t queue_depth, bool direct)
    : path_(std::move(path)),
      fd_(fd),
      capacity_blocks_(capacity_blocks),
      is_block_device_(is_block_device),
      buffered_(!is_block_device && !direct),
      queue_depth_(queue_depth),
      ops_(queue_depth),
      published_(new std::atomic<uint64_t>[queue_depth]) {
  std::memset(&ring_, 0, sizeof(ring_));
  for (uint32_t i = 0; i < queue_depth; ++i) published_[i].store(0, std::memory_order_relaxed);
  free_.reserve(queue_depth);
  for (auto& op : ops_) free_.push_back(&op);
}

FileBackend::~FileBackend() {
  if (ring_.ring_fd >= 0) {
    while (in_flight() > 0) Poll(true);
    while (kicks_in_flight_.load() > 0) Reap(true, /*kicks_too=*/true);
    Poll(false);
    io_uring_queue_exit(&ring_);
  }
  if (map_ != nullptr) ::munmap(const_cast<std::byte*>(map_), BlocksToBytes(capacity_blocks_));
  ::close(fd_);
}

FileBackend::Op* FileBackend::AcquireOp() {
  for (;;) {
    {
      std::lock_guard lock(sq_mu_);
      if (!free_.empty()) {
        Op* op = free_.back();
        free_.pop_back();
        in_flight_.fetch_add(1, std::memory_order_acq_rel);
        return op;
      }
    }
    Poll(true);
  }
}

void FileBackend::ReleaseOp(Op* op) {
  op->callback = nullptr;
  std::lock_guard lock(sq_mu_);
  free_.push_back(op);
}

void FileBackend::PrepLocked(Op* op) {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (sqe == nullptr) {  // cannot happen: the ring has queue_depth entries, one per op
    io_uring_submit(&ring_);
    sqe = io_uring_get_sqe(&ring_);
  }
  uint64_t off = op->offset_bytes + op->done_bytes;
  auto len = static_cast<unsigned>(op->length_bytes - op->done_bytes);
  switch (op->kind) {
    case OpKind::kRead:
      io_uring_prep_read(sqe, fd_, op->buf + op->done_bytes, len, off);
      break;
    case OpKind::kWrite:
      io_uring_prep_write(sqe, fd_, op->buf + op->done_bytes, len, off);
      break;
    case OpKind::kTrim:
      io_uring_prep_fallocate(sqe, fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                              static_cast<off_t>(off), static_cast<off_t>(len));
      break;
    case OpKind::kFlush:
      io_uring_prep_fsync(sqe, fd_, IORING_FSYNC_DATASYNC);
      break;
    case OpKind::kNop:
      io_uring_prep_nop(sqe);
      break;
    case OpKind::kWriteback:
      io_uring_prep_sync_file_range(sqe, fd_, 0, 0, SYNC_FILE_RANGE_WRITE);  // the whole file
      break;
  }
  io_uring_sqe_set_data(sqe, op);
  // Last touch of *op by the submitter: publish it to whichever thread reaps it.
  published_[op - ops_.data()].fetch_add(1, std::memory_order_release);
  prepared_.fetch_add(1, std::memory_order_acq_rel);
}

void FileBackend::Prep(Op* op) {
  std::lock_guard lock(sq_mu_);
  PrepLocked(op);
  // Start it now: the kernel issues O_DIRECT I/O inline while submitting, so holding
  // SQEs back to batch them leaves the device idle while a batch is issued (measured:
  // 16 per call kept random reads at 0.78x fio; one per call matches fio's default).
  int n = io_uring_submit(&ring_);
  if (n > 0) prepared_.fetch_sub(static_cast<size_t>(n), std::memory_order_acq_rel);
}

void FileBackend::CompleteEarly(IoCallback done, Status s) {
  std::lock_guard lock(early_mu_);
  early_.emplace_back(std::move(done), std::move(s));
}

void FileBackend::SubmitRead(Lba lba, std::span<std::byte> buf, IoCallback done) {
  if (Status s = CheckExtent(lba, buf.size()); !s.ok()) return CompleteEarly(std::move(done), s);
  Op* op = AcquireOp();
  *op = Op{OpKind::kRead, BlocksToBytes(lba.value), buf.data(), buf.size(), 0, {}, std::move(done)};
  Prep(op);
}

void FileBackend::SubmitWrite(Lba lba, std::span<const std::byte> buf, IoCallback done) {
  if (Status s = CheckExtent(lba, buf.size()); !s.ok()) return CompleteEarly(std::move(done), s);
  Op* op = AcquireOp();
  *op = Op{OpKind::kWrite,
           BlocksToBytes(lba.value),
           const_cast<std::byte*>(buf.data()),
           buf.size(),
           0,
           {},
           std::move(done)};
  Prep(op);
  if (buffered_ && unkicked_bytes_.fetch_add(buf.size()) + buf.size() >= kWritebackKickBytes) {
    unkicked_bytes_ = 0;
    // Not the caller's operation: it is kept out of in_flight() (a hint; its outcome is
    // not needed, and a caller waiting for its own operations never waits for it).
    Op* kick = AcquireOp();
    kicks_in_flight_.fetch_add(1);
    in_flight_.fetch_sub(1, std::memory_order_acq_rel);
    *kick = Op{OpKind::kWriteback, 0, nullptr, 0, 0, {}, [](Status) {}};
    Prep(kick);
  }
}

void FileBackend::SubmitTrim(Lba lba, uint64_t count_blocks, IoCallback done) {
  if (Status s = CheckRange(lba, count_blocks); !s.ok()) return CompleteEarly(std::move(done), s);
  Op* op = AcquireOp();
  uint64_t off = BlocksToBytes(lba.value), len = BlocksToBytes(count_blocks);
  if (is_block_device_) {
    // No io_uring opcode discards a block device range here: do it synchronously and
    // deliver the outcome through a NOP so the callback still runs from Poll().
    uint64_t range[2] = {off, len};
    Status s = ::ioctl(fd_, BLKDISCARD, range) == 0 ? Status::Ok()
                                                    : Status::IoError(Errno("BLKDISCARD", errno));
    *op = Op{OpKind::kNop, 0, nullptr, 0, 0, std::move(s), std::move(done)};
  } else {
    *op = Op{OpKind::kTrim, off, nullptr, len, 0, {}, std::move(done)};
  }
  Prep(op);
}

void FileBackend::SubmitFlush(IoCallback done) {
  Op* op = AcquireOp();
  *op = Op{OpKind::kFlush, 0, nullptr, 0, 0, {}, std::move(done)};
  Prep(op);
}

namespace {
struct ThreadRing {
  io_uring ring{};
  bool ok = false;
  ThreadRing() { ok = io_uring_queue_init(4, &ring, 0) == 0; }
  ~ThreadRing() {
#if defined(__SANITIZE_THREAD__)
    // Kept under TSan: liburing maps and unmaps rings by raw syscalls TSan does not see, so
    // the next thread's ring at the same address showed the old one's accesses as a race.
    return;
#endif
    if (ok) io_uring_queue_exit(&ring);
  }
  ThreadRing(const ThreadRing&) = delete;
  ThreadRing& operator=(const ThreadRing&) = delete;
};
}  // namespace

Status FileBackend::Read(Lba lba, std::span<std::byte> buf) {
  ERAID_RETURN_IF_ERROR(CheckExtent(lba, buf.size()));
  if (map_ != nullptr && buf.size() < kRingReadMinBytes &&
      map_reads_.load(std::memory_order_relaxed) &&
      GuardedCopy(buf.data(), map_ + BlocksToBytes(lba.value), buf.size()))
    return Status::Ok();
  return RingRead(lba, buf);
}

Status FileBackend::ReadBytes(uint64_t offset_bytes, std::span<std::byte> out) {
  if (map_ != nullptr && out.size() < kRingReadMinBytes &&
      map_reads_.load(std::memory_order_relaxed) &&
      offset_bytes <= BlocksToBytes(capacity_blocks_) &&
      out.size() <= BlocksToBytes(capacity_blocks_) - offset_bytes &&
      GuardedCopy(out.data(), map_ + offset_bytes, out.size())) {
    return Status::Ok();
  }
  return Backend::ReadBytes(offset_bytes, out);  // checks the extent, reads through the ring
}

void FileBackend::Prefetch(std::span<const Lba> blocks) {
  std::vector<ByteExtent> extents;
  extents.reserve(blocks.size());
  for (Lba b : blocks) extents.push_back({BlocksToBytes(b.value), kBlockSize});
  PrefetchBytes(extents);
}

void FileBackend::PrefetchBytes(std::span<const ByteExtent> extents) {
  // O_DIRECT: no page cache to fill. Under TSan, no ring made and torn down per call:
  // the kernel maps the next ring where the last was, on another thread, and TSan (which
  // sees no order between the two) reports the ring's fresh memory as a race.
  if (extents.empty() || !buffered_ || kThreadSanitizer) return;
  // The byte each read lands in: never looked at, shared by every prefetch (a ring torn
  // down with reads in flight lets them finish, so it must outlive any call).
  static std::byte sink[64];
  constexpr unsigned kDepth = 256;
  io_uring ring;
  if (io_uring_queue_init(kDepth, &ring, 0) != 0) return;  // advice only
  const uint64_t end = BlocksToBytes(capacity_blocks_);
  unsigned queued = 0;
  auto submit = [&] {
    (void)io_uring_submit(&ring);
    queued = 0;
    io_uring_cqe* cqes[kDepth];  // completions are not waited for, only cleared
    io_uring_cq_advance(&ring, io_uring_peek_batch_cqe(&ring, cqes, kDepth));
  };
  for (const ByteExtent& e : extents) {
    if (e.offset >= end || e.length == 0) continue;
    const uint64_t last = std::min(end, e.offset + e.length) - 1;
    for (uint64_t page = e.offset / kBlockSize; page <= last / kBlockSize; ++page) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      if (sqe == nullptr) {
        submit();
        sqe = io_uring_get_sqe(&ring);
      }
      io_uring_prep_read(sqe, fd_, sink, 1, page * kBlockSize);
      sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
      ++queued;
    }
  }
  if (queued > 0) submit();
  io_uring_queue_exit(&ring);
}

void FileBackend::ReadBytesMany(std::span<const ByteExtent> extents,
                                std::span<const std::span<std::byte>> out,
                                std::span<Status> results) {
  constexpr unsigned kDepth = 256;
  io_uring ring;
  // A few: copied out of the mapping one by one (what they cost alone, the page cache
  // most likely holding them: GC's read-ahead), not through a ring made for the call.
  // Many (an array's open, its summaries cold): all in flight at once.
  if (!buffered_ || kThreadSanitizer ||
      extents.size() < kRingManyMinExtents ||  // (TSan: as PrefetchBytes)
      io_uring_queue_init(kDepth, &ring, 0) != 0) {
    Backend::ReadBytesMany(extents, out, results);
    return;
  }
  const uint64_t end = BlocksToBytes(capacity_blocks_);
  std::vector<bool> again(extents.size(), false);  // short or interrupted: read alone
  for (size_t first = 0; first < extents.size(); first += kDepth) {
    const size_t n = std::min<size_t>(kDepth, extents.size() - first);
    unsigned in_flight = 0;
    for (size_t i = first; i < first + n; ++i) {
      const ByteExtent& e = extents[i];
      if (e.offset > end || e.length > end - e.offset || out[i].size() != e.length ||
          e.length > UINT32_MAX) {
        results[i] = Status::InvalidArgument(name() + ": read of " + std::to_string(e.length) +
                                             " bytes at " + std::to_string(e.offset) +
                                             " is outside the device");
        continue;
      }
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      io_uring_prep_read(sqe, fd_, out[i].data(), static_cast<unsigned>(e.length), e.offset);
      io_uring_sqe_set_data64(sqe, i);
      ++in_flight;
    }
    int rc = io_uring_submit(&ring);
    if (rc < 0 && rc != -EINTR) {
      for (size_t i = first; i < first + n; ++i) again[i] = true;
      io_uring_queue_exit(&ring);  // reads submitted before the error finish on their own
      if (io_uring_queue_init(kDepth, &ring, 0) != 0) {
        for (size_t i = first; i < extents.size(); ++i)
          results[i] = ReadBytes(extents[i].offset, out[i]);
        return;
      }
      continue;
    }
    while (in_flight > 0) {
      io_uring_cqe* cqe = nullptr;
      rc = io_uring_wait_cqe(&ring, &cqe);
      if (rc == -EINTR) continue;
      if (rc < 0) break;
      const uint64_t i = io_uring_cqe_get_data64(cqe);
      const int res = cqe->res;
      io_uring_cqe_seen(&ring, cqe);
      --in_flight;
      if (res < 0 && res != -EINTR && res != -EAGAIN) {
        results[i] = Status::IoError(Errno(name() + " io", -res));
      } else if (res < 0 || static_cast<uint64_t>(res) != extents[i].length) {
        again[i] = true;
      } else {
        results[i] = Status::Ok();
      }
    }
    if (in_flight > 0) {  // the wait itself failed: what is left is read alone
      io_uring_queue_exit(&ring);
      for (size_t i = first; i < first + n; ++i) again[i] = true;
      for (size_t i = first; i < extents.size(); ++i)
        results[i] = ReadBytes(extents[i].offset, out[i]);
      return;
    }
  }
  io_uring_queue_exit(&ring);
  for (size_t i = 0; i < extents.size(); ++i) {
    if (again[i]) results[i] = ReadBytes(extents[i].offset, out[i]);
  }
}

Status FileBackend::RingRead(Lba lba, std::span<std::byte> buf) {
  thread_local ThreadRing tr;
  if (!tr.ok) return Backend::Read(lba, buf);  // no ring for this thread: the shared queue
  const uint64_t offset = BlocksToBytes(lba.value);
  uint64_t done = 0;
  while (done < buf.size()) {
    io_uring_sqe* sqe = io_uring_get_sqe(&tr.ring);
    io_uring_prep_read(sqe, fd_, buf.data() + done, static_cast<unsigned>(buf.size() - done),
                       offset + done);
    int rc = io_uring_submit_and_wait(&tr.ring, 1);
    if (rc < 0 && rc != -EINTR) return Status::IoError(Errno(name() + " read submit", -rc));
    io_uring_cqe* cqe = nullptr;
    do {
      rc = io_uring_wait_cqe(&tr.ring, &cqe);
    } while (rc == -EINTR);
    if (rc < 0) return Status::IoError(Errno(name() + " read wait", -rc));
    const int res = cqe->res;
    io_uring_cqe_seen(&tr.ring, cqe);
    if (res == -EINTR || res == -EAGAIN) continue;
    if (res < 0) return Status::IoError(Errno(name() + " io", -res));
    if (res == 0) return Status::IoError(name() + ": unexpected end of file");
    done += static_cast<uint64_t>(res);
  }
  return Status::Ok();
}

size_t FileBackend::Poll(bool wait) { return Reap(wait, false); }

size_t FileBackend::Reap(bool wait, bool kicks_too) {
  std::vector<std::pair<IoCallback, Status>> finished;
  {
    std::lock_guard lock(early_mu_);
    finished.swap(early_);
  }
  if (prepared_.load(std::memory_order_acquire) > 0) {  // short-transfer remainders
    std::lock_guard lock(sq_mu_);
    int n = io_uring_submit(&ring_);
    if (n > 0) prepared_.fetch_sub(static_cast<size_t>(n), std::memory_order_acq_rel);
  }
  {
    // Wait only on the completion side, never holding the submission lock: another
    // thread may have claimed an operation and still need that lock to submit it.
    // Operations leave in_flight_ only here, under cq_mu_, so if any is counted now its
    // completion is still to come and the wait ends. A poll that does not wait does not
    // queue behind a thread that does (which holds cq_mu_ until the next completion, ms
    // away on a busy disk): that thread delivers whatever completes, callbacks included.
    std::unique_lock lock(cq_mu_, std::defer_lock);
    if (wait) {
      lock.lock();
    } else if (!lock.try_lock()) {
      for (auto& [cb, s] : finished) cb(std::move(s));
      return finished.size();
    }
    bool block = wait && finished.empty();
    for (;;) {
      io_uring_cqe* cqe = nullptr;
      int rc = io_uring_peek_cqe(&ring_, &cqe);
      if (rc != 0 || cqe == nullptr) {
        if (!block || in_flight() + (kicks_too ? kicks_in_flight_.load() : 0) == 0) break;
        rc = io_uring_wait_cqe(&ring_, &cqe);
        if (rc == -EINTR) continue;
        if (rc != 0 || cqe == nullptr) break;
      }
      block = false;
      auto* op = static_cast<Op*>(io_uring_cqe_get_data(cqe));
      (void)published_[op - ops_.data()].load(std::memory_order_acquire);
      int res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);

      Status s;
      if (res == -ECANCELED && op->kind != OpKind::kNop) {
        // Nothing here cancels an operation: the kernel did, as the thread that submitted
        // it exited while it waited for an io_uring worker (an nbdkit thread at a
        // connection's end). Seen as a failed flash write at a clean close and an array
        // that would not open after it. Submitted again, from this thread.
        Prep(op);
        continue;
      }
      if (op->kind == OpKind::kNop) {
        s = std::move(op->preset);
      } else if (res < 0) {
        s = Status::IoError(Errno(name() + " io", -res));
      } else if (op->kind == OpKind::kRead || op->kind == OpKind::kWrite) {
        op->done_bytes += static_cast<uint64_t>(res);
        if (res == 0 && op->done_bytes < op->length_bytes) {
          s = Status::IoError(name() + ": unexpected end of file");
        } else if (op->done_bytes < op->length_bytes) {
          Prep(op);  // short transfer: continue with the remainder
          continue;
        }
      }
      const bool kick = op->kind == OpKind::kWriteback;
      finished.emplace_back(std::move(op->callback), std::move(s));
      ReleaseOp(op);
      (kick ? kicks_in_flight_ : in_flight_).fetch_sub(1, std::memory_order_acq_rel);
    }
  }
  for (auto& [cb, s] : finished) cb(std::move(s));
  return finished.size();
}

void FileBackend::ReleaseMappedPages() {
  if (map_ != nullptr)
    (void)::madvise(const_cast<std::byte*>(map_), BlocksToBytes(capacity_blocks_), MADV_DONTNEED);
}

}  // namespace eraid
