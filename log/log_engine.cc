// The log engine: segments per placement class, writes, trims, reads, frees. Garbage
// collection is in log_gc.cc, recovery and the invariants in log_recovery.cc.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "log/log_internal.h"

namespace eraid {

using namespace log_internal;  // NOLINT: the engine's own helpers

Result<Selection> ParseSelection(const std::string& s) {
  if (s == "greedy") return Selection::kGreedy;
  if (s == "cost-benefit" || s == "costbenefit" || s == "cb") return Selection::kCostBenefit;
  return Status::InvalidArgument("selection must be greedy or cost-benefit, got '" + s + "'");
}

LogEngine::LogEngine(const EngineOptions& options, Placement& placement, SegmentStore& store)
    : options_(options),
      placement_(placement),
      store_(store),
      slot_bits_(static_cast<uint32_t>(std::bit_width(std::max(options.segment_blocks, 1u)))),
      has_data_(store.has_data()),
      keeps_tags_(store.keeps_tags()),
      counting_(dynamic_cast<const CountingStore*>(&store)),
      replay_(counting_ != nullptr && options.extent_shift == 0),
      open_(placement.classes()) {
  // A replay's working set is dense: its map too (the directory would cost every block a
  // load). A volume's map takes memory only for the runs of LBAs written.
  map_.set_dense(replay_);
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

Status LogEngine::CheckAddressable(uint64_t segment_blocks, uint64_t segments) {
  const auto bits = static_cast<uint32_t>(std::bit_width(std::max<uint64_t>(segment_blocks, 1)));
  if (bits < 31 && segments < (uint64_t{1} << (31 - bits))) return Status::Ok();
  return Status::InvalidArgument(
      std::to_string(segments) + " segments of " + std::to_string(segment_blocks) +
      " blocks are more than the log's 4-byte map entries address (2^31 slots, 8 TiB); use "
      "larger segments or fewer");
}

Status LogEngine::OpenSegment(uint32_t cls) {
  if (free_indices_.empty() && uint64_t{segments_.size()} + 1 > max_segments()) {
    return Status::NoSpace("the log's 4-byte map entries address " +
                           std::to_string(max_segments()) + " segments of up to " +
                           std::to_string(uint64_t{1} << slot_bits_) + " blocks");
  }
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
  // Room for a full segment at once: grown by doubling, sealed segments kept up to twice
  // the room their slots take (per-slot state is most of the log's RAM). Not with many
  // classes (a replay's placement may open hundreds of segments).
  if (open_.size() <= 16) {
    seg->slots.reserve(options_.segment_blocks);
  }
  segments_[index] = std::move(seg);
  open_[cls] = index;
  if (++hash_size_ > hash_capacity_ * 3 / 4) hash_capacity_ *= 2;
  ++stats_.live_segments;
  return Status::Ok();
}

Status LogEngine::SealSegment(uint32_t cls) {
  ERAID_CHECK(cls < open_.size() && open_[cls] != kNoSegment);
  Segment& seg = *segments_[open_[cls]];
  ERAID_CHECK(!seg.sealed && seg.cls == cls);
  ERAID_RETURN_IF_ERROR(store_.Seal(seg.handle));
  seg.sealed = true;
  if (keeps_tags_) {
    // The store keeps the tags (and reads them back for GC): 16 bytes per block less.
    std::vector<Slot>().swap(seg.slots);
    seg.positions.shrink_to_fit();
  } else if (seg.slots.capacity() - seg.slots.size() > options_.segment_blocks / 16) {
    // Sealed part-full (placement asked, or summaries took room): give back the rest.
    seg.slots.shrink_to_fit();
    seg.positions.shrink_to_fit();
  }
  n_invalid_sealed_ += seg.n_invalid;
  const SealDecision d = placement_.OnSealed(cls, Context());
  // A class whose next segment cannot be opened now (no free segment) has none until
  // its next block, which tries again: never a sealed segment left as its open one.
  if (d.reopen) {
    // The block that filled the segment is in; a failure to open the next one is not its
    // failure (it would go uncounted): the class's next block tries again, and fails
    // before it is appended if the store still cannot open one.
    if (!OpenSegment(cls).ok()) open_[cls] = kNoSegment;
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
    if (cls >= open_.size() || open_[cls] == kNoSegment || segments_[open_[cls]]->n_slots == 0)
      continue;
    status = SealSegment(cls);
    if (!status.ok()) break;
  }
  classes.clear();
  return status;
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
  map_.ref(lba) = 0;
  --stats_.valid_blocks;
  if (ExtentCounters* e = ExtentOf(lba)) --e->valid_blocks;
}

void LogEngine::GrowTo(uint64_t end) {
  uint64_t grown = map_.size() * 3 / 2 + 4096;
  if (options_.lba_space > 0) grown = std::min(grown, options_.lba_space);
  const uint64_t size = std::max(end, grown);
  map_.resize(size);  // RAM only for the pages written
  if (has_data_) copies_.resize(size);
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
  const uint32_t slot = seg.n_slots++;
  ERAID_CHECK((slot >> slot_bits_) == 0);  // the store's segments are no larger than promised
  seg.slots.push_back({tag, user_time});
  if (has_data_) seg.positions.Append(slot, position);
  seg.modified_us = timestamp_us_;
  return Pack(index, slot);
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
  // invalid / blocks > threshold, without a division per request (it was a seventh of a
  // one-block replay's Write); both sides are exact in a double below 2^53 blocks.
  if (n_blocks_ > 0 && static_cast<double>(n_invalid_sealed_) >
                           options_.gp_threshold * static_cast<double>(n_blocks_)) {
    return CollectGarbage(options_.gp_threshold);
  }
  return Status::Ok();
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
    map_.ref(l) = entry | kTrimmed;
    ++refs;
  }
  trim_refs_[entry] = refs;
  ++stats_.live_trim_records;
  return SealIfFull(IndexOf(entry));
}

void LogEngine::Untrim(uint64_t lba) {
  const Entry entry = map_[lba] & ~kTrimmed;
  map_.ref(lba) = 0;
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
  return store_.Read(seg.handle, seg.positions.At(SlotOf(map_[lba])), out);
}

Status LogEngine::Flush() { return FreeCollected(); }

uint64_t LogEngine::memory_bytes() const {
  constexpr uint64_t kHashEntry = 32;
  uint64_t b = map_.bytes() + copies_.bytes() +
               (many_copies_.size() + trim_refs_.size()) * kHashEntry +
               segments_.capacity() * sizeof(void*) + free_indices_.capacity() * 4;
  for (const auto& seg : segments_) {
    if (seg) b += sizeof(Segment) + seg->slots.capacity() * sizeof(Slot) + seg->positions.bytes();
  }
  for (const Unfreed& u : unfreed_) b += u.lbas.capacity() * 8;
  return b;
}

Status LogEngine::FreeVictim(Unfreed& victim) {
  ERAID_RETURN_IF_ERROR(store_.Free(victim.handle));
  ++victims_freed_;
  // Its copies stop counting now, though the free is durable only after the next flush:
  // a trim record this lets go is dropped by GC and leaves the store with its segment,
  // whose free comes after a flush that began after this one — so it is never gone while
  // a copy it hid can still be found (docs/log.md, "Trim").
  for (uint64_t lba : victim.lbas) {
    if (DropCopy(lba) && (map_[lba] & kTrimmed)) Untrim(lba);
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
    if (seg && seg->sealed && seg->n_slots != 0) fn(seg->handle, Reclaimable(*seg));
  }
}

}  // namespace eraid
