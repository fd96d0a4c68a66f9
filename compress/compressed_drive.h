// CompressedDrive: an SSD with built-in transparent compression, emulated over another
// Backend that plays its flash. It is a drive model, not a counter: the bytes it reports
// are the bytes it stores.
//
//   - Logical space is larger than flash by an expansion factor; the unit is a 4 KiB LBA.
//   - Each written block is compressed (zstd; raw if it does not shrink), framed as a
//     record (type, LBA, sequence, length, CRC32C) and appended to an erase unit (EU) of
//     flash. An in-memory table maps each LBA to its record: 8 bytes per LBA.
//   - Unwritten and trimmed LBAs read as zeros and occupy nothing.
//   - Overwrites and trims leave garbage; when free EUs run low, device GC relocates the
//     live records of the EUs with least live data and erases them. With
//     background_free_eus, a thread of the drive's own erases garbage-only EUs before
//     writers run short, so a writer rarely collects (and flushes) itself.
//   - FlashAlloc(range): writes to the range go to EUs dedicated to it, until the whole
//     range is trimmed; then those EUs hold only garbage and are erased without copying.
//     Without it, every writer shares the same open EU.
//   - Physical capacity is finite: a write that would exceed it fails with NoSpace and
//     changes nothing.
//   - Crash recovery: a checkpoint (the mapping and the EU table) plus the record headers
//     written after it rebuild the mapping; every flushed write survives.
// On-disk format: docs/format/compressed-drive.md. Design notes: docs/compressed-drive.md.
//
// Invariants:
//   1. A flash page is never rewritten with different bytes at an offset that already held
//      a flushed record: only the zero tail of an EU's last page is filled in.
//   2. An EU is erased only after every live record it held has been relocated and made
//      durable, every record that superseded one of its records is durable, and (if it
//      held trim records newer than the last checkpoint) a checkpoint covers them.
//   3. Every record in an EU has a larger sequence number than the EU's header; records
//      are applied at recovery newest-sequence-first per LBA.
//   4. live_bytes of an EU == the sum of the lengths of the mapping entries pointing into it.
//
// Thread-safety: a Backend — all methods may be called concurrently. Compression and
// decompression run outside the drive's lock, and so do reads of records from flash and
// the flash flush of a host flush; mapping updates run under it, and so does submitting
// a full EU's write to flash, which no writer waits for (docs/compressed-drive.md). The
// periodic checkpoint takes its image under the lock and writes it without (a writer that
// must collect garbage waits for it, and for the eraser, before it starts).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "compress/backend.h"
#include "compress/codec.h"
#include "compress/completion_queue.h"
#include "compress/drive_format.h"
#include "compress/drive_map.h"
#include "compress/drive_model.h"

