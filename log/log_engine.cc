#include "log/log_engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/types.h"

namespace eraid {

namespace {
constexpr uint32_t kSlotBits = 24;
constexpr uint64_t kSlotMask = (1ull << kSlotBits) - 1;
inline uint64_t Pack(uint32_t index, uint32_t slot) {
  return (uint64_t{index} + 1) << kSlotBits | slot;
}
constexpr uint32_t kGcPrefetch = 8;  // slots ahead (see CollectGarbage)
// A map entry with this bit set: the LBA is trimmed, by the trim record in that slot.
constexpr uint64_t kTrimmed = 1ull << 63;
inline uint32_t IndexOf(uint64_t e) {
  return static_cast<uint32_t>(((e & ~kTrimmed) >> kSlotBits) - 1);
}
inline uint32_t SlotOf(uint64_t e) { return static_cast<uint32_t>(e & kSlotMask); }
inline bool IsData(uint64_t e) { return e != 0 && (e & kTrimmed) == 0; }
const std::vector<std::byte>& ZeroBlock() {
  static const std::vector<std::byte> zeros(kBlockSize);
  return zeros;
}
}  // namespace

Result<Selection> ParseSelection(const std::string& s) {
  if (s == "greedy") return Selection::kGreedy;
  if (s == "cost-benefit" || s == "costbenefit" || s == "cb") return Selection::kCostBenefit;
  return Status::InvalidArgument("selection must be greedy or cost-benefit, got '" + s + "'");
}

struct LogEngine::Segment {
  uint64_t id;      // creation order
  uint64_t handle;  // the store's
  uint32_t cls;
  bool sealed = false;
  uint64_t created_time;     // user time when opened
  uint64_t modified_us = 0;  // timestamp of the last append
  uint32_t n_invalid = 0;
  std::vector<Slot> slots;
  std::vector<uint32_t> positions;  // store positions, when they differ from slots
};

LogEngine::LogEngine(const EngineOptions& options, Placement& placement, SegmentStore& store)
    : options_(options),
      placement_(placement),
      store_(store),
      has_data_(store.has_data()),
      counting_(dynamic_cast<const CountingStore*>(&store)),
      replay_(counting_ != nullptr && options.extent_shift == 0),
      open_(placement.classes()) {
  stats_.user_per_class.assign(placement.classes(), 0);
  stats_.gc_per_class.assign(placement.classes(), 0);
  for (uint32_t c = 0; c < std::max(placement.classes(), options.initial_open_segments); ++c) {
    if (c >= open_.size()) open_.push_back(0);
    Status s = OpenSegment(c);
    (void)s;  // a store that cannot open its first segments fails on first use instead
  }
  open_.resize(placement.classes());  // the extra ones stay open and empty, as in the reference
  if (options.segment_blocks <= kScoreTableMax) {
    const double size = options.segment_blocks;
    score_of_count_.resize(options.segment_blocks + 1);
    for (uint32_t c = 0; c <= options.segment_blocks; ++c) {
      const double gp = double(c) / size;  // Reclaimable's, for a segment of that size
      const double u = 1.0 - gp;
      const double factor = u == 0.0 ? 0.0 : (1.0 - u) / u;
      score_of_count_[c] = {gp, factor, factor * factor};
    }
  }
}

LogEngine::~LogEngine() = default;

uint32_t LogEngine::TieOrder(uint64_t id) const {
  auto h = static_cast<uint32_t>(id ^ (id >> 32));
  h ^= h >> 16;
  return h & static_cast<uint32_t>(hash_capacity_ - 1);
}

inline PlacementContext LogEngine::Context() const {
  return {now_, timestamp_us_, n_blocks_ - n_invalid_sealed_, options_.segment_blocks};
}

// What collecting a sealed segment gives back, as a share of a segment: its invalid
// blocks, and the room it was sealed without filling (a segment sealed part-full by a
// restart holds nothing but that room). A full segment's is its garbage proportion.
inline double LogEngine::Reclaimable(const Segment& seg) const {
  const double size = std::max<double>(options_.segment_blocks, double(seg.slots.size()));
  return (double(seg.n_invalid) + size - double(seg.slots.size())) / size;
}

Status LogEngine::OpenSegment(uint32_t cls) {
  Result<uint64_t> opened = store_.Open(cls);
  if (!opened.ok() && opened.status().code() == StatusCode::kNoSpace && !unfreed_.empty()) {
    ERAID_RETURN_IF_ERROR(FreeCollected());  // collected victims are the room it lacks
    opened = store_.Open(cls);
  }
  if (!opened.ok()) return opened.status();
  const uint64_t handle = *opened;
  uint32_t index;
  if (!free_indices_.empty()) {
    index = free_indices_.back();
    free_indices_.pop_back();
  } else {
    index = static_cast<uint32_t>(segments_.size());
    segments_.emplace_back();
  }
  auto seg = std::make_unique<Segment>();
  seg->id = next_id_++;
  seg->handle = handle;
  seg->cls = cls;
  seg->created_time = now_;
  if (!has_data_ && open_.size() <= 16) seg->slots.reserve(options_.segment_blocks);
  segments_[index] = std::move(seg);
  open_[cls] = index;
  if (++hash_size_ > hash_capacity_ * 3 / 4) hash_capacity_ *= 2;
  ++stats_.live_segments;
  return Status::Ok();
}

Status LogEngine::SealSegment(uint32_t cls) {
  Segment& seg = *segments_[open_[cls]];
  ERAID_RETURN_IF_ERROR(store_.Seal(seg.handle));
  seg.sealed = true;
  n_invalid_sealed_ += seg.n_invalid;
  const SealDecision d = placement_.OnSealed(cls, Context());
  // A class whose next segment cannot be opened now (no free segment) has none until
  // its next block, which tries again: never a sealed segment left as its open one.
  if (d.reopen) {
    if (Status s = OpenSegment(cls); !s.ok()) {
      open_[cls] = kNoSegment;
      return s;
    }
  } else {
    open_.erase(open_.begin() + cls);
  }
  if (d.split_at >= 0) {
    open_.insert(open_.begin() + d.split_at, kNoSegment);
    ERAID_RETURN_IF_ERROR(OpenSegment(static_cast<uint32_t>(d.split_at)));
  }
  return Status::Ok();
}

Status LogEngine::SealRequested() {
  std::vector<uint32_t>& classes = placement_.seal_requests();
  Status status;
  for (uint32_t cls : classes) {
    if (cls >= open_.size() || open_[cls] == kNoSegment || segments_[open_[cls]]->slots.empty())
      continue;
    status = SealSegment(cls);
    if (!status.ok()) break;
  }
  classes.clear();
  return status;
}

// Replay's Invalidate: on a counting store no LBA is ever trimmed by a record (a trim only
// invalidates) and no store is told.
[[gnu::always_inline]] inline void LogEngine::InvalidateMapped(uint64_t lba) {
  if (lba >= map_.size() || map_[lba] == 0) return;
  Segment& seg = *segments_[IndexOf(map_[lba])];
  ++seg.n_invalid;
  if (seg.sealed) ++n_invalid_sealed_;
  map_[lba] = 0;
  --stats_.valid_blocks;
}

void LogEngine::Invalidate(uint64_t lba) {
  if (lba >= map_.size() || map_[lba] == 0) return;
  if (map_[lba] & kTrimmed) {
    Untrim(lba);
    return;
  }
  Segment& seg = *segments_[IndexOf(map_[lba])];
  ++seg.n_invalid;
  if (seg.sealed) ++n_invalid_sealed_;
  if (!counting_) store_.OnInvalidate(seg.handle);
  map_[lba] = 0;
  --stats_.valid_blocks;
  if (ExtentCounters* e = ExtentOf(lba)) --e->valid_blocks;
}

void LogEngine::GrowTo(uint64_t end) {
  map_.resize(std::max<uint64_t>(end, map_.size() * 3 / 2 + 4096), 0);
  if (has_data_) copies_.resize(map_.size(), 0);
}

Result<uint64_t> LogEngine::AppendSlot(uint32_t cls, uint64_t tag, uint64_t user_time,
                                       std::span<const std::byte> data) {
  if (open_[cls] == kNoSegment) ERAID_RETURN_IF_ERROR(OpenSegment(cls));
  const uint32_t index = open_[cls];
  Segment& seg = *segments_[index];
  uint32_t position = 0;
  if (!counting_) {
    ERAID_ASSIGN_OR_RETURN(position, store_.Append(seg.handle, tag, user_time, data));
  }
  const auto slot = static_cast<uint32_t>(seg.slots.size());
  seg.slots.push_back({tag, user_time});
  if (has_data_) seg.positions.push_back(position);
  seg.modified_us = timestamp_us_;
  return Pack(index, slot);
}

// Inlined: it runs once per block (on a counting store, one comparison).
[[gnu::always_inline]] inline Status LogEngine::SealIfFull(uint32_t index) {
  Segment& seg = *segments_[index];
  const auto blocks = static_cast<uint32_t>(seg.slots.size());
  if (counting_ ? blocks < counting_->segment_blocks() : !store_.Full(seg.handle, blocks))
    return Status::Ok();
  return SealSegment(seg.cls);
}

// Inlined into Write and CopySlot: it runs once per block.
[[gnu::always_inline]] inline Status LogEngine::AppendBlock(uint32_t cls, uint64_t lba,
                                                            uint64_t user_time,
                                                            std::span<const std::byte> data) {
  uint64_t entry;
  if (counting_ &&
      open_[cls] != kNoSegment) {  // a replay's path: AppendSlot without a store or a Result
    const uint32_t index = open_[cls];
    Segment& seg = *segments_[index];
    entry = Pack(index, static_cast<uint32_t>(seg.slots.size()));
    seg.slots.push_back({lba, user_time});
    seg.modified_us = timestamp_us_;
  } else {
    ERAID_ASSIGN_OR_RETURN(entry, AppendSlot(cls, lba, user_time, data));
  }
  Grow(lba + 1);
  map_[lba] = entry;
  if (has_data_) ++copies_[lba];
  ++stats_.valid_blocks;
  if (ExtentCounters* e = ExtentOf(lba)) ++e->valid_blocks;
  return SealIfFull(IndexOf(entry));
}

// A request's blocks, one by one. kReplay (a counting store, no extents: eraid-sim) is
// the same steps without what such a store cannot have: data, copies, trim records.
template <bool kReplay>
Status LogEngine::WriteBlocks(uint64_t lba, uint32_t blocks, std::span<const std::byte> data) {
  for (uint32_t i = 0; i < blocks; ++i) {
    ++now_;
    if constexpr (kReplay) {
      InvalidateMapped(lba + i);
    } else {
      Invalidate(lba + i);
    }
    const uint32_t cls = placement_.UserWrite(lba + i, Context());
    if (!placement_.seal_requests().empty()) ERAID_RETURN_IF_ERROR(SealRequested());
    ++stats_.user_blocks;
    ++stats_.user_per_class[cls];
    if constexpr (kReplay) {
      ERAID_RETURN_IF_ERROR(AppendReplayed(cls, {lba + i, now_}));
    } else {
      if (ExtentCounters* e = ExtentOf(lba + i)) ++e->user_blocks;
      ERAID_RETURN_IF_ERROR(AppendBlock(
          cls, lba + i, now_, data.empty() ? data : data.subspan(BlocksToBytes(i), kBlockSize)));
    }
  }
  return Status::Ok();
}

Status LogEngine::Write(uint64_t lba, uint32_t blocks, uint64_t timestamp_us,
                        std::span<const std::byte> data) {
  if (has_data_ && data.size() != BlocksToBytes(blocks)) {
    return Status::InvalidArgument("write data does not match its block count");
  }
  timestamp_us_ = timestamp_us;
  placement_.OnRequest(lba, blocks, Context());
  ERAID_RETURN_IF_ERROR(replay_ ? WriteBlocks<true>(lba, blocks, data)
                                : WriteBlocks<false>(lba, blocks, data));
  n_blocks_ += blocks;  // counted per request, as the reference simulator does
  if (options_.gc_free_segments > 0) {
    // Free-space mode (the live volume). With gc_step_blocks, GC copies a bounded number
    // of blocks per request, a victim over many requests, so no writer waits for a whole
    // victim; only when free segments fall below gc_urgent_free_segments (the log must not
    // run out of room to open segments), or physical space is over its budget, are whole
    // victims collected at once.
    const uint32_t urgent_free = options_.gc_urgent_free_segments ? options_.gc_urgent_free_segments
                                                                  : options_.gc_free_segments;
    while (true) {
      const bool short_of_segments =
          stats_.live_segments + options_.gc_free_segments > options_.total_segments;
      if (!short_of_segments && !(options_.space_pressure && options_.space_pressure())) break;
      // Physical space comes back only as victims are freed: free the waiting ones first.
      if (!short_of_segments && !unfreed_.empty()) {
        ERAID_RETURN_IF_ERROR(FreeCollected());
        continue;
      }
      // Physical space over its budget is a hard limit too: whole victims, as before.
      const bool urgent = options_.gc_step_blocks == 0 || !short_of_segments ||
                          stats_.live_segments + urgent_free > options_.total_segments;
      bool progress = false;
      ERAID_RETURN_IF_ERROR(
          CollectStep(urgent ? UINT64_MAX : uint64_t{options_.gc_step_blocks} * blocks, &progress));
      if (!progress || !urgent) break;  // nothing holds garbage; or one step per request
    }
    return Status::Ok();
  }
  if (n_blocks_ > 0 && static_cast<double>(n_invalid_sealed_) / static_cast<double>(n_blocks_) >
                           options_.gp_threshold) {
    return CollectGarbage(options_.gp_threshold);
  }
  return Status::Ok();
}

// Replay's AppendBlock: the slot goes to the class's open segment and the map, nothing
// to a store; a full segment is sealed.
[[gnu::always_inline]] inline Status LogEngine::AppendReplayed(uint32_t cls, Slot slot) {
  if (open_[cls] == kNoSegment) ERAID_RETURN_IF_ERROR(OpenSegment(cls));
  const uint32_t index = open_[cls];
  Segment& seg = *segments_[index];
  Grow(slot.lba + 1);
  map_[slot.lba] = Pack(index, static_cast<uint32_t>(seg.slots.size()));
  seg.slots.push_back(slot);
  seg.modified_us = timestamp_us_;
  ++stats_.valid_blocks;
  return seg.slots.size() < counting_->segment_blocks() ? Status::Ok() : SealSegment(seg.cls);
}

Status LogEngine::Trim(uint64_t lba, uint64_t blocks) {
  if (blocks > kMaxLba || lba > kMaxLba - blocks)
    return Status::InvalidArgument("trim beyond the largest LBA");
  stats_.trimmed_blocks += blocks;
  for (uint64_t done = 0;
       options_.extent_shift && done < blocks;) {  // per extent the range touches
    const uint64_t l = lba + done;
    const uint64_t n =
        std::min(blocks - done, (((l >> options_.extent_shift) + 1) << options_.extent_shift) - l);
    ExtentOf(l)->trimmed_blocks += n;
    done += n;
  }
  if (!has_data_) {  // replay: nothing to recover, so nothing to record
    for (uint64_t i = 0; i < blocks; ++i) Invalidate(lba + i);
    return Status::Ok();
  }
  for (uint64_t done = 0; done < blocks;) {
    const auto n = static_cast<uint32_t>(std::min<uint64_t>(kMaxTrimRecordBlocks, blocks - done));
    ERAID_RETURN_IF_ERROR(TrimRecord(lba + done, n));
    done += n;
  }
  return Status::Ok();
}

Status LogEngine::TrimRecord(uint64_t lba, uint32_t blocks) {
  // Only LBAs with a copy in the store need the record: recovery could find nothing else.
  uint64_t first = UINT64_MAX, last = 0;
  const uint64_t end = std::min<uint64_t>(lba + blocks, copies_.size());
  for (uint64_t l = lba; l < end; ++l) {
    if (copies_[l] == 0) continue;
    first = std::min(first, l);
    last = l;
  }
  if (first == UINT64_MAX) {  // nothing of the range was ever stored (or it is all gone)
    for (uint64_t l = lba; l < end; ++l) Invalidate(l);
    return Status::Ok();
  }
  // The record first: if it cannot be written, the blocks stay as they were.
  ++now_;
  ERAID_ASSIGN_OR_RETURN(
      uint64_t entry, AppendSlot(TrimClass(), TrimTag(first, last - first + 1), now_, ZeroBlock()));
  ++n_blocks_;
  ++stats_.trim_records;
  uint32_t refs = 0;
  for (uint64_t l = lba; l < end; ++l) {
    Invalidate(l);
    if (copies_[l] == 0) continue;
    map_[l] = entry | kTrimmed;
    ++refs;
  }
  trim_refs_[entry] = refs;
  ++stats_.live_trim_records;
  return SealIfFull(IndexOf(entry));
}

void LogEngine::Untrim(uint64_t lba) {
  const uint64_t entry = map_[lba] & ~kTrimmed;
  map_[lba] = 0;
  auto it = trim_refs_.find(entry);
  if (--it->second > 0) return;
  // No LBA needs the record any more: it is garbage.
  trim_refs_.erase(it);
  --stats_.live_trim_records;
  Segment& seg = *segments_[IndexOf(entry)];
  ++seg.n_invalid;
  if (seg.sealed) ++n_invalid_sealed_;
}

Status LogEngine::Read(uint64_t lba, std::span<std::byte> out) {
  if (lba >= map_.size() || !IsData(map_[lba])) {
    std::memset(out.data(), 0, out.size());
    return Status::Ok();
  }
  const Segment& seg = *segments_[IndexOf(map_[lba])];
  return store_.Read(seg.handle, seg.positions[SlotOf(map_[lba])], out);
}

Status LogEngine::Flush() { return FreeCollected(); }

Status LogEngine::FreeVictim(Unfreed& victim) {
  ERAID_RETURN_IF_ERROR(store_.Free(victim.handle));
  ++victims_freed_;
  // Its copies stop counting now, though the free is durable only after the next flush:
  // a trim record this lets go is dropped by GC and leaves the store with its segment,
  // whose free comes after a flush that began after this one — so it is never gone while
  // a copy it hid can still be found (docs/log.md, "Trim").
  for (uint64_t lba : victim.lbas) {
    if (--copies_[lba] == 0 && (map_[lba] & kTrimmed)) Untrim(lba);
  }
  victim.lbas.clear();
  return Status::Ok();
}

Status LogEngine::FreeUpTo(uint64_t mark) {
  size_t n = 0;
  for (; n < unfreed_.size() && unfreed_[n].seq <= mark; ++n) {
    if (Status s = FreeVictim(unfreed_[n]); !s.ok()) {
      unfreed_.erase(unfreed_.begin(), unfreed_.begin() + static_cast<long>(n));
      return s;
    }
  }
  unfreed_.erase(unfreed_.begin(), unfreed_.begin() + static_cast<long>(n));
  return Status::Ok();
}

Status LogEngine::FreeCollected() {
  ERAID_RETURN_IF_ERROR(store_.Flush().WithContext(unfreed_.empty() ? "flush" : "gc flush"));
  for (size_t i = 0; i < unfreed_.size(); ++i) {
    if (Status s = FreeVictim(unfreed_[i]); !s.ok()) {
      unfreed_.erase(unfreed_.begin(), unfreed_.begin() + static_cast<long>(i));
      return s;
    }
  }
  unfreed_.clear();
  return Status::Ok();
}

std::optional<uint64_t> LogEngine::Locate(uint64_t lba) const {
  if (lba >= map_.size() || !IsData(map_[lba])) return std::nullopt;
  return segments_[IndexOf(map_[lba])]->handle;
}

void LogEngine::ForEachMapped(uint64_t first, uint64_t count,
                              const std::function<void(uint64_t handle, uint64_t lba)>& fn) const {
  const uint64_t end = std::min<uint64_t>(map_.size(), first + count);
  for (uint64_t lba = first; lba < end; ++lba) {
    if (IsData(map_[lba])) fn(segments_[IndexOf(map_[lba])]->handle, lba);
  }
}

void LogEngine::ForEachSealed(const std::function<void(uint64_t handle, double gp)>& fn) const {
  for (const auto& seg : segments_) {
    if (seg && seg->sealed && !seg->slots.empty()) fn(seg->handle, Reclaimable(*seg));
  }
}

size_t LogEngine::RankCandidates(double min_gp, size_t k) {
  // Candidates, best first; ties in the order the reference simulator's HashMap iterates.
  // (Called once per GC over every segment: the scan is a replay's hottest loop, so the
  // list is kept between calls and one victim is found by a single pass, not a sort.)
  // A victim being collected a step at a time is not a candidate again.
  // For one victim (the usual case) the best is kept as the scan goes, and the tie order,
  // a hash, is worked out only for equal scores.
  const double now_us = static_cast<double>(timestamp_us_);
  std::vector<GcCandidate>& candidates = gc_candidates_;
  candidates.clear();
  constexpr uint32_t kNoOrder = UINT32_MAX;
  GcCandidate best{0, kNoOrder, 0, kNoSegment};
  // Greedy's score is a segment's reclaimable blocks over one size for all segments no
  // larger than it: one with fewer reclaimable blocks than the best so far cannot win,
  // and is passed over without a division.
  const bool by_count = k == 1 && options_.selection == Selection::kGreedy;
  const bool cost_benefit = options_.selection == Selection::kCostBenefit;
  const bool tabled = !score_of_count_.empty();
  uint64_t best_count = 0;
  // Cost-Benefit, one victim: a full-sized segment whose squared score falls short of the
  // best's by more than any rounding could make up is passed over without a square root.
  double best_sq_floor = -1;
  for (uint32_t i = 0; i < segments_.size(); ++i) {
    const Segment* seg = segments_[i].get();
    if (!seg || !seg->sealed || i == gc_victim_) continue;
    const uint64_t slots = seg->slots.size();
    const bool sized = slots <= options_.segment_blocks;
    const uint64_t count = seg->n_invalid + (sized ? options_.segment_blocks - slots : 0);
    if (sized && (count == 0 || (by_count && best.index != kNoSegment && count < best_count))) {
      continue;  // nothing to reclaim, or less than the best: passed over without a division
    }
    const CountScore* tab = sized && tabled ? &score_of_count_[count] : nullptr;
    const double gp = tab ? tab->gp : Reclaimable(*seg);
    if (gp <= 0 || gp < min_gp) continue;
    double score = gp;
    if (cost_benefit) {
      const double u = 1.0 - gp;
      const double age = now_us - static_cast<double>(seg->modified_us);
      if (u == 0.0) {
        score = std::numeric_limits<double>::max();
      } else if (tab) {
        if (tab->factor_sq * age < best_sq_floor) continue;
        score = tab->factor * std::sqrt(age);
      } else {
        score = (1.0 - u) / u * std::sqrt(age);
      }
    }
    if (k != 1) {
      candidates.push_back({score, TieOrder(seg->id), seg->id, i});
    } else if (best.index == kNoSegment || score > best.score) {
      best = {score, kNoOrder, seg->id, i};
      best_count = sized ? count : 0;  // an oversized best: nothing is passed over
      if (cost_benefit) best_sq_floor = score * score * (1 - 1e-9);
    } else if (score == best.score) {
      if (best.order == kNoOrder) best.order = TieOrder(best.id);
      const uint32_t order = TieOrder(seg->id);
      if (order < best.order || (order == best.order && seg->id < best.id))
        best = {score, order, seg->id, i};
    }
  }
  if (k == 1) {
    if (best.index == kNoSegment) return 0;
    candidates.push_back(best);
    return 1;
  }
  if (candidates.empty()) return 0;
  k = std::min(k, candidates.size());
  auto better = [](const GcCandidate& a, const GcCandidate& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.order != b.order) return a.order < b.order;
    return a.id < b.id;
  };
  std::partial_sort(candidates.begin(), candidates.begin() + static_cast<long>(k), candidates.end(),
                    better);
  return k;
}

