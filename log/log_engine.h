// LogEngine: a log-structured block store — every write appended, never updated in
// place — with pluggable placement (placement.h) and garbage collection, over any
// SegmentStore. eraid-sim replays traces through it on a CountingStore; the live volume
// runs it on the elastic array. The same code decides WA in both.
//
// Semantics (chosen to match the SepBIT authors' simulator, docs/log.md):
//   - Time is the count of user-written blocks; Cost-Benefit ages use request timestamps.
//   - One open segment per class; a full one is sealed and a new one opened at once.
//   - The garbage proportion (GP) that triggers GC is invalid blocks in *sealed* segments
//     over all blocks in the log; it is checked after every request, and one GC operation
//     collects `segments_per_gc` sealed segments whose own GP is at least the threshold,
//     best first by Greedy (GP) or Cost-Benefit (GP/(1-GP) * sqrt(age)).
//   - Valid blocks of a victim are rewritten through placement, in the order they were
//     appended, carrying their last user-write time. The victim is freed only once a
//     store flush has made the copies durable: after every `frees_per_flush` victims one
//     flush frees them all (and any flush the caller asks for frees those waiting).
//   - WA = (user-written + GC-rewritten blocks) / user-written blocks.
//   - Trims. On a store without data (replay) a trim only invalidates. On a store with
//     data a trim is recorded in the log so recovery cannot bring back the blocks it
//     unmapped: one *trim record* per range (a zero block whose tag LBA is TrimTag()),
//     written only if some copy of the range's LBAs is still in the store, and kept
//     (rewritten by GC like a valid block) only while one is: every copy of an LBA in a
//     store is counted until its segment is freed (docs/log.md, "Trim").
//
// Invariants:
//   1. Every LBA maps to at most one slot, and that slot's LBA is it (valid <=> mapped),
//      or, trimmed, to the trim record whose range holds it.
//   2. n_invalid of a segment == its slots minus the slots the map points to.
//   3. n_blocks == sum of blocks of live segments; n_invalid_sealed == sum of n_invalid
//      over sealed segments.
//
// Thread-safety: none; the caller serialises (the live volume holds a lock).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "log/lba_table.h"
#include "log/placement.h"
#include "log/segment_store.h"

namespace eraid {

enum class Selection : uint8_t { kGreedy, kCostBenefit };
Result<Selection> ParseSelection(const std::string& s);

struct EngineOptions {
  uint32_t segment_blocks = 131072;  // 512 MiB, the paper's default
  double gp_threshold = 0.15;
  Selection selection = Selection::kCostBenefit;
  uint32_t segments_per_gc = 1;
  // Collected victims wait for a store flush before they are freed; one flush is made per
  // this many (a flush is the expensive part of a GC on a real store, and a victim left
  // unfreed a little longer costs only its room). Counted as collected at once.
  uint32_t frees_per_flush = 1;
  bool keep_victim_gps = true;  // for the median GP of collected segments
  // Open segments created at start even if the placement uses fewer classes. The
  // reference simulator always opens its configured number (6); matching it keeps
  // segment ids, and so its tie order in Greedy, the same. eraid-sim sets 6; the live
  // volume leaves 0 (= the placement's classes).
  uint32_t initial_open_segments = 0;
  // When to collect. 0: whenever the garbage proportion of all stored blocks exceeds
  // gp_threshold — the SepBIT paper's trigger, which eraid-sim replays. N > 0: only when
  // fewer than N of `total_segments` are free, collecting any segment that holds garbage
  // until N are free again — the live volume's trigger, so free space is used before
  // anything is copied (a volume written over a small working set sees WA ~ 1).
  uint32_t gc_free_segments = 0;
  uint32_t total_segments = 0;
  // With gc_free_segments: also collect while this says physical space is short (the
  // scheduler's budget); it is asked after every request, so it must be cheap.
  std::function<bool()> space_pressure;
  // With gc_free_segments: GC copies at most this many valid blocks per user block of a
  // request, collecting a victim over many requests (bounded pauses), until fewer than
  // gc_urgent_free_segments (0: gc_free_segments) are free, when whole victims are
  // collected at once. 0: whole victims always.
  uint32_t gc_step_blocks = 0;
  uint32_t gc_urgent_free_segments = 0;
  // Collected victims are not freed by a flush of the engine's own when frees_per_flush
  // of them wait: the caller flushes the store without holding up writers (TakeUnfreed,
  // FreeTaken) once free_due() says so. A store out of segments still gets them back at
  // once (a flush, then their frees), and so does space pressure.
  bool defer_frees = false;
  // > 0: counters per extent of 2^extent_shift LBAs (ExtentCounters), for volumes made
  // of extents of the engine's LBA space (log/named_volumes.h).
  uint32_t extent_shift = 0;
  // > 0: the LBAs the engine will see are below this (a hint: the per-LBA tables grow by
  // half again as they go, but not past it).
  uint64_t lba_space = 0;
};

struct ExtentCounters {
  uint64_t user_blocks = 0, gc_blocks = 0, valid_blocks = 0, trimmed_blocks = 0;
};

struct EngineStats {
  uint64_t user_blocks = 0, gc_blocks = 0, gc_operations = 0, segments_collected = 0;
  // Blocks users trimmed; trim records written for them, and rewritten by GC (neither
  // counts in WA: a record is a zero block that costs a compressing drive nothing).
  uint64_t trimmed_blocks = 0, trim_records = 0, gc_trim_records = 0, live_trim_records = 0;
  uint64_t live_segments = 0, valid_blocks = 0;
  std::vector<uint64_t> user_per_class, gc_per_class;
  std::vector<float> victim_gps;  // GP of every collected segment, if kept
  double wa() const {
    return user_blocks ? double(user_blocks + gc_blocks) / double(user_blocks) : 1.0;
  }
};

class LogEngine {
 public:
  // Neither is owned; both outlive the engine.
  LogEngine(const EngineOptions& options, Placement& placement, SegmentStore& store);
  ~LogEngine();