namespace eraid {

struct DriveOptions {
  double expansion = 2.0;           // logical LBAs / flash LBAs of the data area (1..16)
  uint32_t erase_unit_blocks = 64;  // 256 KiB erase units
  CodecConfig codec;
  bool flashalloc = true;               // false: FlashAlloc() returns NotSupported
  uint32_t max_flashalloc_ranges = 16;  // open dedicated streams; the oldest is evicted
  uint32_t gc_free_eus = 4;             // GC runs when fewer EUs than this are free
  // > gc_free_eus: a thread of the drive's own erases garbage-only EUs whenever fewer
  // than this many are free, making what superseded them durable with a flash flush of
  // its own, and doing that flush and the erases without holding the drive's lock. A
  // writer then finds EUs free and runs GC itself (under the lock, with its flush) only
  // when the thread falls behind. 0: no such thread, GC only in the writer.
  uint32_t background_free_eus = 0;
  // A checkpoint is written after this many times its own size has been written to flash.
  uint32_t checkpoint_every = 128;
  // Full flash pages of an open EU are written once this many have accumulated (and
  // every page at a flush or when the EU fills): fewer, larger backend writes. At the EU's
  // size or more, an EU is written when it fills, or at a flush.
  uint32_t write_batch_blocks = 16;
  // A volatile write cache, as a drive's DRAM: 0 = every write is compressed and stored
  // before it completes. N > 0: a write of up to N blocks completes once copied into the
  // cache, and a background thread (one per drive) compresses and stores it; reads see
  // cached data; flush, trim, FlashAlloc and Close wait until the cache is empty. Space is
  // reserved at the worst case (uncompressed) while a block is cached, so NoSpace is still
  // returned by the write that would not fit. Flushes queue behind the writes; their flash
  // flushes run on a thread of their own. A background failure is reported by every later flush.
  // Unflushed writes may be lost on a crash, exactly as without the cache.
  uint32_t write_cache_blocks = 0;
  // The on-flash format Format writes (an open takes the drive's own): 2, records
  // 16-byte aligned, up to 8 TiB of flash; 1, records back to back, up to 32 GiB, as
  // drives made before format 2 are (for reading those, and for testing that this build
  // still does).
  uint32_t format_version = drive_format::kDriveFormatVersion;
  // The drive's timing model (compress/timed_backend.h), told of each erase so that it
  // holds the erase block's units; null without a model. Not owned; outlives the drive.
  DriveModel* timing = nullptr;
};

struct DriveStats {
  uint64_t logical_blocks = 0;
  uint64_t flash_bytes = 0;   // the data area: erase units * EU size
  uint64_t usable_bytes = 0;  // live bytes the drive accepts before NoSpace
  uint64_t mapped_blocks = 0;
  uint64_t live_bytes = 0;     // stored bytes (record headers + payloads) of mapped LBAs
  uint64_t used_eu_bytes = 0;  // EUs not free, live or not
  uint64_t free_eus = 0;
  uint64_t host_write_bytes = 0;   // 4 KiB per block the host wrote
  uint64_t host_stored_bytes = 0;  // record bytes those writes produced
  // Of the blocks the host wrote: compressed here, and stored as records the host gave
  // (SubmitWritePacked, WriteStored) — compressed once for both copies of a mirror.
  uint64_t compressed_blocks = 0, given_records = 0;
  uint64_t gc_relocated_bytes = 0;
  uint64_t flash_write_bytes = 0;  // every byte written to flash: pages, EU headers, metadata
  uint64_t meta_write_bytes = 0;   // of which checkpoints
  uint64_t gc_erased_eus = 0;
  uint64_t background_erased_eus = 0;  // of which by the drive's own thread (background_free_eus)
  uint64_t checkpoints = 0;
  uint64_t flashalloc_ranges = 0;  // open now
  uint64_t flashalloc_evictions = 0;
  uint64_t nospace_errors = 0;
  uint64_t corrupt_reads = 0;
  uint64_t map_bytes = 0;  // RAM of the FTL map now (DriveMap::bytes)

  // Adds another drive's counters: the figures of several drives (an array's), or of a
  // drive and the one it replaced.
  void Add(const DriveStats& o) {
    map_bytes += o.map_bytes;
    logical_blocks += o.logical_blocks;
    flash_bytes += o.flash_bytes;
    usable_bytes += o.usable_bytes;
    mapped_blocks += o.mapped_blocks;
    live_bytes += o.live_bytes;
    used_eu_bytes += o.used_eu_bytes;
    free_eus += o.free_eus;
    host_write_bytes += o.host_write_bytes;
    host_stored_bytes += o.host_stored_bytes;
    compressed_blocks += o.compressed_blocks;
    given_records += o.given_records;
    gc_relocated_bytes += o.gc_relocated_bytes;
    flash_write_bytes += o.flash_write_bytes;
    meta_write_bytes += o.meta_write_bytes;
    gc_erased_eus += o.gc_erased_eus;
    background_erased_eus += o.background_erased_eus;
    checkpoints += o.checkpoints;
    flashalloc_ranges += o.flashalloc_ranges;
    flashalloc_evictions += o.flashalloc_evictions;
    nospace_errors += o.nospace_errors;
    corrupt_reads += o.corrupt_reads;
  }
  // Flash bytes written per record byte the host produced: 1.0 = no device GC copying.
  double device_waf() const {
    return host_stored_bytes ? static_cast<double>(flash_write_bytes) / host_stored_bytes : 0.0;
  }
  // Logical / stored bytes of the mapped data.
  double compression_ratio() const {
    return live_bytes ? static_cast<double>(mapped_blocks * kBlockSize) / live_bytes : 0.0;
  }
};

class CompressedDrive final : public Backend {
 public:
  // Formats `flash` (destroying its contents) and returns the empty drive. Does not own
  // `flash`, which must outlive the drive.
  static Result<std::unique_ptr<CompressedDrive>> Format(Backend& flash,
                                                         const DriveOptions& options);
  // Opens a formatted drive, recovering from a crash if it was not closed cleanly.
  // Geometry comes from the superblock; `options` supplies only run-time settings
  // (codec, flashalloc, GC and checkpoint tuning).
  static Result<std::unique_ptr<CompressedDrive>> Open(Backend& flash, const DriveOptions& options);
  ~CompressedDrive() override;