void LogEngine::StartVictim(uint32_t index) {
  Segment& victim = *segments_[index];
  if (options_.keep_victim_gps)
    stats_.victim_gps.push_back(float(victim.n_invalid) / float(victim.slots.size()));
  placement_.SegmentCollected(victim.cls, victim.created_time, Context());
}

// Inlined into the GC loops: it runs once per slot of every victim.
[[gnu::always_inline]] inline Status LogEngine::CopySlot(uint32_t index, uint32_t slot,
                                                         bool count_invalid, bool* copied) {
  Segment& victim = *segments_[index];
  // The victim's LBAs are scattered over the map: ask for the map entry a few slots
  // ahead, so its cache miss overlaps this slot's work (the loop's main cost).
  if (slot + kGcPrefetch < victim.slots.size() &&
      victim.slots[slot + kGcPrefetch].lba < map_.size()) {
    __builtin_prefetch(&map_[victim.slots[slot + kGcPrefetch].lba]);
  }
  *copied = false;
  const Slot s = victim.slots[slot];
  if (IsTrimTag(s.lba)) return CopyTrimRecord(index, slot, count_invalid, copied);
  if (s.lba >= map_.size() || map_[s.lba] != Pack(index, slot)) return Status::Ok();  // garbage
  std::span<const std::byte> data;
  if (has_data_) {
    gc_buf_.resize(kBlockSize);
    ERAID_RETURN_IF_ERROR(
        store_.Read(victim.handle, victim.positions[slot], gc_buf_).WithContext("gc read"));
    data = gc_buf_;
  }
  const uint32_t cls = placement_.GcWrite(s.lba, s.user_time, victim.cls, Context());
  ++stats_.gc_blocks;
  ++stats_.gc_per_class[cls];
  --stats_.valid_blocks;  // AppendBlock counts it again
  if (ExtentCounters* e = ExtentOf(s.lba)) {
    ++e->gc_blocks;
    --e->valid_blocks;
  }
  ERAID_RETURN_IF_ERROR(AppendBlock(cls, s.lba, s.user_time, data));
  ++n_blocks_;
  if (count_invalid) {  // the victim stays live for a while: its copied slot is garbage now
    ++victim.n_invalid;
    ++n_invalid_sealed_;
  }
  *copied = true;
  return Status::Ok();
}