  // One user write request of `blocks` blocks at `lba` (data: blocks*4 KiB, or empty for
  // a store without data). Runs GC afterwards if the GP calls for it.
  Status Write(uint64_t lba, uint32_t blocks, uint64_t timestamp_us,
               std::span<const std::byte> data = {});
  // A write of [lba, lba + blocks) comes soon: starts loading its map entries and the
  // placement's state into the cache (a replay calls it a few requests ahead).
  void Prefetch(uint64_t lba, uint32_t blocks) const {
    if (lba + blocks <= map_.size()) {
      map_.Prefetch(lba);
      map_.Prefetch(lba + blocks - 1);
    }
    placement_.Prefetch(lba);
  }
  // Unmaps the blocks: they read as zeros and their copies become garbage.
  Status Trim(uint64_t lba, uint64_t blocks);
  // A trim record's tag LBA: bit 63 set, blocks - 1 in bits 40..62, the first LBA below.
  static constexpr uint64_t kTrimTag = 1ull << 63;
  static constexpr uint32_t kTrimCountShift = 40;
  static constexpr uint64_t kMaxLba = (1ull << kTrimCountShift) - 1;
  static constexpr uint32_t kMaxTrimRecordBlocks = 1u << 16;
  static uint64_t TrimTag(uint64_t lba, uint64_t blocks) {
    return kTrimTag | (blocks - 1) << kTrimCountShift | lba;
  }
  static bool IsTrimTag(uint64_t tag) { return (tag & kTrimTag) != 0; }
  static uint64_t TrimFirst(uint64_t tag) { return tag & kMaxLba; }
  static uint64_t TrimBlocks(uint64_t tag) { return ((tag & ~kTrimTag) >> kTrimCountShift) + 1; }
  // REQUIRES: a store with data. Unwritten or trimmed blocks read as zeros.
  Status Read(uint64_t lba, std::span<std::byte> out);
  Status Flush();
  // For defer_frees: a mark for the victims collected so far (their copies are in the
  // store); after a store flush that began after taking it, FreeUpTo frees those still
  // waiting. Victims stay queued meanwhile, so a store out of segments can still get them
  // back at once (OpenSegment flushes and frees them itself; FreeUpTo then skips them).
  uint64_t UnfreedMark() const { return unfreed_.empty() ? 0 : unfreed_.back().seq; }
  Status FreeUpTo(uint64_t mark);
  bool free_due() const { return unfreed_.size() >= options_.frees_per_flush; }
  // Victims freed so far (FreeUpTo, and FreeCollected: a write short of space frees the
  // collected ones itself, after a flush of its own), whose trims wait for a later flush.
  uint64_t victims_freed() const { return victims_freed_; }

  // Recovery: hands the engine a segment found in the store (sealed), with its blocks in
  // position order; then FinishRecovery() maps every LBA to its newest copy (largest user
  // time; GC copies keep their user time, so equal times are the same data).
  struct RecoveredBlock {
    uint64_t lba;
    uint64_t user_time;
    uint32_t position;
  };
  void AdoptSegment(uint64_t handle, uint32_t cls, std::vector<RecoveredBlock> blocks);
  Status FinishRecovery();

