// ElasticArray: n+1 Backends as one array of elastic segments, each protected as RAID5
// or RAID10, recorded in a crash-safe bitmap, convertible both ways while the array
// serves, and readable with any one device missing.
//
// The log above uses it as a segment store:
//   AllocateSegment(scheme) -> Append(block, tags)* -> Seal -> ... -> Free
// Append returns the block's position in the segment. Positions are also used by the
// array's own summary blocks (one ahead of each batch of appended blocks), which record
// every block's CRC32C and the two tag words the caller passes (user LBA, write time);
// after a restart, TakeRecoveredBlocks() hands those back, once, so the log can rebuild
// its map (the tags are not kept in RAM: they are on disk in the summaries).
//
// Redundancy and durability (docs/raid.md):
//   - RAID5 parity is written only over full rows (a sealed segment's last row is padded
//     with zeros), so there is no write hole. Blocks of a partial row that a Flush() must
//     make durable are mirrored into slot-2, as RAID10 would place them, until the row's
//     parity is durable.
//   - Every read is checked against its CRC; a mismatch or a failed device is answered
//     from the mirror or by XOR of the row, checked again, repaired in place when the
//     device is healthy, and counted. A block no copy of which matches is DataLoss.
//   - Conversion never updates in place: build the other redundancy, flush, flip the
//     bitmap (journalled on every device), then trim the old redundancy.
//   - A device that returns an error is failed: the others' superblocks record it and
//     the array runs degraded. Replace() rebuilds a new device online, segment by segment.
//
// Thread-safety: all public methods may be called from any thread; they serialise on one
// array lock, except that reads of healthy blocks and a conversion's copying share it,
// Flush() holds it only before and after its device flush, and full rows are written to
// the devices without it (docs/raid.md; segment-granular locking is future work).
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <thread>
#include <vector>

#include "common/aligned_buffer.h"
#include "common/clock.h"
#include "common/rw_mutex.h"
#include "compress/backend.h"
#include "raid/change_tracker.h"
#include "raid/geometry.h"
#include "raid/metadata.h"
#include "raid/scheme.h"

