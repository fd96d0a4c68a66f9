// FileBackend: a regular file or a block device, driven through io_uring.
//
// Submit*() prepares a submission queue entry and submits it at once (the kernel issues
// O_DIRECT I/O inline during submission, so batching submissions leaves the device idle
// while a batch is issued: measured 0.78x fio's random reads batched, ~1.0x unbatched).
// Poll() reaps, waiting on the completion side only. Short reads and writes are resubmitted
// for the remainder. Trim punches a hole in a regular file (reads then return zeros) and
// issues BLKDISCARD on a block device. Flush is fdatasync.
//
// With `mapped_reads`, a buffered regular file is also mapped read-only (MAP_SHARED) and
// Read() copies from the mapping: the same page cache the writes go to, without a system
// call, which is most of what a 4 KiB read of a cached page costs (QD16 reads over NBD:
// 0.65x -> 0.91x nbdkit's memory plugin, docs/benchmarks.md). A fault under
// the mapping (a disk error, the file cut short by someone else) arrives as SIGBUS; a
// handler turns it back into a read through the ring, which reports the error as usual.
// Writes, trims and flushes always go through the ring. (TSan builds never map: TSan
// does not let a SIGBUS in its memcpy reach the handler.) The mapping is advised
// MADV_RANDOM: a fault reads the page it needs, not the kernel's read-around window
// (a drive's open reads one header page per erase unit; with read-around it paged in
// every byte of its flash, 4 GiB of file-backed RSS for four 1 GiB drives). Reads of
// kRingReadMinBytes or more go through the ring instead, with the file's own readahead.
//
// With `direct` (O_DIRECT) every buffer must be 4 KiB aligned. Without it, every
// kWritebackKickBytes written the file's dirty pages are sent to the disk in the
// background (sync_file_range WRITE, through the ring): the page cache of a large machine
// would otherwise hold gigabytes until a Flush, which then waits for all of them.
//
// Thread-safety: Submit*() and Poll() may be called from several threads; the submission
// side and the completion side of the ring each have their own lock, and callbacks run
// with neither held.
#pragma once

#include <liburing.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "compress/backend.h"

namespace eraid {

struct FileBackendOptions {
  bool create = false;        // create the file if it does not exist
  uint64_t size_bytes = 0;    // with create: the file's size (a multiple of 4096)
  bool direct = false;        // O_DIRECT
  uint32_t queue_depth = 64;  // operations in flight at most (1..4096)
  bool mapped_reads = false;  // Read() from a mapping of the file (regular files, not direct)
};

class FileBackend final : public Backend {
 public:
  static Result<std::unique_ptr<FileBackend>> Open(const std::string& path,
                                                   const FileBackendOptions& options);
  ~FileBackend() override;

  uint64_t capacity_blocks() const override { return capacity_blocks_; }
  uint32_t queue_depth() const override { return queue_depth_; }
  std::string name() const override { return "file:" + path_; }

  void SubmitRead(Lba lba, std::span<std::byte> buf, IoCallback done) override;
  void SubmitWrite(Lba lba, std::span<const std::byte> buf, IoCallback done) override;
  void SubmitTrim(Lba lba, uint64_t count_blocks, IoCallback done) override;
  void SubmitFlush(IoCallback done) override;
  size_t Poll(bool wait) override;
  // A synchronous read: from the mapping (mapped_reads), else on a small ring of the
  // calling thread's own: no lock, and no wait behind other threads' operations on the
  // shared ring (a flush, a punted write).
  Status Read(Lba lba, std::span<std::byte> buf) override;
  // Lets go of the pages of the read mapping (mapped_reads) this process has touched —
  // an open reads checkpoints and summaries through it: they leave the process's
  // resident set, not the page cache, and a later read faults its page back in.
  void ReleaseMappedPages();
  // Whether reads may use the mapping (mapped_reads; on by default). An open turns it off
  // while it reads each checkpoint and summary once: a fault on a page of the mapping
  // costs several times a read on the ring (tens of microseconds in a virtual machine),
  // and those pages are not read again soon.
  void set_reads_through_mapping(bool on) { map_reads_.store(on, std::memory_order_relaxed); }
  // From the mapping: exactly the bytes asked for.
  Status ReadBytes(uint64_t offset_bytes, std::span<std::byte> out) override;
  // Into the page cache, without waiting: a one-byte read of each page on a ring of its
  // own, all submitted at once (one system call per batch, where posix_fadvise is one per
  // range and was most of a cold open's time), and left to complete on their own.
  void Prefetch(std::span<const Lba> blocks) override;
  void PrefetchBytes(std::span<const ByteExtent> extents) override;
  // On a ring of the call's own, up to 256 reads in flight (buffered files; others read
  // one after another).
  void ReadBytesMany(std::span<const ByteExtent> extents, std::span<const std::span<std::byte>> out,
                     std::span<Status> results) override;
  bool mapped() const { return map_ != nullptr; }
  size_t in_flight() const override { return in_flight_.load(std::memory_order_acquire); }