// Replay's copy of a whole victim (CopySlot for each slot, count_invalid false): every
// slot is a data block, its LBA inside the map (it was mapped when appended), and with
// kByAge the class comes from the bands, not a call per block.
template <bool kByAge>
Status LogEngine::CopyReplayed(uint32_t index, const GcAgeBands& bands) {
  const Segment& victim = *segments_[index];
  const Slot* const slots = victim.slots.data();
  const auto n = static_cast<uint32_t>(victim.slots.size());
  const uint64_t* const map = map_.data();  // GC never grows the map
  for (uint32_t slot = 0; slot < n; ++slot) {
    if (slot + kGcPrefetch < n) __builtin_prefetch(&map[slots[slot + kGcPrefetch].lba]);
    const Slot s = slots[slot];
    if (map[s.lba] != Pack(index, slot)) continue;  // garbage
    uint32_t cls;
    if constexpr (kByAge) {
      cls = bands.ClassOf(now_ - s.user_time);
    } else {
      cls = placement_.GcWrite(s.lba, s.user_time, victim.cls, Context());
    }
    ++stats_.gc_blocks;
    ++stats_.gc_per_class[cls];
    --stats_.valid_blocks;  // AppendReplayed counts it again
    ERAID_RETURN_IF_ERROR(AppendReplayed(cls, s));
    ++n_blocks_;
  }
  return Status::Ok();
}