  uint64_t capacity_blocks() const override { return logical_blocks_; }
  uint32_t queue_depth() const override { return 1024; }
  std::string name() const override { return "compressed(" + flash_.name() + ")"; }

  void SubmitRead(Lba lba, std::span<std::byte> buf, IoCallback done) override;
  // Synchronous, without the completion queue (the array's reads).
  Status Read(Lba lba, std::span<std::byte> buf) override;
  void SubmitWrite(Lba lba, std::span<const std::byte> buf, IoCallback done) override;
  // Stores the host's records as they are when they match this drive's codec: no
  // compression here, and the write cache keeps `packed` rather than a copy of `buf`.
  void SubmitWritePacked(Lba lba, std::span<const std::byte> buf,
                         std::shared_ptr<const PackedBlocks> packed, uint32_t first,
                         IoCallback done) override;
  void SubmitTrim(Lba lba, uint64_t count_blocks, IoCallback done) override;
  void SubmitFlush(IoCallback done) override;
  // A block's record payload, and storing one as it is: a RAID5 -> RAID10 conversion
  // copies records from drive to drive without decompressing and compressing them again.
  void ReadStoredMany(std::span<const Lba> blocks, std::span<std::byte> out,
                      std::span<StoredBlock> stored, std::span<Status> results) override;
  Status WriteStored(Lba lba, std::span<const std::byte> data,
                     std::span<const StoredBlock> stored) override;
  // The records of the blocks, on their flash (records in erase-unit buffers need none).
  void Prefetch(std::span<const Lba> blocks) override;
  // The records on flash all read at once (ReadBytesMany), then decoded one by one; the
  // others (in an erase unit's buffer, in the write cache) as Read() would.
  void SubmitReadMany(std::span<const Lba> blocks, std::span<std::byte> out,
                      std::span<Status> results, IoCallback done) override;
  size_t Poll(bool wait) override;
  size_t in_flight() const override { return completions_.size() + async_flushes_.load(); }
  Status FlashAlloc(Lba lba, uint64_t count_blocks) override;

  // Flushes and writes a checkpoint, so the next Open() replays nothing.
  Status Close();

  // The drive's accounting against its mapping, at a quiet moment (it drains the write
  // cache and waits for an erase or checkpoint under way): every mapped record lies in
  // an open or sealed erase unit, below its write pointer; invariant 4 for every unit;
  // the live total; the free list holds exactly the free units, once each; each open
  // unit is some stream's. Corruption naming the first disagreement. For the model and
  // crash tests, after their steps and after every recovery.
  Status CheckInvariants();

  DriveStats stats() const;
  // Whether Open found the drive not closed cleanly, and so replayed what its last
  // checkpoint did not cover (a crash recovery: `eraid status` and the server's log say so).
  bool opened_after_crash() const { return opened_after_crash_; }
  // stats().live_bytes and .usable_bytes without the drive's lock, which a writer may
  // hold across a flash write: the scheduler asks for them in the volume's write path.
  uint64_t live_bytes() const { return live_bytes_.load(std::memory_order_relaxed); }
  uint64_t usable_bytes() const { return usable_bytes_; }
  // The compression of a range: the scheduler asks this per segment, so it walks only
  // the range's mapping entries (8 bytes per block).
  std::optional<RangeUsage> Usage(Lba lba, uint64_t count_blocks) const override;
  uint32_t erase_unit_blocks() const { return eu_blocks_; }
  double expansion() const { return options_.expansion; }