namespace eraid {

using raid_format::DeviceState;
using raid_format::SegmentScheme;

struct ArrayOptions {
  uint32_t chunk_blocks = 16;   // 64 KiB
  uint32_t rows_per_slot = 16;  // a segment = 16 rows: 3 MiB of data with n = 3
  bool flashalloc = true;       // call FlashAlloc on every device when a segment opens
};

struct DeviceStats {
  DeviceState state = DeviceState::kOk;
  uint64_t reads = 0, writes = 0, trims = 0, errors = 0;
};

struct ArrayStats {
  // Sealed segments by scheme; open ones (the log's, being filled) apart.
  uint32_t segments = 0, free_segments = 0, raid5_segments = 0, raid10_segments = 0,
           open_segments = 0;
  uint64_t user_blocks = 0;  // data positions written in non-free segments
  uint64_t raid10_user_blocks = 0;
  uint64_t reconstructions = 0;  // reads answered from redundancy
  uint64_t crc_mismatches = 0;   // reads whose first copy failed its CRC
  uint64_t repairs = 0;          // blocks rewritten in place after a mismatch
  uint64_t data_loss = 0;        // reads no copy of which matched
  uint64_t conversions_to_raid10 = 0, conversions_to_raid5 = 0, conversion_bytes = 0;
  uint64_t mirrored_partial_blocks = 0;  // RAID5 blocks mirrored to make a flush durable
  uint64_t packed_blocks = 0;            // blocks compressed here for the drives (set_row_codec)
  uint64_t row_writer_rows = 0;          // full rows written by the row writer (StartRowWriter)
  // Times the journal ring was full and a record waited for a device flush and a
  // checkpoint under the exclusive lock (stalling every reader and writer).
  uint64_t journal_ring_stalls = 0;
  // Freed segments whose space the drives still hold: their trims follow the flush that
  // makes the free durable (docs/raid.md).
  uint32_t untrimmed_free_segments = 0;
  uint64_t pending_unmirror_trims = 0;  // slot-2 copies waiting for a flush to be trimmed
  // The CRC cache (set_crc_cache_bytes): bytes of per-position CRCs in RAM now, and how
  // many times a sealed segment's were read back from its summaries or let go.
  uint64_t crc_cache_bytes = 0, crc_cache_loads = 0, crc_cache_evictions = 0;
  // RAM of the array's per-segment state besides the CRC cache: the summary flags,
  // recovered tags not yet taken, the segment records, the open segments' row buffers.
  uint64_t memory_bytes = 0;
  bool degraded = false;      // some device failed or rebuilding
  bool data_at_risk = false;  // more devices failed than redundancy covers
  std::vector<DeviceStats> devices;
};

struct SegmentInfo {
  SegmentScheme scheme = SegmentScheme::kFree;
  bool open = false, sealed = false;
  uint32_t frontier = 0;    // positions written
  uint64_t generation = 0;  // which allocation of the segment this is (raid format)
  // From the drives, where they can tell (0 otherwise): compression of the data chunks
  // and of the parity chunks (RAID5) of this segment.
  double alpha_usr = 0, alpha_pty = 0;
  uint64_t physical_bytes = 0;  // stored bytes of the segment on all devices
  // Recovery could not read a summary (every copy damaged) before the segment's journalled
  // frontier: the blocks written after it are unknown (counted in ArrayStats::data_loss).
  bool summaries_lost = false;
};

struct ScrubReport {
  uint64_t segments = 0, blocks_checked = 0;
  uint64_t crc_mismatches = 0, parity_mismatches = 0, mirror_mismatches = 0;
  uint64_t repaired = 0, unrepairable = 0;
  std::vector<std::string> findings;  // the first few, "segment S row R: what"
};

struct RebuildProgress {
  uint32_t segments_done = 0, segments_total = 0;
  uint64_t bytes_written = 0;
};

// What a re-add wrote, against what a full rebuild of the device would have.
struct ReAddReport {
  uint64_t resynced_bytes = 0, total_bytes = 0;
  uint32_t segments_resynced = 0, segments_total = 0;  // of the segments in use
};

class ElasticArray;

// Rows that a caller's appends filled, left for the caller to write once it has let its
// own locks go (the volume: docs/raid.md, "Rows written outside the locks"). Given to
// Append and Seal, the batch takes the rows they fill instead of the call writing them
// after the array lock; Write() writes them (or hands them to the row writer), and the
// destructor writes what is left. The rows also wait in the array's queue, so a Flush,
// Seal, conversion or rebuild on another thread never waits on a batch: it writes any
// queued row itself.
class RowBatch {
 public:
  explicit RowBatch(ElasticArray& array) : array_(array) {}
  ~RowBatch() {
    if (rows_ > 0) Write();  // what it took and nobody wrote yet
  }
  RowBatch(const RowBatch&) = delete;
  RowBatch& operator=(const RowBatch&) = delete;
  // The rows queued so far written (by this thread, or handed to the row writer).
  void Write();
  // Every row queued so far, by any caller, written and done on return (a caller about to
  // read the drives' counters, or to let the array go).
  void WriteAndWait();
  // Rows this batch took since its last Write.
  uint64_t rows() const { return rows_; }

 private:
  friend class ElasticArray;
  ElasticArray& array_;
  uint64_t rows_ = 0;
};

class ElasticArray {
 public:
  // Writes a new array over `devices` (not owned; they must outlive the array).
  static Result<std::unique_ptr<ElasticArray>> Create(std::vector<Backend*> devices,
                                                      const ArrayOptions& options,
                                                      const Clock& clock = SystemClock::Default());
  // Opens an existing array: superblocks, bitmap (checkpoint + journal), then every
  // segment's summaries; segments left open by a crash are completed and sealed.
  static Result<std::unique_ptr<ElasticArray>> Open(std::vector<Backend*> devices,
                                                    const Clock& clock = SystemClock::Default());
  ~ElasticArray();