  const EngineStats& stats() const { return stats_; }
  // RAM of the engine's own state (not the placement's): per-LBA tables, segment records,
  // trim records; hash tables counted at 32 bytes an entry.
  uint64_t memory_bytes() const;
  // Every sealed segment's store handle and garbage proportion (invalid / written).
  void ForEachSealed(const std::function<void(uint64_t handle, double gp)>& fn) const;
  // The store handle of the segment holding an LBA's current copy.
  std::optional<uint64_t> Locate(uint64_t lba) const;
  // Calls fn(handle, lba) for every mapped (written, not trimmed) LBA in
  // [first, first + count), in LBA order.
  void ForEachMapped(uint64_t first, uint64_t count,
                     const std::function<void(uint64_t handle, uint64_t lba)>& fn) const;
  uint64_t now() const { return now_; }
  // With extent_shift: an extent's counters (zeros beyond those touched), and their reset
  // (a deleted volume's extents, unmapped, start again at zero for the next one).
  ExtentCounters Extent(uint64_t extent) const {
    return extent < extents_.size() ? extents_[extent] : ExtentCounters{};
  }
  void ResetExtent(uint64_t extent) {
    if (extent < extents_.size()) extents_[extent] = {};
  }
  // For tests: the class of the segment holding `lba`, or -1.
  int ClassOf(uint64_t lba) const;
  // InvalidArgument if `segments` segments of `segment_blocks` blocks are more than a map
  // entry (4 bytes) can address: 2^31 slots in all, give or take rounding.
  static Status CheckAddressable(uint64_t segment_blocks, uint64_t segments);
  // Checks invariants 1-3 (tests); returns a description of the first violation.
  Status CheckInvariants() const;

 private:
  struct Segment;
  struct Slot {
    uint64_t lba;
    uint64_t user_time;
  };
  // A map entry: (segment index + 1) << slot_bits_ | slot, 0 for unmapped; with kTrimmed
  // set, the LBA is trimmed by the trim record in that slot. 4 bytes per LBA: slot_bits_
  // fits the largest segment, and the segment indices in use must fit the bits left
  // (OpenSegment refuses one more: 2^31 slots, 8 TiB of log at 4 KiB).
  using Entry = uint32_t;
  static constexpr Entry kTrimmed = Entry{1} << 31;
  Entry Pack(uint32_t index, uint32_t slot) const {
    ERAID_CHECK(index < max_segments() && (slot >> slot_bits_) == 0);
    return static_cast<Entry>((index + 1) << slot_bits_ | slot);
  }
  uint32_t IndexOf(uint64_t e) const {
    ERAID_CHECK((e & ~uint64_t{kTrimmed}) >> slot_bits_ != 0);  // a mapped entry
    return static_cast<uint32_t>(((e & ~uint64_t{kTrimmed}) >> slot_bits_) - 1);
  }
  uint32_t SlotOf(uint64_t e) const {
    return static_cast<uint32_t>(e & ((uint64_t{1} << slot_bits_) - 1));
  }
  static bool IsData(uint64_t e) { return e != 0 && (e & kTrimmed) == 0; }
  // Segment indices a map entry can hold.
  uint64_t max_segments() const {
    return slot_bits_ >= 31 ? 0 : (uint64_t{1} << (31 - slot_bits_)) - 1;
  }