Status LogEngine::CopyTrimRecord(uint32_t index, uint32_t slot, bool count_invalid, bool* copied) {
  Segment& victim = *segments_[index];
  const Slot s = victim.slots[slot];
  const uint64_t entry = Pack(index, slot);
  auto it = trim_refs_.find(entry);
  if (it == trim_refs_.end()) return Status::Ok();  // garbage
  // The record goes on for the LBAs still trimmed by it that still have a copy in the
  // store (those with none are simply unmapped); over the range those span.
  uint64_t first = UINT64_MAX, last = 0;
  const uint64_t end = TrimFirst(s.lba) + TrimBlocks(s.lba);
  for (uint64_t l = TrimFirst(s.lba); l < end; ++l) {
    if (map_[l] != (entry | kTrimmed)) continue;
    if (copies_[l] == 0) {
      Untrim(l);  // the last one makes the slot garbage
      continue;
    }
    first = std::min(first, l);
    last = l;
  }
  if (first == UINT64_MAX) return Status::Ok();
  const uint32_t refs = trim_refs_[entry];
  ERAID_ASSIGN_OR_RETURN(uint64_t moved, AppendSlot(TrimClass(), TrimTag(first, last - first + 1),
                                                    s.user_time, ZeroBlock()));
  for (uint64_t l = first; l <= last; ++l) {
    if (map_[l] == (entry | kTrimmed)) map_[l] = moved | kTrimmed;
  }
  trim_refs_.erase(entry);
  trim_refs_[moved] = refs;
  ++n_blocks_;
  ++stats_.gc_trim_records;
  if (count_invalid) {
    ++victim.n_invalid;
    ++n_invalid_sealed_;
  }
  *copied = true;
  return SealIfFull(IndexOf(moved));
}

