// Placement: which open segment (class) a block goes to. The log engine asks on every
// user write and every GC rewrite; schemes are swappable and the trace simulator and
// the live volume use the very same objects.
//
// Time is counted in user-written blocks ("now" = this block's sequence number, from 1),
// as in the SepBIT paper; trace timestamps (microseconds) are passed too for schemes that
// use wall time.
//
// Schemes (SepBIT paper, section 4.1 and its simulator's semantics):
//   sepbit  classes 1-2: user writes whose invalidated block lived < l / otherwise;
//           3: GC rewrites from class-1 segments; 4-6: other GC rewrites by age
//           [0,4l), [4l,16l), [16l,inf); l = mean lifespan of every 16 collected class-1
//           segments (inf until then); a FIFO of recent LBAs bounded by min(l, valid blocks)
//   nosep   one class            sepgc  user writes / GC rewrites
//   fk      future knowledge: class = remaining lifespan / segment size (trace replay only)
//   oracle  exact knowledge of every block's next invalidation (trace replay only): a bound
//           on what any placement can reach. Blocks dying in the same window of
//           segment-size user writes share a class (a ring of 64 windows ahead); a window's
//           open segment is sealed when the window ends, all garbage, so GC frees it
//           without a copy; blocks dying later wait in classes by log2 of how far off
//           (GC moves them nearer as their time comes); never-invalidated blocks apart
//   dac     per-LBA level: +1 per user write, -1 per GC rewrite
//   fadac   write count against a fading average of request sizes, by powers of ten
//   warcip  user writes clustered by rewrite interval (k-means-like, on the fly), with
//           clusters split and merged every 256 sealed user segments; GC rewrites apart
//   hybrid  eraid's own: by each LBA's averaged rewrite interval, trusted as far as such
//           predictions have come true, in octaves below the log's size; GC rewrites by
//           the larger of that and their age (placement.cc, docs/log.md); 6 bytes per LBA
//
// Thread-safety: none; owned by one log engine.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace eraid {

struct PlacementContext {
  uint64_t now = 0;           // user-written blocks so far, this one included
  uint64_t timestamp_us = 0;  // of the current request
  uint64_t valid_blocks = 0;  // blocks in the log minus invalid blocks of sealed segments
  uint32_t segment_blocks = 0;
};

// What to do with a class whose open segment was just sealed (WARCIP merges and splits
// classes; every other scheme reopens).
struct SealDecision {
  bool reopen = true;  // false: the class is removed; later classes shift down
  int split_at = -1;   // >= 0: insert a new class (and open segment) at this index
};

struct PlacementStats {
  double lifespan_threshold = 0;  // SepBIT's l (0 when still infinite)
  // SepBIT's FIFO: unique LBAs counted by a replay's (a volume's keeps only the length).
  uint64_t fifo_unique_lbas = 0, fifo_unique_lbas_peak = 0, fifo_length = 0;
  uint64_t lba_state_bytes = 0;  // per-LBA state held, allocated (hybrid)
};

// GC classes by age: a block of age a (user writes since its user write) goes to cls[i]
// for the first i with a < below[i], or cls[n - 1] (whose below[] is not read).
struct GcAgeBands {
  static constexpr uint32_t kMax = 4;
  uint32_t n = 0;
  uint64_t below[kMax] = {};
  uint32_t cls[kMax] = {};
  uint32_t ClassOf(uint64_t age) const {
    uint32_t i = 0;
    while (i + 1 < n && age >= below[i]) ++i;
    return cls[i];
  }
};

class Placement {
 public:
  virtual ~Placement() = default;
  virtual const char* name() const = 0;
  virtual uint32_t classes() const = 0;

  virtual void OnRequest(uint64_t /*lba*/, uint64_t /*blocks*/, const PlacementContext&) {}
  // A request for `lba` comes soon: start loading its per-LBA state into the cache (a
  // replay calls it a few requests ahead, so the misses overlap; optional).
  virtual void Prefetch(uint64_t /*lba*/) const {}
  // A user write of `lba`; returns its class (0-based).
  virtual uint32_t UserWrite(uint64_t lba, const PlacementContext& ctx) = 0;
  // A GC rewrite of a valid block: its LBA, when the user last wrote it, and the class of
  // the segment it is collected from.
  virtual uint32_t GcWrite(uint64_t lba, uint64_t user_time, uint32_t from_class,
                           const PlacementContext& ctx) = 0;
  // When a GC rewrite's class depends only on the victim's class and the block's age
  // (now - user time), and not on its LBA: the classes as age bands, for the victim about
  // to be collected (after SegmentCollected, at the same ctx.now), so the engine classifies
  // a victim's blocks without a call per block. GcWrite must agree with it. False (the
  // default): the engine asks GcWrite for every block.
  virtual bool GcBandsFor(uint32_t /*from_class*/, const PlacementContext&, GcAgeBands*) const {
    return false;
  }
  // A segment of `cls`, opened at user time `created`, is being collected.
  virtual void SegmentCollected(uint32_t /*cls*/, uint64_t /*created*/, const PlacementContext&) {}
  virtual SealDecision OnSealed(uint32_t /*cls*/, const PlacementContext&) { return {}; }
  virtual PlacementStats stats() const { return {}; }

  // Classes whose open segment the engine should seal now, though not full (the oracle's
  // ended windows); the engine reads and clears it after every user write.
  std::vector<uint32_t>& seal_requests() { return seal_requests_; }

 protected:
  std::vector<uint32_t> seal_requests_;
};

// Names: sepbit, nosep, sepgc, fk, oracle, dac, fadac, warcip. `future_lifespans` (fk, oracle): for
// the i-th user-written block (from 0), the number of user writes until its LBA is written again,
// or UINT64_MAX if never. `paged` (a live volume): SepBIT keeps its per-LBA state in pages
// over the LBAs written, not one array over every LBA up to the highest (a replay's, the
// faster while the working set is dense).
Result<std::unique_ptr<Placement>> MakePlacement(
    const std::string& name,
    std::shared_ptr<const std::vector<uint64_t>> future_lifespans = nullptr, bool paged = false);
std::vector<std::string> PlacementNames();

}  // namespace eraid
