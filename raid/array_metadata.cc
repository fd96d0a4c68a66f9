// The array's own metadata: superblocks, the segment bitmap (checkpoints and journal),
// the flushes things wait for, and opening an array (recovery). Formats:
// docs/format/raid.md.
#include <map>
#include <optional>

#include "common/crc32c.h"
#include "common/encoding.h"
#include "raid/array_internal.h"

namespace eraid {

using namespace raid_format;  // NOLINT: this file implements that format

using namespace array_internal;

Status ElasticArray::WriteSuperblocksLocked() {
  ++super_generation_;
  std::vector<std::byte> block(kBlockSize);
  Superblock sb;
  sb.array_id = array_id_;
  sb.generation = super_generation_;
  sb.geometry = geometry_;
  sb.device_blocks = geometry_.device_blocks_needed();
  for (uint32_t d = 0; d < io_->count(); ++d) sb.states[d] = io_->state(d);
  uint32_t written = 0;
  for (uint32_t d = 0; d < io_->count(); ++d) {
    if (!io_->writable(d)) continue;
    sb.device_index = d;
    EncodeSuperblock(sb, block);
    Status s = io_->device(d)->Write(Lba(super_generation_ % 2), block);
    if (s.ok()) s = io_->device(d)->Flush();
    io_->Note(d, s);
    written += s.ok();
  }
  if (io_->take_failures_changed()) return WriteSuperblocksLocked();  // record the new failure too
  if (written + 1 < io_->count()) stats_.data_at_risk = true;
  return written > 0 ? Status::Ok() : Status::IoError("no device accepted the superblock");
}

uint64_t ElasticArray::WriteCheckpointLocked() {
  // The entries as journalled: a seal still waiting for its flush is recorded as the open
  // entry it was (its blocks may not be durable yet; docs/format/raid.md).
  std::vector<SegmentEntry> entries(segments_.size());
  for (size_t i = 0; i < segments_.size(); ++i) {
    auto it = seals_awaiting_flush_.find(static_cast<uint32_t>(i));
    entries[i] = it != seals_awaiting_flush_.end() ? it->second : segments_[i]->entry;
  }
  std::vector<std::byte> buf(BlocksToBytes(BitmapBlocks(geometry_.segments)));
  EncodeBitmap(journal_seq_, entries, buf);
  checkpoint_slot_ ^= 1;
  std::vector<DeviceWrite> writes;
  for (uint32_t d = 0; d < io_->count(); ++d) {
    writes.push_back({d, BitmapSlotLba(checkpoint_slot_, geometry_.segments), buf});
  }
  io_->Write(writes);
  return journal_seq_;
}

Status ElasticArray::CheckpointBitmapLocked() {
  // A checkpoint written and not yet durable is in the other slot: make it durable before
  // this one overwrites the slot of the last durable one.
  if (pending_checkpoint_seq_ != 0) FlushDevicesLocked();
  const uint64_t covered = WriteCheckpointLocked();
  FlushDevicesLocked();
  checkpoint_seq_ = std::max(checkpoint_seq_, covered);
  if (io_->take_failures_changed()) ERAID_RETURN_IF_ERROR(WriteSuperblocksLocked());
  return Status::Ok();
}

void ElasticArray::AddSegmentTrims(uint32_t segment, std::vector<DeviceTrim>* out) const {
  for (uint32_t d = 0; d < geometry_.devices; ++d) {
    out->push_back(
        {d, geometry_.SegmentStart(SegmentId(segment)), geometry_.segment_span_blocks()});
  }
}

void ElasticArray::FlushDevicesLocked() {
  // What waits for this flush below assumes every row so far is on the devices.
  DrainRows();
  ApplyRowResultsLocked();
  io_->FlushAll();
  journal_unflushed_ = false;
  PromoteCheckpointLocked(pending_checkpoint_seq_);
  std::vector<DeviceTrim> trims;
  for (auto& [segment, t] : unmirror_awaiting_flush_) {
    for (const auto& [epoch, trim] : t) trims.push_back(trim);
  }
  unmirror_awaiting_flush_.clear();
  for (const auto& [s, epoch] : frees_awaiting_flush_) AddSegmentTrims(s, &trims);
  frees_awaiting_flush_.clear();
  if (!trims.empty()) io_->Trim(trims);
  // A seal record written before its blocks were durable could, at a crash, bound the
  // segment's chain past what is on disk: it is written only now. (Journalling may
  // checkpoint, which flushes again: the set is taken first.)
  seal_epochs_.clear();
  for (const auto& [s, before] : std::exchange(seals_awaiting_flush_, {})) {
    if (segments_[s]->entry.sealed) (void)JournalLocked(s, Durable::kAtNextFlush);
  }
}

void ElasticArray::PromoteCheckpointLocked(uint64_t flushed) {
  if (flushed == 0) return;
  checkpoint_seq_ = std::max(checkpoint_seq_, flushed);
  if (pending_checkpoint_seq_ == flushed) pending_checkpoint_seq_ = 0;
}

void ElasticArray::FinishFlushLocked(const FlushSnapshot& snap) {
  PromoteCheckpointLocked(snap.pending_checkpoint);
  if (journal_seq_ == snap.journal_seq) journal_unflushed_ = false;
  std::vector<DeviceTrim> trims;
  for (auto it = unmirror_awaiting_flush_.begin(); it != unmirror_awaiting_flush_.end();) {
    auto& t = it->second;
    for (const auto& [epoch, trim] : t) {
      if (epoch <= snap.epoch) trims.push_back(trim);
    }
    std::erase_if(t, [&](const auto& e) { return e.first <= snap.epoch; });
    it = t.empty() ? unmirror_awaiting_flush_.erase(it) : std::next(it);
  }
  for (auto it = frees_awaiting_flush_.begin(); it != frees_awaiting_flush_.end();) {
    if (it->second > snap.epoch) {
      ++it;
      continue;
    }
    AddSegmentTrims(it->first, &trims);
    it = frees_awaiting_flush_.erase(it);
  }
  if (!trims.empty()) io_->Trim(trims);
  std::vector<uint32_t> seals;
  for (auto it = seal_epochs_.begin(); it != seal_epochs_.end();) {
    if (it->second > snap.epoch) {
      ++it;
      continue;
    }
    seals.push_back(it->first);
    seals_awaiting_flush_.erase(it->first);
    it = seal_epochs_.erase(it);
  }
  for (uint32_t s : seals) {
    if (segments_[s]->entry.sealed) (void)JournalLocked(s, Durable::kAtNextFlush);
  }
}

Status ElasticArray::JournalLocked(uint32_t segment, Durable when) {
  // Keep the ring from overwriting records the newest durable checkpoint does not cover.
  // Half-way round, a checkpoint is written without a flush: whatever flush comes before
  // the ring needs it makes it durable, and only if none has, the ring waits for one.
  if (journal_seq_ + 1 - checkpoint_seq_ >= kJournalBlocks) {
    ++stats_.journal_ring_stalls;
    if (pending_checkpoint_seq_ != 0) FlushDevicesLocked();
    if (journal_seq_ + 1 - checkpoint_seq_ >= kJournalBlocks)
      ERAID_RETURN_IF_ERROR(CheckpointBitmapLocked());
  } else if (pending_checkpoint_seq_ == 0 && journal_seq_ - checkpoint_seq_ >= kJournalBlocks / 2) {
    pending_checkpoint_seq_ = WriteCheckpointLocked();
  }
  JournalRecord r{++journal_seq_, segment, segments_[segment]->entry};
  std::vector<std::byte> block(kBlockSize);
  EncodeJournal(r, block);
  std::vector<DeviceWrite> writes;
  for (uint32_t d = 0; d < io_->count(); ++d)
    writes.push_back({d, JournalLba(r.seq, geometry_.segments), block});
  io_->Write(writes);
  journal_unflushed_ = true;
  if (when == Durable::kNow)
    FlushDevicesLocked();  // the flip is durable before anything relies on it
  if (io_->take_failures_changed()) ERAID_RETURN_IF_ERROR(WriteSuperblocksLocked());
  return Status::Ok();
}

// ---------------------------------------------------------------- open / recovery

Result<std::unique_ptr<ElasticArray>> ElasticArray::Open(std::vector<Backend*> devices,
                                                         const Clock& clock) {
  if (devices.size() < kMinDevices || devices.size() > kMaxDevices) {
    return Status::InvalidArgument("an array needs 3..16 devices, got " +
                                   std::to_string(devices.size()));
  }
  // The newest valid superblock of each device; the newest of all defines the array.
  std::vector<std::optional<Superblock>> supers(devices.size());
  // Devices that answer neither superblock read (gone: a drive host that is down), or
  // whose copies both read but neither checks out though one at least is an eraid
  // superblock (rotten: bit rot hit both, not a foreign device). One of them the array
  // can do without: it opens degraded, that device failed, to be rebuilt.
  std::vector<bool> gone(devices.size(), false);
  uint32_t gone_count = 0;
  std::vector<std::byte> block(kBlockSize);
  const Superblock* newest = nullptr;
  std::string why;
  for (size_t d = 0; d < devices.size(); ++d) {
    uint32_t read_errors = 0, ours = 0;
    for (uint64_t slot = 0; slot < 2; ++slot) {
      if (!devices[d]->Read(Lba(slot), block).ok()) {
        ++read_errors;
        continue;
      }
      ours += GetLe64(block.data()) == kSuperMagic;
      auto sb = DecodeSuperblock(block);
      if (!sb.ok()) {
        why = sb.status().ToString();
        continue;
      }
      if (!supers[d] || sb->generation > supers[d]->generation) supers[d] = *sb;
    }
    if (read_errors == 2 || (!supers[d] && ours > 0)) {
      gone[d] = true;
      ++gone_count;
    }
    if (supers[d] && (!newest || supers[d]->generation > newest->generation)) newest = &*supers[d];
  }
  if (!newest)
    return Status::Corruption("no device holds a valid array superblock" +
                              (why.empty() ? "" : " (" + why + ")"));
  const Superblock top = *newest;
  if (top.geometry.devices != devices.size()) {
    return Status::InvalidArgument("the array has " + std::to_string(top.geometry.devices) +
                                   " devices, " + std::to_string(devices.size()) + " were given");
  }
  auto array =
      std::unique_ptr<ElasticArray>(new ElasticArray(devices, top.geometry, top.array_id, clock));
  array->super_generation_ = top.generation;
  for (uint32_t d = 0; d < devices.size(); ++d) {
    array->io_->set_state(d, top.states[d]);
    if (top.states[d] == DeviceState::kRebuilding) array->io_->set_state(d, DeviceState::kFailed);
    // What a device failed before this open lacks is not known (the marks are in memory).
    if (top.states[d] != DeviceState::kOk) array->changes_->Invalidate(d);
    if (top.states[d] != DeviceState::kOk) continue;
    if (supers[d]) array->joined_generation_[d] = supers[d]->generation;
    if (gone[d] && gone_count == 1 &&
        std::count(top.states, top.states + devices.size(), DeviceState::kOk) ==
            static_cast<long>(devices.size())) {
      array->io_->Fail(d);  // recorded on the others by the first superblock write
      array->changes_->Invalidate(d);
      continue;
    }
    if (!supers[d]) {
      return Status::Corruption("device " + std::to_string(d) +
                                " has no valid superblock; fail and replace it");
    }
    if (supers[d]->array_id != top.array_id) {
      return Status::InvalidArgument("device " + std::to_string(d) + " belongs to another array");
    }
    if (supers[d]->device_index != d) {
      return Status::InvalidArgument("device given at position " + std::to_string(d) +
                                     " is device " + std::to_string(supers[d]->device_index) +
                                     " of the array");
    }
    if (devices[d]->capacity_blocks() < top.geometry.device_blocks_needed()) {
      return Status::InvalidArgument("device " + std::to_string(d) +
                                     " is smaller than the array needs");
    }
    // Every round of superblock writes reaches every writable device before the next
    // starts, so a crash leaves healthy devices at most one generation apart. A device
    // further behind missed whole rounds: it was failed, and this is its old copy (a
    // rebuild onto a replacement was cut before the replacement took its place). Its
    // blocks are stale: it is failed again, to be rebuilt.
    if (supers[d]->generation + 1 < top.generation) {
      array->io_->Fail(d);
      array->changes_->Invalidate(d);  // it lacks more than anything marked from now on
    }
  }
  std::lock_guard lock(array->mu_);
  ERAID_RETURN_IF_ERROR(array->RecoverLocked());
  return array;
}

Status ElasticArray::RecoverLocked() {
  const uint32_t nseg = geometry_.segments;
  std::vector<SegmentEntry> best(nseg), entries(nseg);
  uint64_t best_seq = 0;
  bool found = false;
  std::map<uint64_t, JournalRecord> records;
  struct RingSlot {
    uint32_t device, slot;
    uint64_t seq;
  };
  std::vector<RingSlot> ring;
  std::vector<std::byte> buf(BlocksToBytes(BitmapBlocks(nseg))), block(kBlockSize);
  for (uint32_t d = 0; d < io_->count(); ++d) {
    if (io_->state(d) != DeviceState::kOk) continue;
    for (uint32_t slot = 0; slot < 2; ++slot) {
      if (!io_->device(d)->Read(Lba(BitmapSlotLba(slot, nseg)), buf).ok()) continue;
      auto seq = DecodeBitmap(buf, &entries);
      if (seq.ok() && (!found || *seq > best_seq)) {
        best = entries;
        best_seq = *seq;
        found = true;
        checkpoint_slot_ = slot;
      }
    }
    for (uint32_t j = 0; j < kJournalBlocks; ++j) {
      if (!io_->device(d)->Read(Lba(2 + 2ull * BitmapBlocks(nseg) + j), block).ok()) continue;
      auto r = DecodeJournal(block);
      if (r.ok() && r->segment < nseg) {
        records.emplace(r->seq, *r);
        ring.push_back({d, j, r->seq});
      }
    }
  }
  if (!found) return Status::Corruption("no valid bitmap checkpoint on any healthy device");
  journal_seq_ = checkpoint_seq_ = best_seq;
  for (auto it = records.upper_bound(best_seq);
       it != records.end() && it->first == journal_seq_ + 1; ++it) {
    best[it->second.segment] = it->second.entry;
    journal_seq_ = it->first;
  }
  // Records past a gap (written without a flush, while an earlier one was lost) were
  // never in force; left in the ring, they would be taken for the new records that reuse
  // their sequence numbers. They are zeroed, durably, before any new record is written.
  std::vector<std::byte> zeros(kBlockSize);
  std::vector<DeviceWrite> clear;
  for (const RingSlot& r : ring) {
    if (r.seq > journal_seq_)
      clear.push_back({r.device, 2 + 2ull * BitmapBlocks(nseg) + r.slot, zeros});
  }
  if (!clear.empty()) {
    io_->Write(clear);
    io_->FlushAll();
  }
  for (uint32_t s = 0; s < nseg; ++s) segments_[s]->entry = best[s];
  ERAID_RETURN_IF_ERROR(RecoverSegmentsLocked());
  // Fold the replayed journal into a checkpoint, and record any device that failed here.
  ERAID_RETURN_IF_ERROR(CheckpointBitmapLocked());
  if (io_->take_failures_changed()) ERAID_RETURN_IF_ERROR(WriteSuperblocksLocked());
  return Status::Ok();
}

// Every segment's chain of summaries is walked at once, in waves: each wave reads the next
// summary of every chain not yet ended, and names all of them to the devices first
// (Prefetch). A chain is serial (where a summary is follows from the one before), but the
// chains are independent: an open then waits on the drives' media once per wave, with a
// wave's reads in flight together, rather than once per summary — which after a cold
// start (nothing in the page cache) was most of its time.
Status ElasticArray::RecoverSegmentsLocked() {
  std::vector<ChainWalk> walks;
  for (uint32_t index = 0; index < segments_.size(); ++index) {
    Segment& seg = *segments_[index];
    seg.Reset();
    if (seg.entry.scheme == SegmentScheme::kFree) continue;
    // A sealed segment's journalled frontier bounds its chain: bytes beyond it (a torn
    // batch that recovery once cut off) must never be adopted later.
    const auto positions = seg.entry.sealed ? seg.entry.frontier
                                            : static_cast<uint32_t>(geometry_.segment_positions());
    // Exact: grown by doubling they kept up to twice the room (per-position state is most
    // of the array's RAM). A sealed segment's CRCs are kept while the CRC cache has room
    // (the others load on their first use); an open one's are needed to finish it.
    if (!seg.entry.sealed || crc_cache_limit_ == 0 ||
        crc_bytes_ + uint64_t{positions} * sizeof(uint32_t) <= crc_cache_limit_) {
      seg.crc.reserve(positions);
      CountCrcLocked(seg);
    }
    seg.is_summary.reserve(positions);
    seg.recovered_tags.reserve(positions);
    walks.push_back({index, positions, 0});
  }
  struct DeviceWave {
    std::vector<size_t> walks;  // indices into `walks`
    std::vector<uint32_t> segments;
    std::vector<Lba> blocks;
    std::vector<std::byte> buf;
    std::vector<bool> ok;
  };
  std::vector<DeviceWave> wave(io_->count());
  std::vector<std::pair<uint32_t, size_t>> where;  // per walk: device, index in its wave
  while (!walks.empty()) {
    where.assign(walks.size(), {UINT32_MAX, 0});
    for (DeviceWave& w : wave) {
      w.walks.clear();
      w.segments.clear();
      w.blocks.clear();
    }
    for (size_t k = 0; k < walks.size(); ++k) {
      const ChainWalk& w = walks[k];
      if (w.pos >= w.positions) continue;  // its bound: the step below ends it unread
      const Place p = geometry_.Primary(SegmentId(w.segment), w.pos);
      DeviceWave& dw = wave[p.device];
      where[k] = {p.device, dw.blocks.size()};
      dw.walks.push_back(k);
      dw.segments.push_back(w.segment);
      dw.blocks.push_back(Lba(p.lba));
    }
    for (uint32_t d = 0; d < io_->count(); ++d) {
      DeviceWave& dw = wave[d];
      dw.buf.resize(BlocksToBytes(dw.blocks.size()));
      io_->ReadBlocks(d, dw.segments, dw.blocks, dw.buf, &dw.ok);
    }
    size_t going = 0;
    for (size_t k = 0; k < walks.size(); ++k) {
      const auto [d, i] = where[k];
      const bool read = d != UINT32_MAX && wave[d].ok[i];
      const std::span<const std::byte> first =
          read ? std::span<const std::byte>(wave[d].buf).subspan(BlocksToBytes(i), kBlockSize)
               : std::span<const std::byte>();
      if (StepChainLocked(&walks[k], first, read)) walks[going++] = walks[k];
    }
    walks.resize(going);
  }
  for (uint32_t index = 0; index < segments_.size(); ++index) {
    Segment& seg = *segments_[index];
    if (seg.entry.scheme == SegmentScheme::kFree) continue;
    // The chain broke before the frontier the journal knows (a sealed segment's, or the
    // one a clean shutdown recorded for an open segment): what followed is unknown.
    if (seg.frontier < seg.entry.frontier) {
      ++stats_.data_loss;
      seg.summaries_lost = true;
    }
    if (!seg.entry.sealed) ERAID_RETURN_IF_ERROR(FinishRecoveredSegmentLocked(SegmentId(index)));
  }
  TrimCrcCacheLocked();
  return Status::Ok();
}

bool ElasticArray::StepChainLocked(ChainWalk* w, std::span<const std::byte> first, bool first_ok) {
  Segment& seg = *segments_[w->segment];
  const SegmentId s(w->segment);
  const uint32_t pos = w->pos;
  Summary summary;
  auto is_summary = [&](std::span<const std::byte> b) {
    auto d = DecodeSummary(b);
    if (!d.ok() || d->segment != w->segment || d->generation != seg.entry.generation ||
        d->position != pos)
      return false;
    summary = std::move(d).value();
    return true;
  };
  // The summary block: the wave's read when it holds one (no copy: 63,000 of them per full
  // 4 x 4 GiB array), else read here, verified or repaired.
  std::vector<std::byte> block;
  std::span<const std::byte> summary_block;
  // The chain ends where no summary of this generation is found: not a loss.
  bool going = pos < w->positions;
  if (going && first_ok && is_summary(first)) {
    summary_block = first;
  } else if (going) {
    block.resize(kBlockSize);
    going = ReadVerifiedLocked(s, pos, block, is_summary, ReadMode::kProbe).ok();
    summary_block = block;
  }
  const auto k = static_cast<uint32_t>(summary.entries.size());
  going = going && pos + 1 + k <= w->positions;
  if (going && !seg.entry.sealed) {  // a batch after the last flush may be torn: check its data
    std::vector<std::byte> data(kBlockSize);
    for (uint32_t i = 0; i < k && going; ++i) {
      const uint32_t want = summary.entries[i].crc;
      going =
          ReadVerifiedLocked(
              s, pos + 1 + i, data, [&](auto b) { return Crc32c(b) == want; }, ReadMode::kNoRepair)
              .ok();
    }
  }
  if (!going) {
    seg.frontier = pos;
    return false;
  }
  const bool keep_crc = seg.crc.capacity() != 0;
  if (keep_crc) seg.crc.push_back(Crc32c(summary_block));
  seg.recovered_tags.emplace_back(0, 0);
  seg.is_summary.push_back(true);
  ++seg.summaries;
  for (const SummaryEntry& e : summary.entries) {
    if (keep_crc) seg.crc.push_back(e.crc);
    seg.recovered_tags.emplace_back(e.tag_lba, e.tag_time);
    seg.is_summary.push_back(false);
  }
  w->pos = pos + 1 + k;
  seg.frontier = w->pos;
  return true;
}

// A segment that was open at the crash: rewrite its rows from the verified blocks (zeros
// beyond the frontier, over whatever unflushed writes left there), with full redundancy,
// then seal it. Only these few segments are read whole at open.
Status ElasticArray::FinishRecoveredSegmentLocked(SegmentId s) {
  ERAID_CHECK(s.value < segments_.size());
  Segment& seg = *segments_[s.value];
  const Scheme& scheme = SchemeFor(seg.entry.scheme);
  const uint64_t rb = geometry_.row_blocks();
  const auto rows = static_cast<uint32_t>((seg.frontier + rb - 1) / rb);
  AlignedBuffer row(BlocksToBytes(rb)), scratch;
  for (uint32_t r = 0; r < rows; ++r) {
    ReadRowLocked(s, r, &row,
                  ReadMode::kRepair);  // a lost block is rewritten as zeros (counted as loss)
    std::vector<DeviceWrite> writes;
    scheme.RowWrites(geometry_, s, r, row, true, &scratch, &writes);
    io_->Write(writes);
  }
  // Rows past the frontier may hold what a torn batch left: clear both slots of them.
  if (rows < geometry_.rows_per_slot) {
    std::vector<DeviceTrim> trims;
    const uint64_t unused = uint64_t{geometry_.rows_per_slot - rows} * geometry_.chunk_blocks;
    for (uint32_t d = 0; d < geometry_.devices; ++d) {
      trims.push_back(
          {d, geometry_.SegmentStart(s) + uint64_t{rows} * geometry_.chunk_blocks, unused});
      trims.push_back({d,
                       geometry_.SegmentStart(s) +
                           uint64_t{geometry_.rows_per_slot + rows} * geometry_.chunk_blocks,
                       unused});
    }
    io_->Trim(trims);
  }
  FlushDevicesLocked();
  if (scheme.has_parity()) {  // the partial rows' mirrors: the parity is durable now
    std::vector<DeviceTrim> trims;
    for (uint32_t d = 0; d < geometry_.devices; ++d)
      trims.push_back({d, geometry_.Slot2Start(s), geometry_.slot_blocks()});
    io_->Trim(trims);
  }
  seg.entry.sealed = true;
  // A frontier recorded at a clean shutdown beyond the chain stays: it is the evidence
  // that blocks are missing, for every later open too.
  seg.entry.frontier = std::max(seg.entry.frontier, seg.frontier);
  return JournalLocked(s.value);
}

Status ElasticArray::RecordOpenFrontiers() {
  std::lock_guard lock(mu_);
  ERAID_RETURN_IF_ERROR(FlushLocked());
  for (uint32_t i = 0; i < segments_.size(); ++i) {
    Segment& seg = *segments_[i];
    if (!seg.open || seg.frontier <= seg.entry.frontier) continue;
    seg.entry.frontier = seg.frontier;
    ERAID_RETURN_IF_ERROR(JournalLocked(i, Durable::kAtNextFlush));
  }
  // Seal records wait for one flush and are durable after the next.
  while (journal_unflushed_ || !seals_awaiting_flush_.empty()) FlushDevicesLocked();
  if (io_->take_failures_changed()) ERAID_RETURN_IF_ERROR(WriteSuperblocksLocked());
  return Status::Ok();
}

}  // namespace eraid