void LogEngine::RetireVictim(uint32_t index) {
  // The copies must be durable before the victim's originals go, and they are only after
  // a flush: the victim waits for one (no LBA maps into it any more).
  Segment& victim = *segments_[index];
  std::vector<uint64_t> lbas;
  if (has_data_) {
    lbas.reserve(victim.slots.size());
    for (const Slot& s : victim.slots) {
      if (!IsTrimTag(s.lba)) lbas.push_back(s.lba);
    }
  }
  unfreed_.push_back({victim.handle, next_unfreed_seq_++, std::move(lbas)});
  n_blocks_ -= victim.slots.size();
  n_invalid_sealed_ -= victim.n_invalid;
  segments_[index].reset();
  free_indices_.push_back(index);
  --hash_size_;
  --stats_.live_segments;
  ++stats_.segments_collected;
}

Status LogEngine::CollectGarbage(double min_gp) {
  const size_t k = RankCandidates(min_gp, options_.segments_per_gc);
  if (k == 0) return Status::Ok();
  ++stats_.gc_operations;
  for (size_t v = 0; v < k; ++v) {
    const uint32_t index = gc_candidates_[v].index;
    StartVictim(index);
    if (replay_) {
      GcAgeBands bands;
      const bool by_age = placement_.GcBandsFor(segments_[index]->cls, Context(), &bands);
      ERAID_RETURN_IF_ERROR(by_age ? CopyReplayed<true>(index, bands)
                                   : CopyReplayed<false>(index, bands));
      continue;
    }
    const auto slots = static_cast<uint32_t>(segments_[index]->slots.size());
    bool copied = false;
    for (uint32_t slot = 0; slot < slots; ++slot) {
      ERAID_RETURN_IF_ERROR(CopySlot(index, slot, /*count_invalid=*/false, &copied));
    }
  }
  for (size_t v = 0; v < k; ++v) RetireVictim(gc_candidates_[v].index);
  return !options_.defer_frees && free_due() ? FreeCollected() : Status::Ok();
}

