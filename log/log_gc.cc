// The log engine's garbage collection: victims ranked by the selection policy (greedy or
// cost-benefit), their valid blocks copied out to the GC classes the placement picks.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "log/log_internal.h"

namespace eraid {

using namespace log_internal;  // NOLINT: the engine's own helpers

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
    if (!seg || !seg->sealed || i == gc_victim_.index) continue;
    const uint64_t slots = seg->n_slots;
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

Status LogEngine::StartVictim(uint32_t index, Victim* v) {
  ERAID_CHECK(index < segments_.size() && segments_[index] != nullptr);
  Segment& victim = *segments_[index];
  ERAID_CHECK(victim.sealed);  // GC collects sealed segments only
  // Before anything changes: a victim whose tags cannot be read is not collected.
  ERAID_RETURN_IF_ERROR(LoadSlots(index, &v->loaded, &v->slots).WithContext("gc tags"));
  v->index = index;
  gc_ahead_index_ = kNoSegment;  // the index may be a reused one: no read-ahead carries over
  if (options_.keep_victim_gps)
    stats_.victim_gps.push_back(float(victim.n_invalid) / float(victim.n_slots));
  placement_.SegmentCollected(victim.cls, victim.created_time, Context());
  return Status::Ok();
}

// Inlined into the GC loops: it runs once per slot of every victim.
[[gnu::always_inline]] inline Status LogEngine::CopySlot(const Victim& v, uint32_t slot,
                                                         bool count_invalid, bool* copied) {
  const uint32_t index = v.index;
  Segment& victim = *segments_[index];
  // The victim's LBAs are scattered over the map: ask for the map entry a few slots
  // ahead, so its cache miss overlaps this slot's work (the loop's main cost).
  if (slot + kGcPrefetch < victim.n_slots && v.slots[slot + kGcPrefetch].lba < map_.size()) {
    map_.Prefetch(v.slots[slot + kGcPrefetch].lba);
  }
  *copied = false;
  const Slot s = v.slots[slot];
  if (IsTrimTag(s.lba)) return CopyTrimRecord(v, slot, count_invalid, copied);
  if (!SlotValid(v, slot)) return Status::Ok();  // garbage
  std::span<const std::byte> data;
  if (has_data_) {
    ERAID_ASSIGN_OR_RETURN(data, GcData(v, slot));
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

Result<std::span<const std::byte>> LogEngine::GcData(const Victim& v, uint32_t slot) {
  const Segment& victim = *segments_[v.index];
  if (gc_ahead_index_ != v.index || slot >= gc_ahead_end_ ||
      (gc_ahead_next_ > 0 && gc_ahead_slots_[gc_ahead_next_ - 1] > slot)) {
    // The next kGcReadAhead slots still valid (SlotValid), looked for over at
    // most 16 times as many: a mostly-garbage victim is not scanned to its end at once.
    gc_ahead_index_ = v.index;
    gc_ahead_next_ = 0;
    gc_ahead_slots_.clear();
    gc_ahead_positions_.clear();
    uint32_t end = slot;
    const uint32_t limit = std::min<uint32_t>(victim.n_slots, slot + 16 * kGcReadAhead);
    for (; end < limit && gc_ahead_slots_.size() < kGcReadAhead; ++end) {
      if (!SlotValid(v, end)) continue;
      gc_ahead_slots_.push_back(end);
      gc_ahead_positions_.push_back(victim.positions.At(end));
    }
    gc_ahead_end_ = end;
    gc_ahead_buf_.resize(BlocksToBytes(gc_ahead_slots_.size()));
    gc_ahead_status_.assign(gc_ahead_slots_.size(), Status::Ok());
    store_.ReadMany(victim.handle, gc_ahead_positions_, gc_ahead_buf_, gc_ahead_status_);
  }
  while (gc_ahead_next_ < gc_ahead_slots_.size() && gc_ahead_slots_[gc_ahead_next_] < slot)
    ++gc_ahead_next_;
  if (gc_ahead_next_ < gc_ahead_slots_.size() && gc_ahead_slots_[gc_ahead_next_] == slot &&
      gc_ahead_status_[gc_ahead_next_].ok()) {
    return std::span<const std::byte>(gc_ahead_buf_)
        .subspan(BlocksToBytes(gc_ahead_next_), kBlockSize);
  }
  // Not read ahead (it was not valid when the read-ahead looked), or its read failed: alone,
  // with its own error.
  gc_buf_.resize(kBlockSize);
  ERAID_RETURN_IF_ERROR(
      store_.ReadForGc(victim.handle, victim.positions.At(slot), gc_buf_).WithContext("gc read"));
  return std::span<const std::byte>(gc_buf_);
}

// Replay's copy of a whole victim (CopySlot for each slot, count_invalid false): every
// slot is a data block, its LBA inside the map (it was mapped when appended), and with
// kByAge the class comes from the bands, not a call per block.
template <bool kByAge>
Status LogEngine::CopyReplayed(uint32_t index, const GcAgeBands& bands) {
  const Segment& victim = *segments_[index];
  const Slot* const slots = victim.slots.data();
  const auto n = static_cast<uint32_t>(victim.slots.size());
  const Entry* const map = map_.dense_data();  // a replay's map is dense; GC never grows it
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

Status LogEngine::CopyTrimRecord(const Victim& v, uint32_t slot, bool count_invalid, bool* copied) {
  const uint32_t index = v.index;
  Segment& victim = *segments_[index];
  const Slot s = v.slots[slot];
  const Entry entry = Pack(index, slot);
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
    if (map_[l] == (entry | kTrimmed)) map_.ref(l) = moved | kTrimmed;
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

void LogEngine::RetireVictim(Victim* v) {
  // The copies must be durable before the victim's originals go, and they are only after
  // a flush: the victim waits for one (no LBA maps into it any more).
  const uint32_t index = v->index;
  ERAID_CHECK(index < segments_.size() && segments_[index] != nullptr);
  Segment& victim = *segments_[index];
  ERAID_CHECK(victim.sealed);
  std::vector<uint64_t> lbas;
  if (has_data_) {
    lbas.reserve(victim.n_slots);
    for (uint32_t slot = 0; slot < victim.n_slots; ++slot) {
      if (!IsTrimTag(v->slots[slot].lba)) lbas.push_back(v->slots[slot].lba);
    }
  }
  v->index = kNoSegment;
  v->slots = nullptr;
  v->loaded.clear();
  unfreed_.push_back({victim.handle, next_unfreed_seq_++, std::move(lbas)});
  n_blocks_ -= victim.n_slots;
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
  if (gc_victims_.size() < k) gc_victims_.resize(k);
  for (size_t v = 0; v < k; ++v) {
    const uint32_t index = gc_candidates_[v].index;
    Victim& victim = gc_victims_[v];
    ERAID_RETURN_IF_ERROR(StartVictim(index, &victim));
    if (replay_) {
      GcAgeBands bands;
      const bool by_age = placement_.GcBandsFor(segments_[index]->cls, Context(), &bands);
      ERAID_RETURN_IF_ERROR(by_age ? CopyReplayed<true>(index, bands)
                                   : CopyReplayed<false>(index, bands));
      continue;
    }
    const uint32_t slots = segments_[index]->n_slots;
    bool copied = false;
    for (uint32_t slot = 0; slot < slots; ++slot) {
      ERAID_RETURN_IF_ERROR(CopySlot(victim, slot, /*count_invalid=*/false, &copied));
    }
  }
  for (size_t v = 0; v < k; ++v) RetireVictim(&gc_victims_[v]);
  return !options_.defer_frees && free_due() ? FreeCollected() : Status::Ok();
}

Status LogEngine::CollectStep(uint64_t max_blocks, bool* progress) {
  *progress = true;
  if (gc_victim_.index == kNoSegment) {
    if (RankCandidates(std::numeric_limits<double>::min(), 1) == 0) {
      *progress = false;  // nothing holds garbage
      return Status::Ok();
    }
    ERAID_RETURN_IF_ERROR(StartVictim(gc_candidates_[0].index, &gc_victim_));
    gc_slot_ = 0;
    ++stats_.gc_operations;
  }
  const uint32_t slots = segments_[gc_victim_.index]->n_slots;
  for (uint64_t copied = 0; gc_slot_ < slots && copied < max_blocks; ++gc_slot_) {
    bool did = false;
    ERAID_RETURN_IF_ERROR(CopySlot(gc_victim_, gc_slot_, /*count_invalid=*/true, &did));
    copied += did;
  }
  if (gc_slot_ < slots) return Status::Ok();
  RetireVictim(&gc_victim_);
  return !options_.defer_frees && free_due() ? FreeCollected() : Status::Ok();
}

}  // namespace eraid
