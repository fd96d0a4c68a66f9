// LogVolume: the log over the elastic array — one space of 4 KiB blocks (LBAs) stored as a
// log, with SepBIT (or another) placement and GC, through the same LogEngine that
// eraid-sim runs on traces. Users do not see it whole: NamedVolumes (named_volumes.h) cuts its LBA
// space into the named volumes they read and write (NBD exports), the default one first.
//
// Durability: Flush() makes every acknowledged write durable (the array's flush; a
// partial RAID5 row is mirrored, see docs/raid.md). Trim unmaps: the blocks read as
// zeros, their copies are garbage for GC, and a trim record in the log (a zero block,
// nothing on a compressing drive) keeps recovery from bringing them back for as long as
// an older copy remains; it is as durable and crash-ordered as a write (docs/log.md).
//
// Recovery: Open() rebuilds the map from the array's segment summaries alone (each block
// carries its LBA, last user-write time and class); the newest copy of each LBA wins.
//
// Thread-safety: all methods may be called concurrently. Reads share the volume's lock
// (the log engine's Read only looks up its map); everything else holds it exclusively,
// except a flush round's array flush, which runs without it. A flusher thread (started
// when GC first needs it) runs the rounds that free GC's victims.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/rw_mutex.h"
#include "log/log_engine.h"
#include "raid/array.h"

namespace eraid {

enum class GcTrigger {
  kFreeSpace,          // when free segments run low (the default: free space is used first)
  kGarbageProportion,  // whenever GP > gp_threshold, as the SepBIT paper (and eraid-sim)
};

struct VolumeOptions {
  std::string placement = "sepbit";
  Selection selection = Selection::kCostBenefit;
  double gp_threshold = 0.15;
  GcTrigger gc_when = GcTrigger::kFreeSpace;
  SegmentScheme scheme = SegmentScheme::kRaid5;  // new segments (the scheduler converts later)
  // Exported capacity as a fraction of the array's data positions that remain after the
  // open segments: the rest is the room GC works in.
  double utilization = 0.75;
  // With kFreeSpace: GC victims freed per flush of their copies (0: half the segments GC
  // keeps in reserve, at least 1).
  uint32_t gc_frees_per_flush = 0;
  // With kFreeSpace: GC copies at most this many blocks per user block written, so a
  // writer never waits for a whole victim (docs/log.md, "GC in steps"); whole victims
  // only when half the reserve is gone. 0: whole victims always.
  uint32_t gc_step_blocks = 8;
  // Open even when recovery found a segment whose summaries are beyond repair (two copies
  // damaged): the blocks written there are unknown, so some LBAs would read an older
  // version. Without it, Open refuses with DataLoss and names the segment.
  bool salvage = false;
  // Named volumes (log/named_volumes.h) are extents of 2^extent_shift LBAs of an LBA space of
  // `overcommit` times the capacity (rounded up to whole extents), thinly provisioned:
  // their sizes may add up to more than the capacity. Writes that would make more blocks
  // valid than the capacity then fail with NoSpace (GC keeps its room; trims still work).
  // extent_shift 0: the LBA space is the capacity.
  uint32_t extent_shift = 0;
  uint32_t overcommit = 1;
  uint32_t max_volumes = 0;
  // The clock of the blocks' write times (SepBIT's ages); null: the system's. (The
  // flusher's trim deadline is real time: it is a timed wait.)
  const Clock* clock = nullptr;
};

// What the conversion scheduler (scheduler/) hears from the volume. Set before use.
class VolumeListener {
 public:
  virtual ~VolumeListener() = default;
  // A block of the segment was read. Called concurrently from readers: keep it to atomics.
  virtual void OnSegmentRead(SegmentId s) = 0;
  // A block of the segment was overwritten or trimmed (under the volume's lock).
  virtual void OnBlockInvalidated(SegmentId s) = 0;
  // The scheme a segment the log opens now is born in (under the volume's lock).
  virtual SegmentScheme SchemeForNewSegment() = 0;
  // Physical space is over budget: the log collects garbage until it is not (asked after
  // every write, under the volume's lock; keep it cheap when the answer is no).
  virtual bool SpacePressure() = 0;
};

struct VolumeStats {
  uint64_t capacity_blocks = 0;
  EngineStats engine;
  PlacementStats placement;
  // Flush() calls, and the rounds of device flushes that answered them: concurrent
  // flushes share a round (group commit).
  uint64_t flush_requests = 0, flush_rounds = 0;
  // RAM of the log: the engine's state and the placement's per-LBA state.
  uint64_t memory_bytes = 0;
};

class LogVolume {
 public:
  // A new volume on an array with no segments in use. The array outlives the volume.
  static Result<std::unique_ptr<LogVolume>> Create(ElasticArray& array,
                                                   const VolumeOptions& options);
  // The volume on an array after a restart or crash: recovered from its segments.
  static Result<std::unique_ptr<LogVolume>> Open(ElasticArray& array, const VolumeOptions& options);
  ~LogVolume();