  const ArrayGeometry& geometry() const { return geometry_; }
  uint64_t array_id() const { return array_id_; }

  // Opens a free segment in `scheme` (the lowest-numbered free one, preferring those whose
  // free is durable); NoSpace if none. Durable at the next flush, like the blocks appended
  // to it (a crash before then leaves it free, and nothing in it was acknowledged).
  Result<SegmentId> AllocateSegment(SegmentScheme scheme);
  // Appends one block; returns its position. NoSpace when the segment is full.
  // A row that the block completes is written to the devices outside the array lock:
  // Append queues it and writes it itself after letting the lock go, or, given a batch,
  // leaves it to the batch, which the caller writes once it has let its own locks go.
  // Until its writes are done a row is read from its buffer; a Flush() or Seal() writes
  // or waits for every row queued before it.
  Result<uint32_t> Append(SegmentId s, std::span<const std::byte> block, uint64_t tag_lba,
                          uint64_t tag_time, RowBatch* rows = nullptr);
  // The devices are compressing drives with this codec: each full row's blocks are then
  // compressed once, by the thread that writes the row (outside the locks), and handed to
  // the drives as records (Backend::SubmitWritePacked) — a RAID10 row's blocks reach two
  // drives, which would otherwise compress a copy each. Set before any I/O.
  void set_row_codec(std::optional<CodecConfig> codec) { row_codec_ = codec; }
  // Starts a thread of the array's own that writes the rows Append queues: a user write
  // that fills a row then returns without compressing and writing it (48 blocks at once,
  // ~0.2 ms), and the drives' appends run on one thread rather than on every writer's.
  // A backlog of more than kRowWriterBacklog rows is written by the writers themselves,
  // so the queue (and the memory of its row buffers) stays bounded. Stopped by the
  // destructor, which writes what is left.
  void StartRowWriter();
  static constexpr size_t kRowWriterBacklog = 4;
  // Data blocks that surely fit in an open segment (a slot is kept for a summary).
  uint32_t Remaining(SegmentId s) const;
  // Seal: no flush of its own; the seal record is written after the next flush (which
  // makes the blocks durable) and is durable after the one following it. A crash before
  // then leaves an open segment, which recovery completes and seals. Free: durable at the
  // next flush, and the segment's space is trimmed after it.
  // The segment's last row is written as Append's are (given a batch, by the batch).
  Status Seal(SegmentId s, RowBatch* rows = nullptr);
  Status Free(SegmentId s);
  Status Read(SegmentId s, uint32_t position, std::span<std::byte> out);
  // Read of many positions of one segment: positions[i] into the i-th 4 KiB of `out`,
  // its outcome in results[i]. Each device's share is asked for at once (a remote drive
  // then needs a few round trips, not one per block); a block the fast path cannot give
  // (a device down, a CRC mismatch) is read alone, as Read does it.
  void ReadMany(SegmentId s, std::span<const uint32_t> positions, std::span<std::byte> out,
                std::span<Status> results);
  // Makes every block appended so far durable.
  Status Flush();
  // A clean shutdown: Flush(), then journal each open segment's frontier, so the next
  // open can tell a summary damaged beyond repair from the end of what was written (at a
  // crash it cannot, for segments that were open; docs/reliability.md).
  Status RecordOpenFrontiers();

  // Every data block the last Open found (in segments not freed since), with its tags as
  // its summary recorded them; then forgets them (they took 16 bytes per block of RAM
  // for what the log already knows). A second call, or one after Create, finds none.
  void TakeRecoveredBlocks(const std::function<void(SegmentId, uint32_t position, uint64_t tag_lba,
                                                    uint64_t tag_time)>& fn);

