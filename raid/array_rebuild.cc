// A failed device: failing it, rebuilding onto a new one (Replace) or onto the same
// one back after an outage (ReAdd), and scrubbing every segment's redundancy.
#include <algorithm>
#include <chrono>
#include <optional>

#include "raid/array_internal.h"

namespace eraid {

using namespace raid_format;  // NOLINT: this file implements that format

// ---------------------------------------------------------------- failure and rebuild

Status ElasticArray::FailDevice(DeviceIndex id) {
  const uint32_t device = id.value;
  std::lock_guard lock(mu_);
  if (device >= io_->count()) return Status::InvalidArgument("no device " + std::to_string(device));
  io_->Fail(device);
  io_->take_failures_changed();
  return WriteSuperblocksLocked();
}

Status ElasticArray::Replace(DeviceIndex id, Backend* fresh, uint64_t rate_bytes_per_sec,
                             const std::function<void(const RebuildProgress&)>& progress) {
  const uint32_t device = id.value;
  {
    std::lock_guard lock(mu_);
    ERAID_RETURN_IF_ERROR(CheckRebuildLocked(device, fresh));
    ERAID_RETURN_IF_ERROR(
        fresh->Trim(Lba(0), geometry_.device_blocks_needed()).WithContext("replace: trim"));
  }
  return Rebuild(device, fresh, nullptr, rate_bytes_per_sec, progress, nullptr);
}

Result<ReAddReport> ElasticArray::ReAdd(
    DeviceIndex id, Backend* returning, uint64_t rate_bytes_per_sec,
    const std::function<void(const RebuildProgress&)>& progress) {
  const uint32_t device = id.value;
  std::vector<bool> owed;
  {
    std::lock_guard lock(mu_);
    if (device >= io_->count())
      return Status::InvalidArgument("no device " + std::to_string(device));
    if (io_->state(device) != DeviceState::kFailed) {
      return Status::InvalidArgument("device " + std::to_string(device) +
                                     " is not failed: nothing to re-add");
    }
    ERAID_RETURN_IF_ERROR(CheckRebuildLocked(device, returning));
    if (!changes_->valid(device)) {
      return Status::InvalidArgument(
          "device " + std::to_string(device) +
          " failed before the array was opened: what it lacks is not known; "
          "bring it back with replace (a full rebuild)");
    }
    // Who it is: this array's device `device`, and not an image older than the drive that
    // last joined in that place (a drive replaced since, coming back, would lack all the
    // replacement received).
    std::optional<Superblock> sb;
    std::vector<std::byte> block(kBlockSize);
    for (uint64_t slot = 0; slot < 2; ++slot) {
      if (!returning->Read(Lba(slot), block).ok()) continue;
      auto d = DecodeSuperblock(block);
      if (d.ok() && (!sb || d->generation > sb->generation)) sb = *d;
    }
    const std::string who = "the drive offered as device " + std::to_string(device);
    if (!sb) return Status::InvalidArgument(who + " holds no array superblock: use replace");
    if (sb->array_id != array_id_)
      return Status::InvalidArgument(who + " belongs to another array: use replace");
    if (sb->device_index != device) {
      return Status::InvalidArgument(who + " is device " + std::to_string(sb->device_index) +
                                     " of this array: use replace");
    }
    if (sb->generation < joined_generation_[device] || sb->generation > super_generation_) {
      return Status::InvalidArgument(
          who + " has superblock generation " + std::to_string(sb->generation) +
          ", not one of the drive that left (" + std::to_string(joined_generation_[device]) + ".." +
          std::to_string(super_generation_) + "): use replace");
    }
    owed = changes_->Missing(device);
  }
  ReAddReport report;
  ERAID_RETURN_IF_ERROR(Rebuild(device, returning, &owed, rate_bytes_per_sec, progress, &report));
  return report;
}

Status ElasticArray::CheckRebuildLocked(uint32_t device, Backend* target) const {
  if (device >= io_->count()) return Status::InvalidArgument("no device " + std::to_string(device));
  if (target->capacity_blocks() < geometry_.device_blocks_needed()) {
    return Status::InvalidArgument("the new drive is smaller than the array's devices");
  }
  for (uint32_t d = 0; d < io_->count(); ++d) {
    if (d != device && io_->state(d) != DeviceState::kOk) {
      return Status::Busy("device " + std::to_string(d) + " is not healthy; one rebuild at a time");
    }
  }
  return Status::Ok();
}

Status ElasticArray::Rebuild(uint32_t device, Backend* target, const std::vector<bool>* only,
                             uint64_t rate_bytes_per_sec,
                             const std::function<void(const RebuildProgress&)>& progress,
                             ReAddReport* report) {
  RebuildProgress prog;
  uint64_t start_ns = clock_.NowNanos();
  {
    std::lock_guard lock(mu_);
    ERAID_RETURN_IF_ERROR(CheckRebuildLocked(device, target));
    io_->set_device(device, target);
    io_->set_state(device, DeviceState::kRebuilding);
    io_->set_rebuild_cursor(0);
    // From here every write reaches the device (it is writable while rebuilding), and
    // what it lacked before is rebuilt below: its marks start afresh.
    changes_->Restart(device);
    ERAID_RETURN_IF_ERROR(WriteSuperblocksLocked());
    ERAID_RETURN_IF_ERROR(CheckpointBitmapLocked());
    prog.segments_total = geometry_.segments;
  }
  for (uint32_t i = 0; i < geometry_.segments; ++i) {
    const bool owed = only == nullptr || (*only)[i];
    {
      std::lock_guard lock(mu_);  // segment by segment: user I/O interleaves between them
      // Rows detached while the device was failed skip it; their blocks are rebuilt here
      // from the others, once written there.
      if (!segments_[i]->in_flight.empty()) {
        DrainRows();
        ApplyRowResultsLocked();
      }
      if (io_->state(device) != DeviceState::kRebuilding) return Status::Aborted("rebuild failed");
      const SegmentId s(i);
      if (report != nullptr) CountFullRebuildLocked(device, s, report);
      if (owed && only != nullptr) {
        // What the returning drive holds of this segment is stale or torn: gone first.
        Status st = target->Trim(Lba(geometry_.SegmentStart(s)), geometry_.segment_span_blocks());
        io_->Note(device, st);
        if (!st.ok()) return Status::Aborted("rebuild failed: " + st.ToString());
      }
      if (owed && segments_[i]->entry.scheme != SegmentScheme::kFree) {
        ERAID_RETURN_IF_ERROR(RebuildSegmentLocked(device, s, &prog.bytes_written));
        RebuildOpenRowLocked(device, s, &prog.bytes_written);
        if (report != nullptr) report->segments_resynced += 1;
      }
      io_->set_rebuild_cursor(i + 1);
      prog.segments_done = i + 1;
      if (io_->take_failures_changed()) ERAID_RETURN_IF_ERROR(WriteSuperblocksLocked());
    }
    if (progress && (owed || i + 1 == geometry_.segments)) progress(prog);
    if (rate_bytes_per_sec > 0) {
      uint64_t due_ns = start_ns + prog.bytes_written * 1'000'000'000ull / rate_bytes_per_sec;
      uint64_t now = clock_.NowNanos();
      if (due_ns > now) std::this_thread::sleep_for(std::chrono::nanoseconds(due_ns - now));
    }
  }
  std::lock_guard lock(mu_);
  FlushDevicesLocked();
  if (io_->state(device) != DeviceState::kRebuilding) return Status::Aborted("rebuild failed");
  io_->set_state(device, DeviceState::kOk);
  ERAID_RETURN_IF_ERROR(WriteSuperblocksLocked());
  joined_generation_[device] = super_generation_;
  if (report != nullptr) report->resynced_bytes = prog.bytes_written;
  return Status::Ok();
}

void ElasticArray::CountFullRebuildLocked(uint32_t device, SegmentId s, ReAddReport* report) const {
  ERAID_CHECK(device < io_->count() && s.value < segments_.size());
  const Segment& seg = *segments_[s.value];
  if (seg.entry.scheme == SegmentScheme::kFree) return;
  const uint64_t rb = geometry_.row_blocks();
  const uint64_t done_rows = seg.open ? seg.row : (seg.frontier + rb - 1) / rb;
  AlignedBuffer zeros(BlocksToBytes(rb)), scratch;
  for (uint32_t r = 0; r < done_rows; ++r) {
    std::vector<DeviceWrite> writes;
    SchemeFor(seg.entry.scheme).RowWrites(geometry_, s, r, zeros, true, &scratch, &writes);
    for (const auto& w : writes) report->total_bytes += w.device == device ? w.data.size() : 0;
  }
  report->segments_total += 1;
}

Status ElasticArray::RebuildSegmentLocked(uint32_t device, SegmentId s, uint64_t* written) {
  ERAID_CHECK(device < io_->count() && s.value < segments_.size());
  Segment& seg = *segments_[s.value];
  const uint64_t rb = geometry_.row_blocks();
  io_->FlashAllocAll(geometry_.SegmentStart(s), geometry_.segment_span_blocks());
  // The whole segment at once: its rows read together (every device busy, not one block
  // in flight at a time), then the lost device's share of every row written together.
  const auto rows_n = static_cast<uint32_t>(seg.open ? seg.row : (seg.frontier + rb - 1) / rb);
  AlignedBuffer rows(BlocksToBytes(uint64_t{rows_n} * rb));
  std::vector<uint32_t> unreadable;
  if (ReadRowsLocked(s, 0, rows_n, &rows, ReadMode::kNoRepair, &unreadable) > 0) {
    const auto r =
        std::find_if(unreadable.begin(), unreadable.end(), [](uint32_t u) { return u > 0; }) -
        unreadable.begin();
    return Status::DataLoss("rebuild: segment " + std::to_string(s.value) + " row " +
                            std::to_string(r) + " cannot be reconstructed");
  }
  std::vector<AlignedBuffer> scratch(rows_n);  // parity, alive until written
  std::vector<DeviceWrite> mine;
  for (uint32_t r = 0; r < rows_n; ++r) {
    std::vector<DeviceWrite> writes;
    const std::span<const std::byte> row(rows.data() + BlocksToBytes(uint64_t{r} * rb),
                                         BlocksToBytes(rb));
    SchemeFor(seg.entry.scheme).RowWrites(geometry_, s, r, row, true, &scratch[r], &writes);
    for (const auto& w : writes) {
      if (w.device == device) mine.push_back(w);
    }
  }
  io_->Write(mine);
  for (const auto& w : mine) *written += w.data.size();
  return Status::Ok();
}

void ElasticArray::RebuildOpenRowLocked(uint32_t device, SegmentId s, uint64_t* written) {
  ERAID_CHECK(device < io_->count() && s.value < segments_.size());
  const Segment& seg = *segments_[s.value];
  if (!seg.open || seg.row_synced == 0) return;
  // The flushed part of the open row, both copies.
  const uint64_t row_start = uint64_t{seg.row} * geometry_.row_blocks();
  std::vector<DeviceWrite> mine;
  for (uint64_t pos = row_start; pos < row_start + seg.row_synced; ++pos) {
    std::span<const std::byte> data(seg.row_buf.data() + BlocksToBytes(pos - row_start),
                                    kBlockSize);
    for (Place p : {geometry_.Primary(s, pos), geometry_.Mirror(s, pos)}) {
      if (p.device == device) mine.push_back({p.device, p.lba, data});
    }
  }
  io_->Write(mine);
  for (const auto& w : mine) *written += w.data.size();
}

Result<ScrubReport> ElasticArray::Scrub() {
  std::lock_guard lock(mu_);
  DrainRows();  // rows still on their way would read as mismatches
  ApplyRowResultsLocked();
  ScrubReport report;
  const ArrayStats before = stats_;
  const uint64_t rb = geometry_.row_blocks();
  for (uint32_t i = 0; i < segments_.size(); ++i) {
    Segment& seg = *segments_[i];
    if (seg.entry.scheme == SegmentScheme::kFree || seg.open) continue;
    const SegmentId s(i);
    ++report.segments;
    report.blocks_checked += seg.frontier;
    const Scheme& scheme = SchemeFor(seg.entry.scheme);
    // The whole segment at once, as a rebuild reads it: every row's data (each device's
    // share in one batch, all devices together; what does not verify is repaired), then
    // every readable row's redundancy as the scheme would write it, read back in one
    // batch and compared. A remote drive answers a segment in a few round trips, not two
    // or more per row.
    const auto rows_n = static_cast<uint32_t>((seg.frontier + rb - 1) / rb);
    AlignedBuffer rows(BlocksToBytes(uint64_t{rows_n} * rb));
    std::vector<uint32_t> unreadable;  // counted as unrepairable (stats_.data_loss)
    ReadRowsLocked(s, 0, rows_n, &rows, ReadMode::kRepair, &unreadable);
    std::vector<AlignedBuffer> scratch(rows_n);  // parity, alive until compared or written
    std::vector<std::vector<DeviceWrite>> expected(rows_n);
    std::vector<BlockRead> reads;
    std::vector<uint32_t> row_of;        // reads[k] checks a block of row row_of[k]
    std::vector<const std::byte*> want;  // against these bytes
    for (uint32_t r = 0; r < rows_n; ++r) {
      if (unreadable[r] > 0) continue;
      const std::span<const std::byte> row(rows.data() + BlocksToBytes(uint64_t{r} * rb),
                                           BlocksToBytes(rb));
      scheme.RowWrites(geometry_, s, r, row, /*with_data=*/false, &scratch[r], &expected[r]);
      for (const DeviceWrite& w : expected[r]) {
        for (uint64_t b = 0; b < BytesToBlocks(w.data.size()); ++b) {
          reads.push_back({w.device, w.lba + b, {}});
          row_of.push_back(r);
          want.push_back(w.data.data() + BlocksToBytes(b));
        }
      }
    }
    AlignedBuffer stored(BlocksToBytes(reads.size()));
    for (size_t k = 0; k < reads.size(); ++k)
      reads[k].out = {stored.data() + BlocksToBytes(k), kBlockSize};
    std::vector<bool> ok;
    io_->ReadAcross(s.value, reads, &ok);
    std::vector<bool> agrees(rows_n, true);
    for (size_t k = 0; k < reads.size(); ++k) {  // a device that is down: nothing to compare
      if (ok[k] && std::memcmp(reads[k].out.data(), want[k], kBlockSize) != 0)
        agrees[row_of[k]] = false;
    }
    for (uint32_t r = 0; r < rows_n; ++r) {
      if (agrees[r]) continue;
      ++(scheme.has_parity() ? report.parity_mismatches : report.mirror_mismatches);
      if (report.findings.size() < 16) {
        report.findings.push_back("segment " + std::to_string(i) + " row " + std::to_string(r) +
                                  ": " + SchemeName(seg.entry.scheme) +
                                  " redundancy disagrees with the data");
      }
      io_->Write(expected[r]);
      ++report.repaired;
    }
  }
  FlushDevicesLocked();
  report.crc_mismatches = stats_.crc_mismatches - before.crc_mismatches;
  report.repaired += stats_.repairs - before.repairs;
  report.unrepairable = stats_.data_loss - before.data_loss;
  if (io_->take_failures_changed()) ERAID_RETURN_IF_ERROR(WriteSuperblocksLocked());
  return report;
}

}  // namespace eraid