Status LogEngine::CollectStep(uint64_t max_blocks, bool* progress) {
  *progress = true;
  if (gc_victim_ == kNoSegment) {
    if (RankCandidates(std::numeric_limits<double>::min(), 1) == 0) {
      *progress = false;  // nothing holds garbage
      return Status::Ok();
    }
    gc_victim_ = gc_candidates_[0].index;
    gc_slot_ = 0;
    ++stats_.gc_operations;
    StartVictim(gc_victim_);
  }
  const uint32_t index = gc_victim_;
  const auto slots = static_cast<uint32_t>(segments_[index]->slots.size());
  for (uint64_t copied = 0; gc_slot_ < slots && copied < max_blocks; ++gc_slot_) {
    bool did = false;
    ERAID_RETURN_IF_ERROR(CopySlot(index, gc_slot_, /*count_invalid=*/true, &did));
    copied += did;
  }
  if (gc_slot_ < slots) return Status::Ok();
  gc_victim_ = kNoSegment;
  RetireVictim(index);
  return !options_.defer_frees && free_due() ? FreeCollected() : Status::Ok();
}

void LogEngine::AdoptSegment(uint64_t handle, uint32_t cls, std::vector<RecoveredBlock> blocks) {
  auto seg = std::make_unique<Segment>();
  seg->id = next_id_++;
  seg->handle = handle;
  seg->cls = std::min(cls, placement_.classes() - 1);
  seg->sealed = true;
  seg->created_time = UINT64_MAX;
  for (const RecoveredBlock& b : blocks) {
    seg->slots.push_back({b.lba, b.user_time});
    seg->positions.push_back(b.position);
    seg->created_time = std::min(seg->created_time, b.user_time);
    now_ = std::max(now_, b.user_time);
  }
  if (seg->created_time == UINT64_MAX) seg->created_time = 0;
  seg->n_invalid = static_cast<uint32_t>(seg->slots.size());  // until FinishRecovery maps them
  const auto index = static_cast<uint32_t>(segments_.size());
  segments_.push_back(std::move(seg));
  (void)index;
  ++hash_size_;
  ++stats_.live_segments;
}