  template <bool kReplay>
  Status WriteBlocks(uint64_t lba, uint32_t blocks, std::span<const std::byte> data);
  Status AppendBlock(uint32_t cls, uint64_t lba, uint64_t user_time,
                     std::span<const std::byte> data);
  Status AppendReplayed(uint32_t cls, Slot slot);
  void InvalidateMapped(uint64_t lba);
  template <bool kByAge>
  Status CopyReplayed(uint32_t index, const GcAgeBands& bands);
  // Appends a slot (a block, or a trim record's zero block) to the class's open segment;
  // returns its map entry. The caller maps it, then calls SealIfFull.
  Result<uint64_t> AppendSlot(uint32_t cls, uint64_t tag, uint64_t user_time,
                              std::span<const std::byte> data);
  Status SealIfFull(uint32_t index);
  // Counts segment `index`'s live slots — trim records some LBA still maps to, blocks the
  // map still points at — calling on_valid(lba) for each of the latter (log_recovery.cc:
  // recovery derives the counts with it, CheckInvariants checks them with it).
  template <typename OnValid>
  uint32_t LiveSlots(uint32_t index, const Slot* slots, OnValid&& on_valid) const;
  // Segment `index`'s slots: in RAM (*out points into the segment), or read back from a
  // store that keeps the tags into *loaded (checked against the slot count and positions).
  Status LoadSlots(uint32_t index, std::vector<Slot>* loaded, const Slot** out) const;
  // CheckInvariants' parts, given every segment's slots: each mapped LBA's slot and the
  // trim records' reference counts; each segment's and the log's block counts; the
  // per-LBA copy counts (a store with data); the per-extent valid counts.
  Status CheckMap(const std::vector<const Slot*>& slots) const;
  Status CheckCounts(const std::vector<const Slot*>& slots) const;
  Status CheckCopies(const std::vector<const Slot*>& slots) const;
  Status CheckExtents() const;
  // Writes a trim record for the LBAs of [lba, lba + blocks) that still have a copy in the
  // store and unmaps them all. blocks <= kMaxTrimRecordBlocks.
  Status TrimRecord(uint64_t lba, uint32_t blocks);
  // The class trim records go to: the last (for SepBIT, the coldest GC class).
  uint32_t TrimClass() const { return static_cast<uint32_t>(open_.size() - 1); }
  // A trimmed LBA whose trim record is no longer needed goes back to unmapped.
  void Untrim(uint64_t lba);
  void Grow(uint64_t end) {
    if (end > map_.size()) GrowTo(end);
  }
  void GrowTo(uint64_t end);  // REQUIRES: end > map_.size()
  Status OpenSegment(uint32_t cls);
  Status SealSegment(uint32_t cls);
  // Seals the open segments placement asked to (Placement::seal_requests), if not empty.
  Status SealRequested();
  double Reclaimable(const Segment& seg) const;
  void Invalidate(uint64_t lba);
  // Collects segments_per_gc victims among sealed segments whose GP is >= min_gp.
  Status CollectGarbage(double min_gp);
  // Puts the best k candidates (GP >= min_gp) first in gc_candidates_; returns how many.
  size_t RankCandidates(double min_gp, size_t k);
  // A segment being collected, with its slots' tags for the length of its collection.
  struct Victim {
    uint32_t index = kNoSegment;
    const Slot* slots = nullptr;  // the segment's own, or `loaded`
    std::vector<Slot> loaded;
  };
  Status StartVictim(uint32_t index, Victim* v);
  // Whether the victim's slot holds the current copy of its LBA's data (a data slot the map
  // still points at): what GC copies; everything else in a victim is garbage or a trim
  // record. CopySlot and the read-ahead in GcData ask it.
  bool SlotValid(const Victim& v, uint32_t slot) const {
    const Slot s = v.slots[slot];
    return !IsTrimTag(s.lba) && s.lba < map_.size() && map_[s.lba] == Pack(v.index, slot);
  }
  // Rewrites the victim's slot through placement if it is still valid (*copied).
  // count_invalid: the victim stays live after the copy, so the slot counts as garbage.
  Status CopySlot(const Victim& v, uint32_t slot, bool count_invalid, bool* copied);
  // CopySlot's part for a trim record: rewritten only for the LBAs that still need it.
  Status CopyTrimRecord(const Victim& v, uint32_t slot, bool count_invalid, bool* copied);
  // Takes a fully copied victim out of the log; it is freed at the next FreeCollected.
  void RetireVictim(Victim* v);
  // Free-space mode: copies up to max_blocks valid blocks of the victim being collected
  // (choosing the best one first if none is); retires it when done. *progress is false
  // if no segment holds garbage.
  Status CollectStep(uint64_t max_blocks, bool* progress);
  // Flushes the store and frees the collected victims waiting for it.
  Status FreeCollected();
  PlacementContext Context() const;
  uint32_t TieOrder(uint64_t id) const;