 private:
  enum class OpKind : uint8_t { kRead, kWrite, kTrim, kFlush, kNop, kWriteback };
  static constexpr uint64_t kWritebackKickBytes = 256 << 10;
  // Reads this large skip the mapping (see above): an erase unit read by the drive's GC
  // or its recovery, which page by page would be one synchronous fault per 4 KiB.
  static constexpr uint64_t kRingReadMinBytes = 64 << 10;
  // ReadBytesMany of fewer extents than this copies each out of the mapping (ReadBytes).
  static constexpr size_t kRingManyMinExtents = 128;
  struct Op {
    OpKind kind;
    uint64_t offset_bytes;
    std::byte* buf;
    uint64_t length_bytes;
    uint64_t done_bytes;
    Status preset;  // kNop: the status to deliver (e.g. a synchronous BLKDISCARD's)
    IoCallback callback;
  };

  FileBackend(std::string path, int fd, uint64_t capacity_blocks, bool is_block_device,
              uint32_t queue_depth, bool direct);
  Status RingRead(Lba lba, std::span<std::byte> buf);
  // Takes a free op slot, polling for completions while none is free.
  Op* AcquireOp();
  void ReleaseOp(Op* op);
  // REQUIRES: sq_mu_ held.
  void PrepLocked(Op* op);
  void Prep(Op* op);
  // Completes `op` with `s` from outside the ring (argument errors).
  void CompleteEarly(IoCallback done, Status s);
  // Poll(), optionally also waiting for writeback kicks (the destructor).
  size_t Reap(bool wait, bool kicks_too);

  const std::string path_;
  const int fd_;
  const uint64_t capacity_blocks_;
  const bool is_block_device_;
  const bool buffered_;                      // a regular file without O_DIRECT
  const std::byte* map_ = nullptr;           // mapped_reads: the whole file, read-only
  std::atomic<bool> map_reads_{true};        // set_reads_through_mapping
  std::atomic<uint64_t> unkicked_bytes_{0};  // written since the last writeback kick
  std::atomic<size_t> kicks_in_flight_{0};   // writeback kicks, not counted in in_flight_
  const uint32_t queue_depth_;

  io_uring ring_;
  std::mutex sq_mu_;  // guards the submission queue and free_
  std::mutex cq_mu_;  // guards the completion queue
  std::vector<Op> ops_;
  // Per op slot: released by the submitter after filling the op, acquired by the reaper
  // before reading it. The ring orders them already; this makes the edge explicit (and
  // visible to TSan).
  std::unique_ptr<std::atomic<uint64_t>[]> published_;
  std::vector<Op*> free_;
  std::atomic<size_t> in_flight_{0};
  std::atomic<size_t> prepared_{0};  // prepared but not yet submitted
  // Argument errors found at submit time, delivered from Poll() like any completion.
  std::mutex early_mu_;
  std::vector<std::pair<IoCallback, Status>> early_;
};

}  // namespace eraid
