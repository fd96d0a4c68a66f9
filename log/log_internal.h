// The log engine's private parts, shared by its source files (log_engine.cc, log_gc.cc,
// log_recovery.cc): the map entry's packing and a segment's state.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "common/check.h"
#include "common/types.h"
#include "log/log_engine.h"

namespace eraid {
namespace log_internal {

constexpr uint32_t kGcPrefetch = 8;  // slots ahead (see CollectGarbage)
inline const std::vector<std::byte>& ZeroBlock() {
  static const std::vector<std::byte> zeros(kBlockSize);
  return zeros;
}

// A segment's store positions by slot, as runs: a store position is its slot's plus the
// blocks the store put before it that are not slots (the array's summary blocks, one per
// batch of up to 168 blocks or per flush), so positions advance with slots but for a jump
// at each summary. One (slot, position) pair per run — about 8 bytes per 168 slots where a
// position per slot took 4 bytes per slot — found by binary search.
class SlotPositions {
 public:
  // REQUIRES: slots appended in order (0, 1, ...).
  void Append(uint32_t slot, uint32_t position) {
    if (runs_.empty() || position - runs_.back().position != slot - runs_.back().slot) {
      runs_.push_back({slot, position});
    }
  }
  uint64_t bytes() const { return runs_.capacity() * sizeof(Run); }
  // REQUIRES: slot appended.
  uint32_t At(uint32_t slot) const {
    auto it = std::upper_bound(runs_.begin(), runs_.end(), slot,
                               [](uint32_t s, const Run& r) { return s < r.slot; });
    --it;
    return it->position + (slot - it->slot);
  }
  void shrink_to_fit() { runs_.shrink_to_fit(); }
  size_t runs() const { return runs_.size(); }

 private:
  struct Run {
    uint32_t slot, position;
  };
  std::vector<Run> runs_;
};

}  // namespace log_internal

struct LogEngine::Segment {
  uint64_t id;      // creation order
  uint64_t handle;  // the store's
  uint32_t cls;
  bool sealed = false;
  uint64_t created_time;     // user time when opened
  uint64_t modified_us = 0;  // timestamp of the last append
  uint32_t n_invalid = 0;
  uint32_t n_slots = 0;  // slots appended
  // Each slot's tags (LBA, user time). On a store that keeps them (keeps_tags: the
  // array's summaries), only while the segment is open or being recovered: a sealed
  // segment's are read back from the store when GC collects it (LoadSlots).
  std::vector<Slot> slots;
  log_internal::SlotPositions positions;  // stores with data: each slot's store position
};

// The per-block steps, inlined into the files that run them (log_engine.cc, log_gc.cc).
// ---------------------------------------------------------------------------------

inline PlacementContext LogEngine::Context() const {
  return {now_, timestamp_us_, n_blocks_ - n_invalid_sealed_, options_.segment_blocks};
}

// What collecting a sealed segment gives back, as a share of a segment: its invalid
// blocks, and the room it was sealed without filling (a segment sealed part-full by a
// restart holds nothing but that room). A full segment's is its garbage proportion.
inline double LogEngine::Reclaimable(const Segment& seg) const {
  const double size = std::max<double>(options_.segment_blocks, double(seg.n_slots));
  return (double(seg.n_invalid) + size - double(seg.n_slots)) / size;
}

// Replay's Invalidate: on a counting store no LBA is ever trimmed by a record (a trim only
// invalidates) and no store is told.
[[gnu::always_inline]] inline void LogEngine::InvalidateMapped(uint64_t lba) {
  if (lba >= map_.size()) return;
  Entry& entry = map_.dense_data()[lba];  // a replay's map is dense
  if (entry == 0) return;
  Segment& seg = *segments_[IndexOf(entry)];
  ERAID_CHECK(seg.n_invalid < seg.n_slots);
  ++seg.n_invalid;
  if (seg.sealed) ++n_invalid_sealed_;
  entry = 0;
  --stats_.valid_blocks;
}

// Inlined: it runs once per block (on a counting store, one comparison).
[[gnu::always_inline]] inline Status LogEngine::SealIfFull(uint32_t index) {
  ERAID_CHECK(index < segments_.size() && segments_[index] != nullptr);
  Segment& seg = *segments_[index];
  const uint32_t blocks = seg.n_slots;
  if (counting_ ? blocks < counting_->segment_blocks() : !store_.Full(seg.handle, blocks))
    return Status::Ok();
  return SealSegment(seg.cls);
}

// Inlined into Write and CopySlot: it runs once per block.
[[gnu::always_inline]] inline Status LogEngine::AppendBlock(uint32_t cls, uint64_t lba,
                                                            uint64_t user_time,
                                                            std::span<const std::byte> data) {
  Entry entry;
  if (counting_ &&
      open_[cls] != kNoSegment) {  // a replay's path: AppendSlot without a store or a Result
    const uint32_t index = open_[cls];
    Segment& seg = *segments_[index];
    ERAID_CHECK(!seg.sealed && seg.cls == cls);
    entry = Pack(index, seg.n_slots++);
    seg.slots.push_back({lba, user_time});
    seg.modified_us = timestamp_us_;
  } else {
    ERAID_ASSIGN_OR_RETURN(entry, AppendSlot(cls, lba, user_time, data));
  }
  Grow(lba + 1);
  map_.ref(lba) = entry;
  if (has_data_) AddCopy(lba);
  ++stats_.valid_blocks;
  if (ExtentCounters* e = ExtentOf(lba)) ++e->valid_blocks;
  return SealIfFull(IndexOf(entry));
}

// Replay's AppendBlock: the slot goes to the class's open segment and the map, nothing
// to a store; a full segment is sealed.
[[gnu::always_inline]] inline Status LogEngine::AppendReplayed(uint32_t cls, Slot slot) {
  if (open_[cls] == kNoSegment) ERAID_RETURN_IF_ERROR(OpenSegment(cls));
  const uint32_t index = open_[cls];
  Segment& seg = *segments_[index];
  ERAID_CHECK(!seg.sealed && seg.cls == cls && seg.n_slots < counting_->segment_blocks());
  Grow(slot.lba + 1);
  map_.dense_data()[slot.lba] = Pack(index, seg.n_slots++);
  seg.slots.push_back(slot);
  seg.modified_us = timestamp_us_;
  ++stats_.valid_blocks;
  return seg.n_slots < counting_->segment_blocks() ? Status::Ok() : SealSegment(seg.cls);
}

}  // namespace eraid