 private:
  struct Geometry;
  struct Eu;
  struct Stream;

  CompressedDrive(Backend& flash, const DriveOptions& options, const Geometry& geometry);

  Status DoRead(Lba lba, std::span<std::byte> buf);
  // `keep`: also the record's codec and payload.
  Status ReadBlock(uint64_t block, std::byte* out, StoredBlock* keep = nullptr);
  // ReadMany, and with `keep` (empty, or one per block) each record's codec and payload.
  void ReadManyKeeping(std::span<const Lba> blocks, std::span<std::byte> out,
                       std::span<StoredBlock> keep, std::span<Status> results);
  // Block `block` from its record as read: the header's CRC and LBA checked, the payload
  // decompressed (counted in corrupt_reads if any of it fails).
  Status DecodeBlockRecord(uint64_t block, std::span<const std::byte> record, std::byte* out,
                           StoredBlock* keep);
  // `reserved`: the room the write cache holds for this write, released when it returns,
  // after the live bytes its records added are published (see CacheWrite).
  Status DoWrite(Lba lba, std::span<const std::byte> buf, uint64_t reserved = 0);
  // The second half of DoWrite: appends the records of n blocks whose payloads (block i's
  // at payloads + i * 4 KiB) are encoded already, and maps them.
  // `compressed`: how many of the n this drive compressed (the rest were given).
  Status Store(uint64_t lba, uint64_t n, const std::byte* payloads,
               std::span<const Compressed> sizes, uint64_t reserved, uint64_t compressed);
  // The write cache (options_.write_cache_blocks > 0). `packed` (or null): the blocks'
  // records, block i's at index first + i, kept instead of a copy of `buf`.
  Status CacheWrite(Lba lba, std::span<const std::byte> buf,
                    std::shared_ptr<const PackedBlocks> packed = nullptr, uint32_t first = 0);
  Status CachedRead(Lba lba, std::span<std::byte> buf);
  // Holds room for a write of n blocks of at most `worst` record bytes, or NoSpace;
  // Store() releases it. REQUIRES: cache_mu_ held.
  Status AdmitLocked(Lba lba, uint64_t n, uint64_t worst);
  // Waits until every cached write is stored; returns the sticky background error.
  Status DrainCache();
  // The same, only if a cached write falls in [lba, lba + count_blocks).
  Status DrainCacheOf(Lba lba, uint64_t count_blocks);
  void CacheWorker();
  void Flusher();
  Status DoTrim(Lba lba, uint64_t count_blocks);

  // FlushLocked, holding mu_ only while the pages are written, not during the backend's
  // flush. REQUIRES: mu_ not held.
  Status FlushOutsideLock();

