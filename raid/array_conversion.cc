// Converting a sealed segment between RAID5 and RAID10 while the array serves.
//
// User I/O goes on during a conversion: the segment is sealed (its data does not change),
// the new redundancy goes where the old scheme keeps nothing, and the copying holds the
// array lock only shared, a chunk of blocks at a time. What could change meanwhile is
// checked under the lock before every block, chunk and the flip: the segment freed (and
// maybe reborn), or a device failing or being rebuilt (the new redundancy would then miss
// a device): the conversion stops with Busy, and what it wrote stays unused (a later
// conversion or free overwrites it).
//
// The steps (never an update in place; docs/raid.md):
//   1. build the new redundancy beside the old, from verified data, a row at a time;
//   2. flush: the new redundancy is durable before the flip;
//   3. flip the segment's entry (journalled) and flush again;
//   4. trim the old redundancy.
#include "common/crc32c.h"
#include "raid/array_internal.h"

namespace eraid {

using namespace raid_format;  // NOLINT: this file implements that format

class ElasticArray::Conversion {
 public:
  Conversion(ElasticArray& array, SegmentId s, SegmentScheme to)
      : a_(array), s_(s), to_(to), rb_(array.geometry_.row_blocks()) {}

  Status Run() {
    ERAID_ASSIGN_OR_RETURN(const bool work, Begin());
    if (!work) return Status::Ok();
    for (uint32_t r = 0; r < rows_; ++r) {
      if (Status st = ReadRow(r); !st.ok()) return st;
      if (Status st = WriteRedundancy(r); !st.ok()) return st;
    }
    return FlipAndDrop();
  }

 private:
  // Under the exclusive lock: whether there is anything to do; if so the segment is
  // marked as converting (the mark is dropped by Finish, on every way out after this).
  Result<bool> Begin() {
    std::lock_guard lock(a_.mu_);
    if (s_.value >= a_.segments_.size()) return Status::InvalidArgument("no such segment");
    Segment& seg = *a_.segments_[s_.value];
    if (seg.entry.scheme == SegmentScheme::kFree) return Status::InvalidArgument("segment is free");
    if (seg.open) return Status::Busy("segment is open; seal it first");
    if (seg.converting) return Status::Busy("segment is being converted already");
    from_ = seg.entry.scheme;
    if (from_ == to_) return false;
    if (!seg.in_flight.empty()) {  // the seal's last row: the copying reads it from the devices
      a_.DrainRows();
      a_.ApplyRowResultsLocked();
    }
    // Trims that wait for a flush must not meet the redundancy written below; and a seal
    // that waits for one is written first, so that the flip below is the segment's newest
    // record (a bitmap checkpoint records a segment whose seal waits as it was before).
    // The device states are taken before: a device that fails in that flush stops the
    // conversion (Busy) like one that fails during it.
    states_ = DeviceStates();
    if (a_.unmirror_awaiting_flush_.count(s_.value) || a_.seals_awaiting_flush_.count(s_.value))
      a_.FlushDevicesLocked();
    // The copying reads the CRCs across lock drops: resident, and kept (converting).
    ERAID_RETURN_IF_ERROR(a_.LoadCrcsLocked(s_).WithContext("convert"));
    seg.converting = true;
    seg_ = &seg;
    incarnation_ = seg.incarnation;
    rows_ = static_cast<uint32_t>((seg.frontier + rb_ - 1) / rb_);
    row_ = AlignedBuffer(BlocksToBytes(rb_));
    stored_.resize(rb_);
    device_writes_.assign(a_.io_->count(), 0);
    return true;
  }

  std::vector<DeviceState> DeviceStates() const {
    std::vector<DeviceState> v;
    for (uint32_t d = 0; d < a_.io_->count(); ++d) v.push_back(a_.io_->state(d));
    return v;
  }

