// Rebuilding the log engine's state after a restart (segments adopted from the store),
// and its invariants, checked.
#include <algorithm>
#include <cmath>

#include "log/log_internal.h"

namespace eraid {

using namespace log_internal;  // NOLINT: the engine's own helpers

void LogEngine::AdoptSegment(uint64_t handle, uint32_t cls, std::vector<RecoveredBlock> blocks) {
  auto seg = std::make_unique<Segment>();
  seg->id = next_id_++;
  seg->handle = handle;
  seg->cls = std::min(cls, placement_.classes() - 1);
  seg->sealed = true;
  seg->created_time = UINT64_MAX;
  seg->slots.reserve(blocks.size());  // exact: per-slot state is most of the log's RAM
  for (const RecoveredBlock& b : blocks) {
    if (has_data_) seg->positions.Append(static_cast<uint32_t>(seg->slots.size()), b.position);
    seg->slots.push_back({b.lba, b.user_time});
    seg->created_time = std::min(seg->created_time, b.user_time);
    now_ = std::max(now_, b.user_time);
  }
  if (seg->created_time == UINT64_MAX) seg->created_time = 0;
  seg->n_slots = static_cast<uint32_t>(seg->slots.size());
  seg->n_invalid = seg->n_slots;  // until FinishRecovery maps them
  const auto index = static_cast<uint32_t>(segments_.size());
  segments_.push_back(std::move(seg));
  (void)index;
  ++hash_size_;
  ++stats_.live_segments;
}

Status LogEngine::LoadSlots(uint32_t index, std::vector<Slot>* loaded, const Slot** out) const {
  const Segment& seg = *segments_[index];
  if (seg.slots.size() == seg.n_slots) {  // in RAM (a store without tags, open, recovering)
    *out = seg.slots.data();
    return Status::Ok();
  }
  std::vector<SegmentStore::StoredTag> tags;
  ERAID_RETURN_IF_ERROR(store_.ReadTags(seg.handle, &tags));
  if (tags.size() != seg.n_slots) {
    return Status::Corruption("segment " + std::to_string(seg.id) + ": the store holds " +
                              std::to_string(tags.size()) + " tags for " +
                              std::to_string(seg.n_slots) + " slots");
  }
  loaded->resize(tags.size());
  for (uint32_t slot = 0; slot < tags.size(); ++slot) {
    if (has_data_ && tags[slot].position != seg.positions.At(slot)) {
      return Status::Corruption("segment " + std::to_string(seg.id) + ": slot " +
                                std::to_string(slot) + "'s tag is at another position");
    }
    (*loaded)[slot] = {tags[slot].lba, tags[slot].user_time};
  }
  *out = loaded->data();
  return Status::Ok();
}

template <typename OnValid>
uint32_t LogEngine::LiveSlots(uint32_t index, const Slot* slots, OnValid&& on_valid) const {
  const Segment& seg = *segments_[index];
  uint32_t live = 0;
  for (uint32_t slot = 0; slot < seg.n_slots; ++slot) {
    const uint64_t lba = slots[slot].lba;
    if (IsTrimTag(lba)) {
      live += trim_refs_.count(Pack(index, slot)) != 0;
    } else if (lba < map_.size() && map_[lba] == Pack(index, slot)) {
      ++live;
      on_valid(lba);
    }
  }
  return live;
}

Status LogEngine::FinishRecovery() {
  // Newest copy of each LBA wins; a trim record counts as a copy of every LBA of its range.
  // The time to beat is the slot's the map points at (no array of times beside the map:
  // 8 bytes per LBA at the peak of an open).
  auto offer = [&](uint64_t lba, Entry entry, uint64_t user_time) {
    if (lba >= map_.size()) Grow(lba + 1);
    const Entry e = map_[lba];
    if (e == 0 || user_time > segments_[IndexOf(e)]->slots[SlotOf(e)].user_time) {
      map_.ref(lba) = entry;
    }
  };
  // Every adopted segment's slots are in RAM until the end of recovery.
  for (uint32_t i = 0; i < segments_.size(); ++i) {
    Segment* seg = segments_[i].get();
    if (!seg || !seg->sealed) continue;
    for (uint32_t slot = 0; slot < seg->n_slots; ++slot) {
      const Slot& s = seg->slots[slot];
      if (IsTrimTag(s.lba)) {
        const uint64_t first = TrimFirst(s.lba), end = first + TrimBlocks(s.lba);
        for (uint64_t l = first; l < end; ++l) offer(l, Pack(i, slot) | kTrimmed, s.user_time);
      } else {
        offer(s.lba, Pack(i, slot), s.user_time);
        if (has_data_) AddCopy(s.lba);
      }
    }
  }
  // A trimmed LBA with no copy left needs no record; the others hold theirs live.
  trim_refs_.clear();
  map_.ForEachPaged([&](uint64_t l, Entry& e) {
    if (!(e & kTrimmed)) return;
    if (!has_data_ || copies_[l] == 0) {
      e = 0;
    } else {
      ++trim_refs_[e & ~kTrimmed];
    }
  });
  stats_.live_trim_records = trim_refs_.size();
  n_blocks_ = n_invalid_sealed_ = 0;
  stats_.valid_blocks = 0;
  for (uint32_t i = 0; i < segments_.size(); ++i) {
    Segment* seg = segments_[i].get();
    if (!seg) continue;
    const uint32_t live = LiveSlots(i, seg->slots.data(), [&](uint64_t lba) {
      ++stats_.valid_blocks;
      if (ExtentCounters* e = ExtentOf(lba)) ++e->valid_blocks;
    });
    seg->n_invalid = seg->n_slots - live;
    n_blocks_ += seg->n_slots;
    if (seg->sealed) n_invalid_sealed_ += seg->n_invalid;
  }
  ERAID_RETURN_IF_ERROR(CheckInvariants());
  if (keeps_tags_) {  // the store has them: read back when GC collects the segment
    for (auto& seg : segments_) {
      if (seg && seg->sealed) std::vector<Slot>().swap(seg->slots);
    }
  }
  return Status::Ok();
}

int LogEngine::ClassOf(uint64_t lba) const {
  if (lba >= map_.size() || !IsData(map_[lba])) return -1;
  return static_cast<int>(segments_[IndexOf(map_[lba])]->cls);
}

Status LogEngine::CheckInvariants() const {
  // Each segment's slots, read back once from a store that keeps them.
  std::vector<std::vector<Slot>> loaded(segments_.size());
  std::vector<const Slot*> slots(segments_.size());
  for (uint32_t i = 0; i < segments_.size(); ++i) {
    if (segments_[i]) ERAID_RETURN_IF_ERROR(LoadSlots(i, &loaded[i], &slots[i]));
  }
  ERAID_RETURN_IF_ERROR(CheckMap(slots));
  ERAID_RETURN_IF_ERROR(CheckCounts(slots));
  if (has_data_) ERAID_RETURN_IF_ERROR(CheckCopies(slots));
  if (options_.extent_shift) ERAID_RETURN_IF_ERROR(CheckExtents());
  return Status::Ok();
}

Status LogEngine::CheckMap(const std::vector<const Slot*>& slots) const {
  std::unordered_map<uint64_t, uint32_t> refs;  // trim record -> LBAs mapped to it
  Status bad;                                   // the first entry found wrong
  map_.ForEachPaged([&](uint64_t lba, Entry e) {
    if (e == 0 || !bad.ok()) return;
    const Segment* seg = IndexOf(e) < segments_.size() ? segments_[IndexOf(e)].get() : nullptr;
    if (!seg || SlotOf(e) >= seg->n_slots) {
      bad = Status::Corruption("lba " + std::to_string(lba) + " maps to no slot");
      return;
    }
    const uint64_t tag = slots[IndexOf(e)][SlotOf(e)].lba;
    if (e & kTrimmed) {
      if (!IsTrimTag(tag) || lba < TrimFirst(tag) || lba >= TrimFirst(tag) + TrimBlocks(tag)) {
        bad = Status::Corruption("lba " + std::to_string(lba) +
                                 " is trimmed by a slot whose range lacks it");
      } else if (has_data_ && copies_[lba] == 0) {
        bad = Status::Corruption("lba " + std::to_string(lba) +
                                 " keeps a trim record but has no copy to hide");
      } else {
        ++refs[e & ~kTrimmed];
      }
    } else if (tag != lba) {
      bad = Status::Corruption("lba " + std::to_string(lba) +
                               " maps to a slot holding another block");
    }
  });
  ERAID_RETURN_IF_ERROR(bad);
  if (refs.size() != trim_refs_.size())
    return Status::Corruption("live trim record count mismatch");
  for (const auto& [entry, n] : refs) {
    auto it = trim_refs_.find(entry);
    if (it == trim_refs_.end() || it->second != n)
      return Status::Corruption("trim record reference count mismatch");
  }
  return Status::Ok();
}

Status LogEngine::CheckCounts(const std::vector<const Slot*>& slots) const {
  uint64_t blocks = 0, invalid_sealed = 0, valid = 0;
  for (uint32_t i = 0; i < segments_.size(); ++i) {
    const Segment* seg = segments_[i].get();
    if (!seg) continue;
    const uint32_t live = LiveSlots(i, slots[i], [&](uint64_t) { ++valid; });
    if (seg->n_invalid != seg->n_slots - live) {
      return Status::Corruption("segment " + std::to_string(seg->id) + ": n_invalid " +
                                std::to_string(seg->n_invalid) + " but " +
                                std::to_string(seg->n_slots - live) + " slots unmapped");
    }
    blocks += seg->n_slots;
    if (seg->sealed) invalid_sealed += seg->n_invalid;
  }
  if (blocks != n_blocks_)
    return Status::Corruption("n_blocks " + std::to_string(n_blocks_) +
                              " != " + std::to_string(blocks));
  if (invalid_sealed != n_invalid_sealed_) return Status::Corruption("n_invalid_sealed mismatch");
  if (valid != stats_.valid_blocks) return Status::Corruption("valid block count mismatch");
  if (trim_refs_.size() != stats_.live_trim_records)
    return Status::Corruption("live trim record stat mismatch");
  return Status::Ok();
}

Status LogEngine::CheckCopies(const std::vector<const Slot*>& slots) const {
  // Copy counts, recounted: data slots of live segments and of victims not yet freed.
  std::unordered_map<uint64_t, uint64_t> want;
  for (uint32_t i = 0; i < segments_.size(); ++i) {
    if (!segments_[i]) continue;
    for (uint32_t s = 0; s < segments_[i]->n_slots; ++s) {
      if (!IsTrimTag(slots[i][s].lba)) ++want[slots[i][s].lba];
    }
  }
  for (const Unfreed& victim : unfreed_) {
    for (uint64_t lba : victim.lbas) ++want[lba];
  }
  uint64_t counted = 0;
  Status wrong;
  copies_.ForEachPaged([&](uint64_t lba, uint8_t c) {
    if (c == 0 || !wrong.ok()) return;
    ++counted;
    auto many = many_copies_.find(lba);
    const uint64_t have = c < kManyCopies ? c : many == many_copies_.end() ? 0 : many->second;
    auto it = want.find(lba);
    if (it == want.end() || it->second != have || (c == kManyCopies) != (have >= kManyCopies)) {
      wrong = Status::Corruption("lba " + std::to_string(lba) + " counts " + std::to_string(have) +
                                 " copies but has " +
                                 std::to_string(it == want.end() ? 0 : it->second));
    }
  });
  ERAID_RETURN_IF_ERROR(wrong);
  if (counted != want.size()) return Status::Corruption("an LBA's copies are not counted");
  for (const auto& [lba, n] : many_copies_) {
    if (lba >= copies_.size() || copies_[lba] != kManyCopies || n < kManyCopies)
      return Status::Corruption("lba " + std::to_string(lba) + " is among the many-copied wrongly");
  }

  return Status::Ok();
}

Status LogEngine::CheckExtents() const {
  std::vector<uint64_t> per(extents_.size());
  bool uncounted = false;
  map_.ForEachPaged([&](uint64_t lba, Entry entry) {
    if (!IsData(entry)) return;
    const uint64_t e = lba >> options_.extent_shift;
    if (e >= per.size()) {
      uncounted = true;
    } else {
      ++per[e];
    }
  });
  if (uncounted) return Status::Corruption("an extent with valid blocks has no counters");
  for (size_t e = 0; e < per.size(); ++e) {
    if (per[e] != extents_[e].valid_blocks)
      return Status::Corruption("extent " + std::to_string(e) + " valid count mismatch");
  }

  return Status::Ok();
}

}  // namespace eraid