  // All REQUIRE mu_ held.
  // The record at `loc` is on flash (not only in an open erase unit's buffer).
  bool OnFlashLocked(uint64_t loc) const;
  Status FlushLocked();
  // Writes every open EU's pages, the partial last one included, and sets *upto to the
  // newest record's sequence number: the flush that follows makes every record durable.
  Status WriteOpenPagesLocked(uint64_t* upto);
  // Makes every record with seq <= `seq` durable, writing only the streams that hold one.
  Status SyncUpToLocked(uint64_t seq);
  // Its first half: every record with seq <= `seq` written to flash (not yet flushed).
  Status WriteUpToLocked(uint64_t seq);
  // Waits for a checkpoint being written without the lock, then writes one.
  // `clean` (Close only): marks the checkpoint as the last thing written (see
  // kCheckpointClean); the next record, or erase, first writes one that is not.
  Status CheckpointLocked(bool clean = false);
  // Before anything changes the flash after a clean checkpoint: a checkpoint that is not.
  Status DirtyLocked() { return clean_on_flash_ ? CheckpointLocked() : Status::Ok(); }
  // The same, holding `lock` (on mu_) only to take the image: the writes it needs and
  // both flash flushes run without it. Does nothing if another is being written.
  // REQUIRES: `lock` holds mu_; holds it again on return.
  Status CheckpointOutsideLock(std::unique_lock<std::mutex>& lock);
  // The payload the next checkpoint takes, and whether it is sparse (version 2).
  uint64_t CheckpointPayloadBytesLocked(bool* sparse) const;
  // The checkpoint image of the map and the EU table now, and its header.
  // The two halves of it: the copy of the state, under mu_ (a memcpy of the map pages),
  // and the CRC and header, which need no lock. `slot` is resized to the header block and
  // the payload's blocks: only those are written.
  void SnapshotCheckpointLocked(drive_format::CheckpointHeader* header,
                                std::vector<std::byte>* slot);
  static void SealCheckpoint(drive_format::CheckpointHeader* header, std::vector<std::byte>* slot);
  void CheckpointWrittenLocked(const drive_format::CheckpointHeader& h, uint64_t slot_bytes);
  // Writes a checkpoint image to its slot (the crash point "drive-checkpoint" is here).
  Status WriteCheckpointSlot(uint64_t ckpt_count, std::span<const std::byte> slot);
  // Appends a record to the stream's open EU (opening one as needed, which may run GC)
  // and assigns its sequence number into h->seq, after the EU header's (invariant 3).
  Status AppendLocked(uint32_t stream, drive_format::RecordHeader* h, const std::byte* payload,
                      uint64_t* loc);
  Status OpenEuLocked(uint32_t stream);
  Status SealLocked(uint32_t stream);
  // Set by a flash write's completion, on whichever thread polls the flash (not under mu_).
  using WriteDone = std::shared_ptr<std::pair<std::atomic<bool>, Status>>;
  // The stream's pages not yet on flash go out without waiting; `include_partial`: the
  // last, partly filled page too. Full pages go from the stream's buffer itself (appends
  // only write past write_ptr, and the buffer is recycled only after its EU's seal entry,
  // which is reaped after them), the partial page from a copy (appends go on filling it).
  // A write that would rewrite the page the stream's previous write ended in waits for
  // that one first, so two writes of one page are never in flight together (neither
  // io_uring nor NBD orders them). Reaped like the sealed EUs' writes.
  Status WritePagesLocked(Stream& s, bool include_partial);
  // Waits, under mu_, for the stream's last page write if a new one would overlap it.
  void OrderAfterLastWriteLocked(Stream& s);
  // Seals the stream's EU: its remaining pages go to flash without waiting, and its buffer
  // moves to the write's entry (reads are served from it until the entry is reaped by
  // whichever thread next holds mu_; then it is recycled).
  Status WritePagesAsyncLocked(Stream& s);
  // Adds a flash write of EU `eu`'s bytes `pages`, at its page `first_page`, to
  // flash_writes_ and submits it (none if `pages` is empty: an entry that only holds
  // `buf` until the writes before it are reaped). `pages` lies in `buf`, or in a buffer
  // that outlives the writes before the next `whole` entry. Waits for the oldest write
  // first when kMaxInFlight are in flight, so buffers stay bounded.
  Status SubmitPagesLocked(uint32_t eu, uint64_t first_page, std::span<const std::byte> pages,
                           std::vector<std::byte>&& buf, bool whole, WriteDone* done = nullptr);
  // Takes in finished flash writes; `wait`: all of them. Returns the first write error
  // (sticky: the flash has failed). Every flash flush, read of a sealed EU and erase
  // waits for the writes before it.
  Status ReapLocked(bool wait);
  // The flash writes in flight now, to be waited for without mu_ (WaitForWrites): what a
  // flush or checkpoint taken now must find on flash.
  std::vector<WriteDone> WritesInFlightLocked() const;
  Status WaitForWrites(const std::vector<WriteDone>& writes);
  static void WaitForWrite(Backend& flash, const WriteDone& w);
  Status EnsureFreeLocked();
  Status CollectLocked();
  // The background_free_eus thread, and one round of its work: picks garbage-only sealed
  // EUs (those already superseded durably first), marks them erasing, and lets go of the
  // lock for the flash flush they may need and for their erases. REQUIRES: `lock` holds mu_.
  void Eraser();
  Status EraseGarbageEus(std::unique_lock<std::mutex>& lock);
  // Until no EU is being erased and no checkpoint written without mu_: lends the
  // caller's lock to the wait. REQUIRES: mu_ held (by a lock_guard or unique_lock).
  void WaitForBackgroundLocked();
  Status RelocateLocked(uint32_t eu);
  // Erases EU `eu`: zeroes its header page (recovery then finds it free) and tells the
  // timing model, if any. Its live records must be gone (invariant 2).
  Status EraseEu(uint32_t eu);
  uint32_t StreamForLocked(uint64_t lba);
  void CloseRangeLocked(std::map<uint64_t, std::pair<uint64_t, uint32_t>>::iterator it);
  Status ReadRecordLocked(uint64_t loc, std::vector<std::byte>* out);
  // `by_seq`: the record (write or trim) that supersedes the old one.
  void UnmapLocked(uint64_t lba, uint64_t by_seq);
  // Opening: the newest valid checkpoint, the records written after it, the accounting.
  Status RecoverLocked();
  // RecoverLocked's steps (drive_recovery.cc). The checkpoint whose map is loaded, with
  // its erase units as it recorded them; the records each unit holds past the checkpoint
  // (all of them for a unit allocated since), appended to `found`; those applied, oldest
  // first; the live bytes counted from the map, returning the LBAs that point where
  // nothing survives.
  struct Checkpointed;
  struct FoundRecord;
  Result<Checkpointed> LoadNewestCheckpointLocked();
  Status ScanUnitsLocked(const Checkpointed& ckpt, std::vector<FoundRecord>* found,
                         uint64_t* max_seq);
  void PrefetchScanLocked(const Checkpointed& ckpt);
  void ApplyFoundLocked(std::vector<FoundRecord>& found, uint64_t ckpt_seq);
  std::vector<uint64_t> CountLiveLocked();
  // Fills map_ from a checkpoint's payload (dense or sparse); Corruption if the sparse
  // form does not add up (its CRC passed, so only a bug or a forged slot does that).
  Status LoadCheckpointMapLocked(const drive_format::CheckpointHeader& h,
                                 std::span<const std::byte> payload);

