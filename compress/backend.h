// Backend: the one narrow interface every device in eraid is reached through — a file or
// block device (FileBackend, io_uring), memory (MemBackend), a fault-injecting wrapper
// (FaultyBackend), and the emulated compressing drive (CompressedDrive), which is itself
// a Backend over another Backend as its flash.
//
// The address unit is the 4 KiB block. Operations are asynchronous:
//   - Submit*() queues an operation and returns at once; it never runs a callback.
//   - Poll() starts any operation not yet started and delivers finished ones, running each callback
//     exactly once, on the polling thread. Poll(true) blocks until at least one operation
//     finishes (it returns at once when nothing is in flight); with several threads
//     polling, that one may have been delivered by another thread's Poll (then it returns 0).
//   - At most queue_depth() operations are in flight; a Submit*() beyond that first polls
//     (delivering completions on the submitting thread) until a slot frees.
// A completion's Status tells the outcome; buffers must stay valid until the callback.
// Out-of-range or misaligned requests complete with InvalidArgument.
//
// Durability: a completed write is visible to later reads; it survives a crash only once
// a Flush() submitted after it has completed.
//
// Thread-safety: every implementation here may be called from several threads at once;
// callbacks run on whichever thread polls.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/types.h"
#include "compress/codec.h"

namespace eraid {

using IoCallback = std::function<void(Status)>;

// Logical and stored bytes of an LBA range, from a drive that compresses.
struct RangeUsage {
  uint64_t mapped_blocks = 0;
  uint64_t stored_bytes = 0;
  // logical / stored; 0 when nothing in the range is mapped.
  double ratio() const {
    return stored_bytes ? static_cast<double>(mapped_blocks * kBlockSize) / stored_bytes : 0.0;
  }
};

// A block in the form a device stores it — a compressing drive's record payload and its
// codec — so that a copy to another device of the same kind skips undoing and redoing
// that work, as a drive's copy offload would (docs/compressed-drive.md, "Stored copies").
// Empty `bytes`: the device could not give one; only the block's data is known.
struct StoredBlock {
  Codec codec = Codec::kRaw;
  std::vector<std::byte> bytes;
};

// A range of bytes on a device.
struct ByteExtent {
  uint64_t offset = 0, length = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual uint64_t capacity_blocks() const = 0;
  virtual uint32_t queue_depth() const = 0;
  // A short human-readable description ("file:/path", "mem", ...).
  virtual std::string name() const = 0;

  // REQUIRES: buf.size() is a non-zero multiple of kBlockSize.
  virtual void SubmitRead(Lba lba, std::span<std::byte> buf, IoCallback done) = 0;
  virtual void SubmitWrite(Lba lba, std::span<const std::byte> buf, IoCallback done) = 0;
  // SubmitWrite(lba, buf), with the blocks also compressed already: block i of `buf` is
  // block `first + i` of `packed`. A compressing drive with the same codec stores those
  // records as they are (if every block of the write is packed: none is {kRaw, 0});
  // every other device writes `buf`, which is what the default does.
  virtual void SubmitWritePacked(Lba lba, std::span<const std::byte> buf,
                                 std::shared_ptr<const PackedBlocks> packed, uint32_t first,
                                 IoCallback done) {
    (void)packed, (void)first;
    SubmitWrite(lba, buf, std::move(done));
  }
  // After a trim, the blocks read as zeros.
  virtual void SubmitTrim(Lba lba, uint64_t count_blocks, IoCallback done) = 0;
  virtual void SubmitFlush(IoCallback done) = 0;

  virtual size_t Poll(bool wait) = 0;
  virtual size_t in_flight() const = 0;

  // FlashAlloc (see docs/compressed-drive.md): writes to [lba, lba+count) go to erase
  // units dedicated to that range until the whole range is trimmed. Devices without the
  // feature return NotSupported, and callers carry on without it.
  virtual Status FlashAlloc(Lba lba, uint64_t count_blocks);

  // What a compressing drive stores for [lba, lba+count); nullopt for devices that cannot
  // tell (plain files, real drives without such a query).
  virtual std::optional<RangeUsage> Usage(Lba lba, uint64_t count_blocks) const;

  // Synchronous conveniences: submit, then poll until this operation has completed.
  // Read is virtual: a backend may serve it without its queue (FileBackend does, so that
  // concurrent readers never wait on one another's completions).
  virtual Status Read(Lba lba, std::span<std::byte> buf);
  // Reads `out.size()` bytes at a byte offset (a drive's flash holds records, not blocks):
  // by default the covering blocks through Read(), then a copy of the bytes wanted.
  virtual Status ReadBytes(uint64_t offset_bytes, std::span<std::byte> out);
  Status Write(Lba lba, std::span<const std::byte> buf);
  // Advice that these blocks will be read soon: a device may start fetching them into a
  // cache and return at once, so that reads a caller can name ahead (an open walking every
  // segment's summaries) wait on the medium together rather than one after another. No
  // error, and no effect on what reads return; the default does nothing.
  virtual void Prefetch(std::span<const Lba> blocks) { (void)blocks; }
  // The same for byte ranges (a drive's flash holds records, not blocks).
  virtual void PrefetchBytes(std::span<const ByteExtent> extents) { (void)extents; }
  // Many reads at once: block `blocks[i]` into the i-th 4 KiB of `out`, its outcome in
  // `results[i]`; `done` (always Ok) runs once all have completed, and `out` and
  // `results` must live until then. The default submits every block (a file keeps them
  // in flight together on one ring, a remote drive on its connection); a compressing
  // drive reads its records in one batch. Asynchronous like SubmitRead, so batches to
  // several devices wait together (the array's rebuild, scrub and GC read-ahead).
  virtual void SubmitReadMany(std::span<const Lba> blocks, std::span<std::byte> out,
                              std::span<Status> results, IoCallback done);
  // SubmitReadMany, waited for.
  void ReadMany(std::span<const Lba> blocks, std::span<std::byte> out, std::span<Status> results);
  // The same for byte ranges: extents[i] into out[i] (extents[i].length bytes).
  virtual void ReadBytesMany(std::span<const ByteExtent> extents,
                             std::span<const std::span<std::byte>> out, std::span<Status> results);
  // ReadMany(), and each block's stored form where the device keeps one (by default it
  // does not: every `stored[i].bytes` comes back empty). All in flight together where the
  // device can: a conversion reads a chunk of a segment at a time with it.
  virtual void ReadStoredMany(std::span<const Lba> blocks, std::span<std::byte> out,
                              std::span<StoredBlock> stored, std::span<Status> results);
  // The same for one block.
  Status ReadStored(Lba lba, std::span<std::byte> out, StoredBlock* stored);
  // Write() of `data`, where `stored` (empty, or one per block) holds each block's stored
  // form from a device of the same kind, which a device may store as it is instead of
  // encoding `data` again. The default ignores it.
  virtual Status WriteStored(Lba lba, std::span<const std::byte> data,
                             std::span<const StoredBlock> stored);
  Status Trim(Lba lba, uint64_t count_blocks);
  Status Flush();

 protected:
  // Shared argument check for implementations: InvalidArgument unless the extent is
  // block aligned, non-empty and inside capacity.
  Status CheckExtent(Lba lba, uint64_t size_bytes) const;
  Status CheckRange(Lba lba, uint64_t count_blocks) const;
};

}  // namespace eraid