Status LogEngine::FinishRecovery() {
  // Newest copy of each LBA wins; a trim record counts as a copy of every LBA of its range.
  std::vector<uint64_t> best_time;
  auto offer = [&](uint64_t lba, uint64_t entry, uint64_t user_time) {
    if (lba >= map_.size()) Grow(lba + 1);
    if (best_time.size() < map_.size()) best_time.resize(map_.size(), 0);
    if (map_[lba] == 0 || user_time > best_time[lba]) {
      map_[lba] = entry;
      best_time[lba] = user_time;
    }
  };
  for (uint32_t i = 0; i < segments_.size(); ++i) {
    Segment* seg = segments_[i].get();
    if (!seg || !seg->sealed) continue;
    for (uint32_t slot = 0; slot < seg->slots.size(); ++slot) {
      const Slot& s = seg->slots[slot];
      if (IsTrimTag(s.lba)) {
        const uint64_t first = TrimFirst(s.lba), end = first + TrimBlocks(s.lba);
        for (uint64_t l = first; l < end; ++l) offer(l, Pack(i, slot) | kTrimmed, s.user_time);
      } else {
        offer(s.lba, Pack(i, slot), s.user_time);
        if (has_data_) ++copies_[s.lba];
      }
    }
  }
  // A trimmed LBA with no copy left needs no record; the others hold theirs live.
  trim_refs_.clear();
  for (uint64_t l = 0; l < map_.size(); ++l) {
    if (!(map_[l] & kTrimmed)) continue;
    if (!has_data_ || copies_[l] == 0) {
      map_[l] = 0;
    } else {
      ++trim_refs_[map_[l] & ~kTrimmed];
    }
  }
  stats_.live_trim_records = trim_refs_.size();
  n_blocks_ = n_invalid_sealed_ = 0;
  stats_.valid_blocks = 0;
  for (uint32_t i = 0; i < segments_.size(); ++i) {
    Segment* seg = segments_[i].get();
    if (!seg) continue;
    uint32_t live = 0;
    for (uint32_t slot = 0; slot < seg->slots.size(); ++slot) {
      const uint64_t lba = seg->slots[slot].lba;
      if (IsTrimTag(lba)) {
        live += trim_refs_.count(Pack(i, slot)) != 0;
      } else if (map_[lba] == Pack(i, slot)) {
        ++live;
        ++stats_.valid_blocks;
        if (ExtentCounters* e = ExtentOf(lba)) ++e->valid_blocks;
      }
    }
    seg->n_invalid = static_cast<uint32_t>(seg->slots.size()) - live;
    n_blocks_ += seg->slots.size();
    if (seg->sealed) n_invalid_sealed_ += seg->n_invalid;
  }
  return CheckInvariants();
}