  Backend& flash_;
  const DriveOptions options_;
  const uint32_t eu_blocks_;
  const uint64_t eu_bytes_;
  std::unique_ptr<std::byte[]> gc_buf_;  // RelocateLocked's read of a victim (under mu_)
  const uint64_t logical_blocks_;
  const uint32_t num_eus_;
  const uint64_t data_start_block_;
  const uint32_t ckpt_slot_blocks_;
  const uint32_t format_version_;
  const uint32_t align_shift_;  // records start at multiples of 2^this (RecordFootprint)
  const uint64_t usable_bytes_;

  CompletionQueue completions_;
  mutable std::mutex mu_;
  std::atomic<uint64_t> erasures_{0};  // erase units erased so far (bumped under mu_)
  DriveMap map_;                       // LBA -> packed record location; 0 = unmapped
  std::vector<Eu> eus_;
  std::vector<uint32_t> free_eus_;
  std::vector<Stream> streams_;
  // Flash writes in flight, oldest first: sealed EUs' (WritePagesAsyncLocked) and open
  // EUs' pages (WritePagesLocked).
  struct FlashWrite {
    uint32_t eu = 0;
    // whole: a sealed EU's buffer, also what reads of it are served from; otherwise empty
    // or the copy of an open EU's partial page.
    std::vector<std::byte> buf;
    bool whole = false;
    // Set by the completion, on whichever thread polls the flash (not under mu_).
    WriteDone done;
  };
  std::deque<FlashWrite> flash_writes_;
  std::vector<std::vector<std::byte>> spare_bufs_;  // EU buffers whose writes are done
  Status flash_error_;
  // FlashAlloc ranges: start -> (end, stream).
  std::map<uint64_t, std::pair<uint64_t, uint32_t>> ranges_;
  uint64_t next_seq_ = 1;
  uint64_t ckpt_seq_ = 0;     // every record with seq <= this is reflected in the checkpoint
  uint64_t durable_seq_ = 0;  // every record with seq <= this is on flash and flushed
  uint64_t ckpt_count_ = 0;
  bool clean_on_flash_ = false;  // the newest checkpoint on flash is a clean one
  bool opened_after_crash_ = false;
  uint64_t bytes_since_ckpt_ = 0;
  uint64_t use_clock_ = 0;  // orders FlashAlloc ranges for eviction
  DriveStats stats_;