  // The tags of every data block of segment s, in position order, as its summaries hold
  // them (those written read back through Read's checked path, the open batch's from
  // RAM): what the log needs to collect a segment, kept on disk rather than in RAM.
  // DataLoss if no copy of a summary matches its CRC.
  Status ReadTags(
      SegmentId s,
      const std::function<void(uint32_t position, uint64_t tag_lba, uint64_t tag_time)>& fn);

  // Converts a sealed segment. A no-op if it already has that scheme.
  Status Convert(SegmentId s, SegmentScheme to);

  Status FailDevice(DeviceIndex device);
  // Rebuilds `fresh` as device `device`, online, segment by segment. `rate_bytes_per_sec`
  // (0 = unlimited) caps the rebuild's writes; `progress` is called after each segment.
  Status Replace(DeviceIndex device, Backend* fresh, uint64_t rate_bytes_per_sec = 0,
                 const std::function<void(const RebuildProgress&)>& progress = nullptr);
  // Brings back failed device `device` on `returning` — the same drive, back after an
  // outage — by rebuilding only the segments it may lack: those written, converted,
  // trimmed or freed since its last successful flush (ChangeTracker), each trimmed on it
  // first. Refused (InvalidArgument; use Replace) if the drive is not this array's device
  // `device` of the incarnation that left, or if it was already failed when the array
  // was opened (what it lacks is then unknown). Online, like Replace.
  Result<ReAddReport> ReAdd(DeviceIndex device, Backend* returning, uint64_t rate_bytes_per_sec = 0,
                            const std::function<void(const RebuildProgress&)>& progress = nullptr);
  Result<ScrubReport> Scrub();

  // RAM for the blocks' CRCs (4 bytes a position): open segments and those being
  // converted keep theirs; sealed segments' are a cache of what their summaries hold,
  // read back (every summary of the segment, through the checked read path) when a read,
  // conversion or rebuild needs them and let go, least recently used first (second-chance
  // CLOCK), while the total is over this. 0: no bound (every segment keeps its CRCs).
  static constexpr uint64_t kDefaultCrcCacheBytes = uint64_t{32} << 20;
  void set_crc_cache_bytes(uint64_t bytes);

  ArrayStats stats() const;
  // With usage = false, only the array's own state: no device queries (cheap).
  SegmentInfo segment_info(SegmentId s, bool usage = true) const;

  // Checks the in-memory state against the array's invariants (docs/raid.md): per
  // segment, the records of its positions, its batches, its open row or its seal; the
  // work waiting for a flush; the journal ring. Corruption names the first that fails.
  // For the model-based and crash tests, after every step (takes the array lock).
  Status CheckInvariants() const;

  struct Segment;  // public for the scheme implementations (raid/scheme.h)
  class Io;

 private:
  ElasticArray(std::vector<Backend*> devices, const ArrayGeometry& g, uint64_t array_id,
               const Clock& clock);
  class Conversion;  // one Convert(), step by step (array_conversion.cc)