  EngineOptions options_;
  Placement& placement_;
  SegmentStore& store_;
  const uint32_t slot_bits_;  // of a map entry (Pack)
  const bool has_data_;       // the store's, asked once: it is on every block's path
  const bool keeps_tags_;     // the store's: sealed segments keep no slots in RAM
  const CountingStore* const
      counting_;  // the store, if it is one (its per-block calls are skipped)
  // A counting store without extent counters (eraid-sim): blocks take the replay paths
  // (WriteBlocks<true>, CopyReplayed), which leave out data, copies and trim records.
  const bool replay_;
  std::vector<std::unique_ptr<Segment>> segments_;  // by index; nullptr = free index
  std::vector<uint32_t> free_indices_;
  static constexpr uint32_t kNoSegment = UINT32_MAX;
  std::vector<uint32_t> open_;  // class -> segment index (kNoSegment: none now)
  // lba -> its map entry (4 bytes: below). 0 unmapped.
  PagedLbaTable<Entry> map_;
  // Stores with data: per LBA, its copies a recovery could find (blocks in live segments
  // and in collected victims not yet freed), and per live trim record the LBAs mapped to it.
  // One byte an LBA; an LBA with kManyCopies or more (a hot one, rewritten faster than GC
  // collects its segments) has its count in many_copies_ instead, so counts stay exact.
  static constexpr uint8_t kManyCopies = UINT8_MAX;
  PagedLbaTable<uint8_t> copies_;
  std::unordered_map<uint64_t, uint64_t> many_copies_;
  void AddCopy(uint64_t lba) {
    uint8_t& c = copies_.ref(lba);
    if (c + 1 < kManyCopies) {
      ++c;
    } else if (c + 1 == kManyCopies) {
      c = kManyCopies;
      many_copies_[lba] = kManyCopies;
    } else {
      ++many_copies_[lba];
    }
  }
  // Returns true if that was its last copy.
  bool DropCopy(uint64_t lba) {
    uint8_t& c = copies_.ref(lba);
    ERAID_CHECK(c > 0);
    if (c == kManyCopies) {
      auto it = many_copies_.find(lba);
      if (--it->second >= kManyCopies) return false;
      many_copies_.erase(it);
      c = kManyCopies - 1;
      return false;
    }
    return --c == 0;
  }
  std::unordered_map<uint64_t, uint32_t> trim_refs_;
  std::vector<ExtentCounters> extents_;  // with extent_shift
  ExtentCounters* ExtentOf(uint64_t lba) {
    if (options_.extent_shift == 0) return nullptr;
    const uint64_t e = lba >> options_.extent_shift;
    if (e >= extents_.size()) extents_.resize(e + 1);
    return &extents_[e];
  }
  uint64_t now_ = 0, timestamp_us_ = 0;
  uint64_t n_blocks_ = 0, n_invalid_sealed_ = 0;
  uint64_t next_id_ = 0;
  // A replica of the authors' simulator's HashMap iteration order, used to break ties
  // between equally good victims the same way (docs/log.md).
  uint64_t hash_capacity_ = 16, hash_size_ = 0;
  std::vector<std::byte> gc_buf_;
  // GC's read-ahead: the data of the next kGcReadAhead valid slots of the victim being
  // copied, read with one ReadMany (on remote drives a few round trips, not one per
  // block). Covers the victim's slots below gc_ahead_end_; reset by StartVictim.
  static constexpr uint32_t kGcReadAhead = 64;
  uint32_t gc_ahead_index_ = kNoSegment, gc_ahead_end_ = 0;
  size_t gc_ahead_next_ = 0;  // the cursor in gc_ahead_slots_ (slots go up)
  std::vector<uint32_t> gc_ahead_slots_, gc_ahead_positions_;
  std::vector<Status> gc_ahead_status_;
  std::vector<std::byte> gc_ahead_buf_;
  // The data of the victim's slot: from the read-ahead (filled first if it does not
  // cover the slot), or read alone if the read-ahead's read of it failed.
  Result<std::span<const std::byte>> GcData(const Victim& v, uint32_t slot);
  struct GcCandidate {
    double score;
    uint32_t order;
    uint64_t id;
    uint32_t index;
  };
  std::vector<GcCandidate> gc_candidates_;  // CollectGarbage's, kept to spare an allocation per GC
  // A full-sized segment's GC figures by its reclaimable blocks c (0..segment_blocks),
  // worked out once by the very operations RankCandidates would make for each segment at
  // every GC: its GP, Cost-Benefit's GP/(1-GP) factor, and that factor squared (to pass
  // over, without a square root, a segment that cannot reach the best score). Empty for
  // segments over kScoreTableMax blocks (few segments: the scan is short anyway).
  static constexpr uint32_t kScoreTableMax = 1u << 16;
  struct CountScore {
    double gp, factor, factor_sq;
  };
  std::vector<CountScore> score_of_count_;
  // The victims CollectGarbage is collecting (kept to spare allocations), and the one
  // CollectStep is (index kNoSegment: none) with its next slot.
  std::vector<Victim> gc_victims_;
  Victim gc_victim_;
  uint32_t gc_slot_ = 0;
  // Store handles of collected victims: no LBA maps into them, but until a flush makes
  // their copies durable a crash would need them.
  struct Unfreed {
    uint64_t handle;
    uint64_t seq;                // collection order (UnfreedMark)
    std::vector<uint64_t> lbas;  // its data blocks' (stores with data)
  };
  std::vector<Unfreed> unfreed_;
  uint64_t victims_freed_ = 0;
  Status FreeVictim(Unfreed& victim);
  uint64_t next_unfreed_seq_ = 1;
  EngineStats stats_;
};

}  // namespace eraid