int LogEngine::ClassOf(uint64_t lba) const {
  if (lba >= map_.size() || !IsData(map_[lba])) return -1;
  return static_cast<int>(segments_[IndexOf(map_[lba])]->cls);
}

Status LogEngine::CheckInvariants() const {
  uint64_t blocks = 0, invalid_sealed = 0, valid = 0;
  std::unordered_map<uint64_t, uint32_t> refs;  // trim record -> LBAs mapped to it
  for (uint64_t lba = 0; lba < map_.size(); ++lba) {
    const uint64_t e = map_[lba];
    if (e == 0) continue;
    const Segment* seg = IndexOf(e) < segments_.size() ? segments_[IndexOf(e)].get() : nullptr;
    if (!seg || SlotOf(e) >= seg->slots.size())
      return Status::Corruption("lba " + std::to_string(lba) + " maps to no slot");
    const uint64_t tag = seg->slots[SlotOf(e)].lba;
    if (e & kTrimmed) {
      if (!IsTrimTag(tag) || lba < TrimFirst(tag) || lba >= TrimFirst(tag) + TrimBlocks(tag)) {
        return Status::Corruption("lba " + std::to_string(lba) +
                                  " is trimmed by a slot whose range lacks it");
      }
      if (has_data_ && copies_[lba] == 0) {
        return Status::Corruption("lba " + std::to_string(lba) +
                                  " keeps a trim record but has no copy to hide");
      }
      ++refs[e & ~kTrimmed];
    } else if (tag != lba) {
      return Status::Corruption("lba " + std::to_string(lba) +
                                " maps to a slot holding another block");
    }
  }
  if (refs.size() != trim_refs_.size())
    return Status::Corruption("live trim record count mismatch");
  for (const auto& [entry, n] : refs) {
    auto it = trim_refs_.find(entry);
    if (it == trim_refs_.end() || it->second != n)
      return Status::Corruption("trim record reference count mismatch");
  }
  for (uint32_t i = 0; i < segments_.size(); ++i) {
    const Segment* seg = segments_[i].get();
    if (!seg) continue;
    uint32_t live = 0;
    for (uint32_t slot = 0; slot < seg->slots.size(); ++slot) {
      const uint64_t lba = seg->slots[slot].lba;
      if (IsTrimTag(lba)) {
        live += trim_refs_.count(Pack(i, slot)) != 0;
      } else if (lba < map_.size() && map_[lba] == Pack(i, slot)) {
        ++live;
        ++valid;
      }
    }
    if (seg->n_invalid != seg->slots.size() - live) {
      return Status::Corruption("segment " + std::to_string(seg->id) + ": n_invalid " +
                                std::to_string(seg->n_invalid) + " but " +
                                std::to_string(seg->slots.size() - live) + " slots unmapped");
    }
    blocks += seg->slots.size();
    if (seg->sealed) invalid_sealed += seg->n_invalid;
  }
  if (blocks != n_blocks_)
    return Status::Corruption("n_blocks " + std::to_string(n_blocks_) +
                              " != " + std::to_string(blocks));
  if (invalid_sealed != n_invalid_sealed_) return Status::Corruption("n_invalid_sealed mismatch");
  if (valid != stats_.valid_blocks) return Status::Corruption("valid block count mismatch");
  if (trim_refs_.size() != stats_.live_trim_records)
    return Status::Corruption("live trim record stat mismatch");
  if (options_.extent_shift) {
    std::vector<uint64_t> per(extents_.size());
    for (uint64_t lba = 0; lba < map_.size(); ++lba) {
      if (IsData(map_[lba])) {
        const uint64_t e = lba >> options_.extent_shift;
        if (e >= per.size())
          return Status::Corruption("an extent with valid blocks has no counters");
        ++per[e];
      }
    }
    for (size_t e = 0; e < per.size(); ++e) {
      if (per[e] != extents_[e].valid_blocks)
        return Status::Corruption("extent " + std::to_string(e) + " valid count mismatch");
    }
  }
  return Status::Ok();
}

}  // namespace eraid