  Status WriteSuperblocksLocked();
  Status CheckSegmentLocked(uint32_t index) const;
  // Replace and ReAdd: `target` becomes device `device` and is rebuilt segment by
  // segment — every segment, or those flagged in `only` (trimmed on it first).
  Status CheckRebuildLocked(uint32_t device, Backend* target) const;
  Status Rebuild(uint32_t device, Backend* target, const std::vector<bool>* only,
                 uint64_t rate_bytes_per_sec,
                 const std::function<void(const RebuildProgress&)>& progress, ReAddReport* report);
  // Rebuild's steps, under the lock: segment s's rows read together and the device's
  // share of them written together (its bytes added to `written`); then the flushed part
  // of an open segment's open row. A re-add's count of what a full rebuild would write.
  Status RebuildSegmentLocked(uint32_t device, SegmentId s, uint64_t* written);
  void RebuildOpenRowLocked(uint32_t device, SegmentId s, uint64_t* written);
  void CountFullRebuildLocked(uint32_t device, SegmentId s, ReAddReport* report) const;
  // A journal record of the segment's current entry. kNow flushes every device after it:
  // for a flip something relies on at once (a conversion, recovery). kAtNextFlush only
  // writes it, and whatever flush comes next makes it durable (the ring is replayed in
  // order, so no later record survives a crash without it). Until then a crash leaves
  // the segment as it was before the record, which recovery handles
  // (docs/format/raid.md, "When records become durable").
  enum class Durable { kNow, kAtNextFlush };
  Status JournalLocked(uint32_t segment, Durable when = Durable::kNow);
  // Flushes every device, then does what waited for that flush: the trims of freed
  // segments (their FREE records are durable now) and of rows whose parity is, and the
  // seal records of segments whose blocks are (written now, durable at the next flush).
  void FlushDevicesLocked();
  // The trims of a whole segment (both slots) on every device.
  void AddSegmentTrims(uint32_t segment, std::vector<DeviceTrim>* out) const;
  // Writes the bitmap checkpoint into the other slot (no flush); returns the seq it covers.
  uint64_t WriteCheckpointLocked();
  // The same, durable on return.
  Status CheckpointBitmapLocked();
  Status RecoverLocked();
  // Open's walk of every segment's chain of summaries (see array_metadata.cc). A walk is
  // one segment's: `positions` bounds its chain, `pos` is where its next summary must be.
  struct ChainWalk {
    uint32_t segment = 0, positions = 0, pos = 0;
  };
  Status RecoverSegmentsLocked();
  // Adopts the summary at w->pos, given as read from its primary copy (`first`, if
  // `first_ok`; else, or if it is not the summary, read again with the other copies);
  // false where the chain ends.
  bool StepChainLocked(ChainWalk* w, std::span<const std::byte> first, bool first_ok);
  Status FlushLocked();
  // What every flush does first, under the lock: closes open batches, mirrors partial
  // rows into slot-2, and queues the slot-2 trims of rows whose parity now exists.
  Status PrepareFlushLocked();
  // What a Flush() whose device flush began at `epoch` completes, under the lock again.
  struct FlushSnapshot {
    uint64_t epoch = 0, pending_checkpoint = 0, journal_seq = 0;
  };
  void FinishFlushLocked(const FlushSnapshot& snap);
  // A checkpoint that was pending (written, `flushed` its journal seq) when a flush of
  // every device began is durable now: the ring may overwrite what it covers.
  void PromoteCheckpointLocked(uint64_t flushed);
  // Writes the open batch's summary into the row buffer.
  Status CloseBatchLocked(uint32_t index);
  // How a verified read treats a bad copy: rewrite it in place (kRepair), leave it
  // (kNoRepair), or — for recovery looking for what may not exist — neither repair nor
  // count anything (kProbe).
  enum class ReadMode { kRepair, kNoRepair, kProbe };
  Status ReadVerifiedLocked(SegmentId s, uint32_t pos, std::span<std::byte> out,
                            const std::function<bool(std::span<const std::byte>)>& valid,
                            ReadMode mode);
  // The fast path of every read of blocks (Read, ReadMany, ReadRowsLocked): block i of
  // `out` gets positions[i]'s data from the open row's buffer if it is not on the devices
  // yet, else from its primary copy — every primary copy asked for at once, on every
  // device together — if that device is readable and the copy matches its CRC. Sets
  // served[i] for what it gave, skips what is served already; the rest is the slow
  // path's (ReadVerifiedLocked, ReconstructShared). Positions past the frontier are left
  // alone; so are those whose CRCs are not resident: returns whether there were any.
  // Counts in atomics and fails no device, so the lock may be shared. The devices are
  // asked as Io::ReadPerDevice asks them: one block, one synchronous read; more, each
  // device's share in one batch, every device's batch in flight together.
  // REQUIRES: mu_ held, shared or exclusive.
  bool ServePrimariesLocked(SegmentId s, const Segment& seg, std::span<const uint32_t> positions,
                            std::span<std::byte> out, std::span<uint8_t> served);
  // Reads row r's written blocks through the CRC-checked path into `row` (zeros beyond
  // the frontier and for blocks no copy of which matches); returns how many did not.
  uint32_t ReadRowLocked(SegmentId s, uint32_t r, AlignedBuffer* row, ReadMode mode);
  // The same for rows [first, first + n) into `rows` (n rows, one after another). Every
  // primary copy is read at once, on every device together; only what that did not
  // verify goes block by block through ReadVerifiedLocked. If `unreadable_rows`, the
  // count per row.
  uint32_t ReadRowsLocked(SegmentId s, uint32_t first, uint32_t n, AlignedBuffer* rows,
                          ReadMode mode, std::vector<uint32_t>* unreadable_rows = nullptr);
  // Position `pos` of `seg` rebuilt from its redundancy, under the shared lock (its primary
  // copy's device is down): reads only, counted in atomics; false if no copy it reaches
  // matches the CRC (the caller retries under the exclusive lock, which repairs and
  // counts). REQUIRES: mu_ held shared, and the segment's CRCs loaded.
  bool ReconstructShared(SegmentId s, const Segment& seg, uint32_t pos, std::span<std::byte> out);
  // The CRC cache (set_crc_cache_bytes). LoadCrcsLocked makes segment s's CRCs resident
  // (DataLoss if a summary cannot be read); TrimCrcCacheLocked lets sealed segments' go
  // until the total is within the bound, never `keep`'s; CountCrcLocked brings the total
  // up to date after seg.crc's capacity changed.
  Status LoadCrcsLocked(SegmentId s);
  void TrimCrcCacheLocked(uint32_t keep = UINT32_MAX);
  void CountCrcLocked(Segment& seg);
  Status SealLocked(SegmentId s);
  Status FinishRecoveredSegmentLocked(SegmentId s);
  Result<uint32_t> AppendLocked(SegmentId s, std::span<const std::byte> block, uint64_t tag_lba,
                                uint64_t tag_time);