  // The write cache. Lock order: cache_mu_, then mu_ (never the other way round).
  // A cached write, or (flush set) a flush that completes once every write before it is
  // stored and the flash is flushed: the drives of an array flush in parallel.
  struct CachedWrite {
    uint64_t lba = 0, blocks = 0, id = 0;
    std::shared_ptr<std::vector<std::byte>> data;  // the blocks, or null when packed
    IoCallback flush;
    uint64_t reserved = 0;  // bytes admission reserved; DoWrite releases exactly these
    std::shared_ptr<const PackedBlocks> packed;  // the blocks' records, from packed_first on
    uint32_t packed_first = 0;
  };
  // stats_.live_bytes, published (release) after every change under mu_: for
  // live_bytes() and CacheWrite's admission.
  std::atomic<uint64_t> live_bytes_{0};
  std::atomic<uint64_t> async_flushes_{0};  // queued flushes, counted in in_flight()
  std::mutex cache_mu_;
  std::condition_variable cache_work_cv_;  // the worker: work or stop
  std::condition_variable cache_done_cv_;  // writers waiting for room; drains
  std::deque<CachedWrite> cache_queue_;
  // LBA -> the newest cached write of it: its id, and the block's data (at `offset` in
  // `data`) or its record (`packed`'s block `offset`).
  struct CachedBlock {
    uint64_t id;
    std::shared_ptr<std::vector<std::byte>> data;
    uint64_t offset;
    std::shared_ptr<const PackedBlocks> packed;
    // Copies the block's data into out (4 KiB).
    Status CopyTo(std::byte* out) const;
  };
  std::unordered_map<uint64_t, CachedBlock> cached_;
  std::atomic<size_t> cached_size_{0};  // cached_.size(), for reads that find it empty
  uint64_t cache_blocks_ = 0;           // queued or being stored
  // Worst-case record bytes of those: added at admission, released by DoWrite after it
  // has published the live bytes the write added (CacheWrite reads it without mu_).
  std::atomic<uint64_t> cache_reserved_bytes_{0};
  uint64_t next_cache_id_ = 1;
  Status cache_error_;
  bool cache_stop_ = false;
  std::thread cache_worker_;
  // Host flushes whose pages the cache worker has written: the flusher thread flushes
  // the flash for them (one flash flush for all queued) and completes them, while the
  // worker goes on storing the writes queued behind them. Under cache_mu_.
  struct PendingFlush {
    uint64_t upto = 0;  // every record with seq <= upto is durable after the flash flush
    IoCallback done;
    Status status;  // not ok: completed with it, without flushing
  };
  std::deque<PendingFlush> flush_queue_;
  std::condition_variable flusher_cv_;
  bool flusher_stop_ = false;
  std::thread flusher_;

  // The eraser (background_free_eus). Under mu_.
  std::condition_variable eraser_cv_;  // the eraser: wanted or stop
  std::condition_variable erased_cv_;  // WaitForBackgroundLocked: erases or a checkpoint done
  bool eraser_wanted_ = false, eraser_stop_ = false;
  uint32_t erasing_eus_ = 0;  // in state kErasing: neither sealed nor free
  // A checkpoint is being written without mu_ (CheckpointOutsideLock). Under mu_.
  bool checkpointing_ = false;
  std::thread eraser_;
};

}  // namespace eraid