  // Under the lock, shared or not: the segment is still the one being converted, and no
  // device changed state. Per block, so without allocating.
  bool Unchanged() const {
    if (seg_->incarnation != incarnation_) return false;
    for (uint32_t d = 0; d < a_.io_->count(); ++d) {
      if (a_.io_->state(d) != states_[d]) return false;
    }
    return true;
  }

  // Under the exclusive lock: the same, as a Status that stops the conversion.
  Status Still() {
    if (a_.io_->take_failures_changed()) ERAID_RETURN_IF_ERROR(a_.WriteSuperblocksLocked());
    if (seg_->incarnation != incarnation_)
      return Status::InvalidArgument("segment was freed during the conversion");
    if (DeviceStates() != states_)
      return Status::Busy("a device changed state during the conversion");
    return Status::Ok();
  }

  // Under the exclusive lock: what was met and done under the shared one, into the array.
  void Account() {
    for (auto& [d, st] : errors_) a_.io_->Note(d, st);
    errors_.clear();
    for (uint32_t d = 0; d < a_.io_->count(); ++d)
      a_.io_->CountWrites(d, std::exchange(device_writes_[d], 0));
    a_.stats_.conversion_bytes += std::exchange(written_bytes_, 0);
  }

  // Under the exclusive lock; the flag is ours even if the segment was reborn.
  Status Finish(Status st) {
    seg_->converting = false;
    return st;
  }

  // Step 1, reading: row r's blocks into row_, each verified against its CRC, and the
  // form its drive stores it in (StoredBlock): where the new redundancy is a copy
  // (RAID10's mirrors), the copy's drive stores that record as it is, without
  // compressing it again, as a drive's copy offload would.
  //
  // Reads run without the array lock, a chunk at a time, and are checked under it
  // (shared) afterwards: user I/O goes on beside them. Whatever could change what they
  // touch takes the lock exclusively: freeing the segment, a device failing or being
  // replaced, any write to the segment. (Under the exclusive lock throughout, a 192 KiB
  // row at a time, a conversion at 100 MB/s cost user reads 38% and writes 28% of their
  // IOPS.)
  Status ReadRow(uint32_t r) {
    std::fill(row_.begin(), row_.end(), std::byte{0});
    for (StoredBlock& b : stored_) b.bytes.clear();  // beyond the frontier: zeros, no stored form
    const uint64_t row_end = std::min<uint64_t>(rb_, seg_->frontier - uint64_t{r} * rb_);
    for (uint64_t i = 0; i < row_end;) {
      // Up to a chunk of blocks at a time: with the shared lock taken per block, a waiting
      // writer was woken on every release, and the lock's traffic was ~40% of the
      // converting thread's time (perf, randwrite beside a 100 MB/s conversion).
      const uint64_t end = std::min<uint64_t>(row_end, i + a_.geometry_.chunk_blocks);
      i = ReadVerified(r, i, end);
      if (i == end) continue;
      // Block i did not verify (or could not be read, or something changed): read again
      // under the exclusive lock, through the path that reconstructs and repairs it.
      ERAID_RETURN_IF_ERROR(ReadRepairing(r, i));
      ++i;
    }
    return Status::Ok();
  }