  // How many blocks may be valid at once (what one volume of the whole array exports).
  uint64_t capacity_blocks() const { return capacity_blocks_; }
  // The LBA space requests address (VolumeOptions::address_blocks).
  uint64_t address_blocks() const { return address_blocks_; }
  ExtentCounters Extent(uint64_t extent) const;
  void ResetExtent(uint64_t extent);
  // REQUIRES: data.size() a positive multiple of 4 KiB; the range inside capacity.
  Status Write(uint64_t lba, std::span<const std::byte> data);
  Status Read(uint64_t lba, std::span<std::byte> out);
  Status Trim(uint64_t lba, uint64_t blocks);
  // Makes every write acknowledged before the call durable. Concurrent calls share one
  // round of device flushes: a caller whose request came before a round started is
  // answered by it, and otherwise waits for the next one (started by the first waiter).
  Status Flush();
  // Every full row the volume's writes queued (docs/raid.md, "Rows written outside the
  // locks") written and done on return: the drives' counters then include them. Takes no
  // lock of the volume's, so the scheduler calls it from inside a write.
  void WriteRowsNow();
  VolumeStats stats() const;
  void SetListener(VolumeListener* listener);
  // Every sealed segment with its garbage proportion: GC is about to reclaim the high ones.
  std::vector<std::pair<SegmentId, double>> SealedSegments() const;
  // The segment holding an LBA's current copy (none if unwritten or trimmed).
  std::optional<SegmentId> Locate(uint64_t lba) const;
  // [lba, lba + blocks) as runs of written blocks and of holes (unwritten or trimmed,
  // reading as zeros), in order: NBD block status answers from it.
  struct Run {
    uint64_t blocks;
    bool written;
  };
  std::vector<Run> Allocation(uint64_t lba, uint64_t blocks) const;
  // Where each segment's valid blocks live in the volume's LBA space: their count, lowest
  // and highest LBA, and a histogram over `bins` equal parts of the capacity, the default
  // volume's LBAs (a segment GC filled from many places shows it; other named volumes'
  // blocks are counted but not binned). Indexed by segment id, `segments` entries in all
  // (those with no valid block have valid_blocks 0). The map is read in pieces, each under
  // the volume's shared lock, so writes go on meanwhile and a busy volume gives a summary
  // of a moving target.
  struct SegmentLbas {
    uint64_t valid_blocks = 0, lba_min = 0, lba_max = 0;
    std::vector<uint32_t> histogram;
  };
  std::vector<SegmentLbas> LbaSummary(uint32_t segments, uint32_t bins) const;

 private:
  class ArrayStore;
  // What Create and Open both begin with: the placement, the volume, its capacity and the
  // engine's address bits checked.
  static Result<std::unique_ptr<LogVolume>> Make(ElasticArray& array, const VolumeOptions& options);
  LogVolume(ElasticArray& array, const VolumeOptions& options,
            std::unique_ptr<Placement> placement);
  Status CheckRange(uint64_t lba, uint64_t blocks) const;
  EngineOptions EngineOptionsFor(const ElasticArray& array) const;

  ElasticArray& array_;
  VolumeOptions options_;
  uint64_t capacity_blocks_ = 0, address_blocks_ = 0;
  mutable RwMutex mu_;  // shared: Read, stats; exclusive: the rest (writers first)
  std::unique_ptr<Placement> placement_;
  std::unique_ptr<ArrayStore> store_;
  std::unique_ptr<LogEngine> engine_;
  const Clock& clock_;
  const uint64_t start_us_;  // write times count from here

  // Group commit (Flush). Requests are numbered; a round covers every request numbered
  // up to what was requested when it started.
  mutable std::mutex flush_mu_;
  std::condition_variable flush_cv_;
  uint64_t flush_requested_ = 0;  // requests so far
  uint64_t flush_covered_ = 0;    // requests answered by finished rounds
  uint64_t flush_rounds_ = 0;
  bool flush_running_ = false;
  Status flush_status_;  // the last round's outcome
  // GC's victims are freed by a flush round this thread runs when a writer finds enough
  // of them waiting (started at the first; under flush_mu_), and a round that freed
  // victims is followed by one that trims them.
  void GcFlusher();
  void StartFlusherLocked();  // under flush_mu_, as the two below
  void WakeFlusherLocked();   // a round now
  std::thread gc_flusher_;
  std::condition_variable gc_flush_cv_;
  bool gc_flush_wanted_ = false, gc_flusher_stop_ = false;
  // Victims were freed (by a round, or by a write short of space): unless a round that
  // began after that completes first, the flusher runs one at trim_flush_at_, whose
  // device flush lets their trims go (ScheduleTrimFlushLocked).
  static constexpr std::chrono::milliseconds kTrimFlushDelay{100};
  bool trim_flush_due_ = false;
  uint64_t trim_flush_round_ = 0;  // the rounds counted by then: a later one covers them
  void ScheduleTrimFlushLocked();  // under flush_mu_
  std::chrono::steady_clock::time_point trim_flush_at_;
};

}  // namespace eraid