  // Rows written outside the lock (Append). A full row's buffer moves from its segment to
  // a PendingRow, queued; whoever writes it does so without the array lock, and leaves
  // its device results for the next holder of the lock (ApplyRowResultsLocked).
  struct PendingRow;
  // `last`: a seal's (the segment keeps no row buffer).
  void DetachRowLocked(uint32_t index, bool last = false);
  void WriteRow(PendingRow& row);
  friend class RowBatch;
  // Writes every queued row (any thread's); returns once they are submitted and done —
  // unless the row writer runs (StartRowWriter) and at most kRowWriterBacklog rows are
  // queued: then it hands them to that thread and returns at once.
  void WriteQueuedRows();
  // Writes queued rows in this thread until none is queued; returns how many it wrote.
  size_t WriteRowsHere();
  void RowWriterLoop();
  // The records of the blocks of `base` (a row) that `writes` store; the rest unpacked.
  std::shared_ptr<const PackedBlocks> PackRow(const CodecConfig& codec,
                                              std::span<const std::byte> base,
                                              const std::vector<DeviceWrite>& writes);
  // Writes the queued rows and waits for those other threads are writing, until every
  // row numbered up to `upto` is done. Needs no lock and may be called holding the array
  // lock (a row's writer never takes it).
  void DrainRows(uint64_t upto = UINT64_MAX);
  // Device counts and errors of finished rows; their buffers back to the spares.
  void ApplyRowResultsLocked();
  // A block of a row whose writes are not done yet (nullptr: none).
  const std::byte* UnwrittenBlockLocked(const Segment& seg, uint32_t pos) const;