  // Reads blocks [i, end) of row r; returns where it stopped (end if every block was read
  // and verified). The blocks are read together, a batch per device (a chunk's blocks are
  // on one), and without the array lock: what was read counts only if, under the lock
  // again, the segment is still the one being converted and no device changed state (else
  // ReadRepairing's Still() stops the conversion). Read one after another under the shared
  // lock, on drives with a timing model, they held every writer waiting for it for sixteen
  // read latencies (randwrite at 114 IOPS beside a conversion, against 1.5k without).
  uint64_t ReadVerified(uint32_t r, uint64_t i, uint64_t end) {
    places_.clear();
    {
      std::shared_lock lock(a_.mu_);
      if (!Unchanged()) return i;
      for (uint64_t b = i; b < end; ++b) {
        const Place p = a_.geometry_.Primary(s_, static_cast<uint32_t>(r * rb_ + b));
        if (a_.io_->state(p.device) != DeviceState::kOk) break;
        places_.push_back(p);
      }
    }
    results_.assign(places_.size(), Status());
    for (size_t k = 0; k < places_.size();) {
      size_t e = k + 1;
      while (e < places_.size() && places_[e].device == places_[k].device) ++e;
      lbas_.clear();
      for (size_t j = k; j < e; ++j) lbas_.push_back(Lba(places_[j].lba));
      const uint32_t d = places_[k].device;
      a_.io_->ReadStoredUnlocked(
          d, lbas_, std::span(row_).subspan(BlocksToBytes(i + k), BlocksToBytes(e - k)),
          std::span(stored_).subspan(i + k, e - k), std::span(results_).subspan(k, e - k));
      a_.fast_reads_[d].fetch_add(e - k, std::memory_order_relaxed);
      k = e;
    }
    std::shared_lock lock(a_.mu_);
    if (!Unchanged()) return i;
    for (size_t k = 0; k < places_.size(); ++k) {
      const uint64_t b = i + k;
      if (!results_[k].ok()) {
        errors_.emplace_back(places_[k].device, std::move(results_[k]));
        return b;
      }
      const std::span<const std::byte> block(row_.data() + BlocksToBytes(b), kBlockSize);
      if (Crc32c(block) != seg_->crc[static_cast<uint32_t>(r * rb_ + b)]) return b;
    }
    return i + places_.size();
  }

  Status ReadRepairing(uint32_t r, uint64_t i) {
    const auto pos = static_cast<uint32_t>(r * rb_ + i);
    std::span<std::byte> out(row_.data() + BlocksToBytes(i), kBlockSize);
    stored_[i].bytes.clear();
    std::lock_guard lock(a_.mu_);
    Account();
    if (Status st = Still(); !st.ok()) return Finish(st);
    const uint32_t want = seg_->crc[pos];
    if (!a_.ReadVerifiedLocked(
               s_, pos, out, [&](auto b) { return Crc32c(b) == want; }, ReadMode::kRepair)
             .ok()) {
      return Finish(Status::DataLoss("convert: segment " + std::to_string(s_.value) + " position " +
                                     std::to_string(pos) + ": no copy matches its CRC"));
    }
    return Status::Ok();
  }

  // Step 1, writing: row r's new redundancy, a write per hold of the shared lock.
  Status WriteRedundancy(uint32_t r) {
    writes_.clear();
    SchemeFor(to_).RowWrites(a_.geometry_, s_, r, row_, false, &scratch_, &writes_);
    for (const DeviceWrite& w : writes_) {
      const bool stop = !WriteShared(w);
      if (stop || !errors_.empty()) {
        std::lock_guard lock(a_.mu_);
        Account();
        if (Status st = Still(); !st.ok()) return Finish(st);
      }
    }
    return Status::Ok();
  }

  // False if something changed (nothing written then).
  bool WriteShared(const DeviceWrite& w) {
    std::shared_lock lock(a_.mu_);
    if (!Unchanged()) return false;
    a_.changes_->Mark(w.device, w.lba, BytesToBlocks(w.data.size()));
    if (!a_.io_->writable(w.device)) return true;
    // A write of the row's own blocks (a copy) carries their stored forms.
    std::span<const StoredBlock> forms;
    if (w.data.data() >= row_.data() && w.data.data() < row_.data() + row_.size()) {
      forms = std::span(stored_).subspan(BytesToBlocks(w.data.data() - row_.data()),
                                         BytesToBlocks(w.data.size()));
    }
    Status st = a_.io_->device(w.device)->WriteStored(Lba(w.lba), w.data, forms);
    a_.changes_->Mark(w.device, w.lba, BytesToBlocks(w.data.size()));
    ++device_writes_[w.device];
    written_bytes_ += w.data.size();
    if (!st.ok()) errors_.emplace_back(w.device, std::move(st));
    return true;
  }

  // Steps 2-4. Each device flush runs without the array lock, as Flush()'s does: under
  // it, even shared, a drive flush (milliseconds) kept every appending writer out, twice
  // per segment. What it must cover was written before the device set is taken; what may
  // change meanwhile (the segment freed, a device failing) is checked again under the
  // exclusive lock, which is held only to flip the entry and write its journal record,
  // and then to trim. The segment stays marked as converting until then, so no other
  // conversion of it can meet the trims.
  // A checkpoint written before a flush is durable after it, as after Flush(): without
  // this, a loop of conversions (with no user flush) filled the journal ring, and the
  // ring's own flush and checkpoint then ran under the exclusive lock, stalling writers.
  Status FlipAndDrop() {
    uint64_t flushed_checkpoint = 0;
    std::vector<Backend*> devices;
    {
      std::shared_lock lock(a_.mu_);
      if (Unchanged()) {  // else Still() below stops the conversion
        flushed_checkpoint = a_.pending_checkpoint_seq_;
        devices = a_.io_->WritableDevices();
      }
    }
    if (!devices.empty()) a_.io_->FlushDevices(devices, &errors_);
    std::vector<DeviceTrim> trims;
    {
      std::lock_guard lock(a_.mu_);
      if (errors_.empty()) a_.PromoteCheckpointLocked(flushed_checkpoint);
      Account();
      if (Status st = Still(); !st.ok()) return Finish(st);
      seg_->entry.scheme = to_;
      if (Status st = a_.JournalLocked(s_.value, Durable::kAtNextFlush); !st.ok())
        return Finish(st);
      SchemeFor(from_).RedundancyTrims(a_.geometry_, s_, &trims);
    }
    bool flipped_durably = false;  // then the old redundancy may go
    devices.clear();
    {
      std::shared_lock lock(a_.mu_);
      flushed_checkpoint = a_.pending_checkpoint_seq_;
      if (seg_->incarnation == incarnation_) {  // else freed: the free's own trims cover these
        devices = a_.io_->WritableDevices();
        flipped_durably = true;
      }
    }
    if (flipped_durably) a_.io_->FlushDevices(devices, &errors_);
    std::lock_guard lock(a_.mu_);
    if (flipped_durably && errors_.empty()) a_.PromoteCheckpointLocked(flushed_checkpoint);
    Account();
    if (flipped_durably && seg_->incarnation == incarnation_) a_.io_->Trim(trims);
    ++(to_ == SegmentScheme::kRaid10 ? a_.stats_.conversions_to_raid10
                                     : a_.stats_.conversions_to_raid5);
    if (a_.io_->take_failures_changed()) ERAID_RETURN_IF_ERROR(Finish(a_.WriteSuperblocksLocked()));
    return Finish(Status::Ok());
  }

  ElasticArray& a_;
  const SegmentId s_;
  const SegmentScheme to_;
  const uint64_t rb_;
  SegmentScheme from_ = SegmentScheme::kFree;
  Segment* seg_ = nullptr;
  uint64_t incarnation_ = 0;
  uint32_t rows_ = 0;
  std::vector<DeviceState> states_;  // when it began
  AlignedBuffer row_, scratch_;
  std::vector<StoredBlock> stored_;
  std::vector<Place> places_;  // ReadVerified's batch
  std::vector<Lba> lbas_;
  std::vector<Status> results_;
  std::vector<DeviceWrite> writes_;
  // Met and done under the shared lock, for Account().
  std::vector<std::pair<uint32_t, Status>> errors_;
  std::vector<uint64_t> device_writes_;
  uint64_t written_bytes_ = 0;
};

Status ElasticArray::Convert(SegmentId s, SegmentScheme to) {
  if (to == SegmentScheme::kFree) return Status::InvalidArgument("convert to raid5 or raid10");
  return Conversion(*this, s, to).Run();
}

}  // namespace eraid