  ArrayGeometry geometry_;
  uint64_t array_id_ = 0;
  const Clock& clock_;
  // Exclusive for everything but the fast path of Read(): a healthy primary copy whose CRC
  // matches is read under a shared lock, so reads run side by side; anything else
  // (a mismatch, a failed device, a repair) retries under the exclusive lock.
  mutable RwMutex mu_;
  std::array<std::atomic<uint64_t>, kMaxDevices> fast_reads_{};  // device reads of the fast path
  std::atomic<uint64_t> shared_reconstructions_{0};  // ReconstructShared's, beside stats_'s
  ArrayStats stats_;                        // before io_, which keeps the per-device part of it
  std::unique_ptr<ChangeTracker> changes_;  // before io_, which marks what it writes
  std::unique_ptr<Io> io_;
  std::vector<std::unique_ptr<Segment>> segments_;
  uint64_t super_generation_ = 0;
  // The superblock generation at which each device last joined (was healthy at open, or
  // finished a rebuild): a drive re-added in its place must be at least that recent.
  std::array<uint64_t, kMaxDevices> joined_generation_{};
  uint64_t journal_seq_ = 0;             // last journal record written
  uint64_t checkpoint_seq_ = 0;          // journal seq the newest durable bitmap checkpoint covers
  uint64_t pending_checkpoint_seq_ = 0;  // a checkpoint written, durable at the next flush; 0: none
  uint32_t checkpoint_slot_ = 0;
  // Work that waits for the next flush of every device (FlushDevicesLocked).
  // Each item carries the flush epoch it was queued in: Flush() runs the device flush
  // without the lock, and completes only what was queued before it began (epoch <= the
  // one it took); FlushDevicesLocked completes everything.
  std::map<uint32_t, uint64_t> frees_awaiting_flush_;  // freed; trimmed once FREE is durable
  // Sealed, journalled once the blocks are durable; with the entry last journalled.
  std::map<uint32_t, raid_format::SegmentEntry> seals_awaiting_flush_;
  std::map<uint32_t, uint64_t> seal_epochs_;  // the same segments' epochs
  // Per RAID5 segment: slot-2 copies of rows flushed part-full, whose parity is written
  // (a conversion first flushes them away: it may write slot-2 itself).
  std::map<uint32_t, std::vector<std::pair<uint64_t, DeviceTrim>>> unmirror_awaiting_flush_;
  uint64_t flush_epoch_ = 1;
  // Row buffers of sealed segments, for the next segments to open: a row is 192 KiB by
  // default, which malloc maps fresh and the kernel zeroes page by page (a page fault
  // each) every time a segment opened, 1.8% of a served array's CPU under random writes.
  std::vector<AlignedBuffer> spare_row_bufs_;
  bool journal_unflushed_ = false;  // a kAtNextFlush record not yet flushed
  uint64_t crc_cache_limit_ = kDefaultCrcCacheBytes;
  uint64_t crc_bytes_ = 0;  // the capacity of every segment's crc, in bytes
  uint32_t crc_hand_ = 0;   // the CLOCK's

  // Rows written outside the lock. rows_detached_ numbers them (under mu_); the rest is
  // under rows_mu_ (taken after mu_, never before it).
  std::optional<CodecConfig> row_codec_;
  std::atomic<uint64_t> packed_blocks_{0};  // ArrayStats::packed_blocks
  uint64_t rows_detached_ = 0;
  std::mutex rows_mu_;
  std::condition_variable rows_cv_;                      // a row finished
  std::deque<std::shared_ptr<PendingRow>> queued_rows_;  // detached, nobody writing them yet
  std::atomic<size_t> rows_queued_{0};  // queued_rows_.size(), read without the mutex
  std::set<uint64_t> rows_unfinished_;  // detached, writes not all done
  std::vector<std::shared_ptr<PendingRow>> rows_finished_;  // done, not yet applied
  std::atomic<bool> rows_to_apply_{false};
  // The row writer (StartRowWriter), under rows_mu_ but for the flag read without it.
  std::condition_variable rows_work_cv_;  // a row queued, or stop
  std::atomic<bool> row_writer_on_{false};
  std::atomic<uint64_t> row_writer_rows_{0};  // ArrayStats::row_writer_rows
  bool row_writer_stop_ = false;
  std::thread row_writer_;
};

}  // namespace eraid
