// Full rows written outside the array lock (Append queues them; a writer thread or the
// appending threads write them), and flushes.
#include "common/thread_priority.h"
#include "raid/array_internal.h"

namespace eraid {

using namespace raid_format;  // NOLINT: this file implements that format

using namespace array_internal;

// ---------------------------------------------------------------- rows outside the lock

void ElasticArray::DetachRowLocked(uint32_t index, bool last) {
  ERAID_CHECK(index < segments_.size() && segments_[index]->open);
  Segment& seg = *segments_[index];
  (void)CloseBatchLocked(index);  // the summary of the open batch lies in this row
  auto row = std::make_shared<PendingRow>();
  row->segment = index;
  row->row = seg.row;
  row->scheme = seg.entry.scheme;
  row->seq = ++rows_detached_;
  for (uint32_t d = 0; d < io_->count(); ++d) row->writable_mask |= uint32_t{io_->writable(d)} << d;
  row->buf = std::move(seg.row_buf);
  if (last) {  // a seal's: the rest is SealLocked's
    seg.row_buf = AlignedBuffer();
  } else if (!spare_row_bufs_.empty()) {
    // The next row's buffer: a spare as it is. Nothing reads past the frontier, and a
    // seal zeroes the tail of the last row before writing it.
    seg.row_buf = std::move(spare_row_bufs_.back());
    spare_row_bufs_.pop_back();
  } else {
    seg.row_buf = AlignedBuffer(BlocksToBytes(geometry_.row_blocks()));
  }
  if (SchemeFor(seg.entry.scheme).has_parity() && seg.row_synced > 0)
    seg.rows_to_unmirror.push_back(seg.row);
  if (!last) {
    ++seg.row;
    seg.row_synced = 0;
  }
  seg.in_flight.push_back(row);
  std::lock_guard lock(rows_mu_);
  rows_unfinished_.insert(row->seq);
  queued_rows_.push_back(std::move(row));
  rows_queued_.fetch_add(1, std::memory_order_release);
}

void ElasticArray::WriteRow(PendingRow& row) {
  AlignedBuffer scratch;
  std::vector<DeviceWrite> writes;
  SchemeFor(row.scheme)
      .RowWrites(geometry_, SegmentId(row.segment), row.row, row.buf, true, &scratch, &writes);
  for (const DeviceWrite& w : writes) changes_->Mark(w.device, w.lba, BytesToBlocks(w.data.size()));
  std::erase_if(writes,
                [&](const DeviceWrite& w) { return (row.writable_mask >> w.device & 1) == 0; });
  const std::span<const std::byte> base(row.buf.data(), row.buf.size());
  io_->WriteUnlocked(writes, &row.results,
                     row_codec_ ? PackRow(*row_codec_, base, writes) : nullptr, base);
}

std::shared_ptr<const PackedBlocks> ElasticArray::PackRow(const CodecConfig& codec,
                                                          std::span<const std::byte> base,
                                                          const std::vector<DeviceWrite>& writes) {
  // Every block of the row that some write stores (a RAID10 row's data: twice), once;
  // the parity, computed into a scratch buffer, is left to its drive.
  auto packed = std::make_shared<PackedBlocks>(codec, BytesToBlocks(base.size()));
  std::vector<bool> done(packed->sizes.size(), false);
  for (const DeviceWrite& w : writes) {
    if (!Inside(w.data, base)) continue;
    const uint64_t first = BytesToBlocks(static_cast<uint64_t>(w.data.data() - base.data()));
    for (uint64_t b = first; b < first + BytesToBlocks(w.data.size()); ++b) {
      if (done[b]) continue;
      packed->sizes[b] = CompressBlock(codec, base.data() + BlocksToBytes(b), packed->payload(b));
      done[b] = true;
      packed_blocks_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  return packed;
}

void RowBatch::Write() {
  rows_ = 0;
  array_.WriteQueuedRows();
}

void RowBatch::WriteAndWait() {
  rows_ = 0;
  array_.DrainRows();
}

void ElasticArray::WriteQueuedRows() {
  // Most writes fill no row: they pass without taking rows_mu_.
  const size_t queued = rows_queued_.load(std::memory_order_acquire);
  if (queued == 0) return;
  if (row_writer_on_.load(std::memory_order_relaxed) && queued <= kRowWriterBacklog) {
    // The row was queued under rows_mu_ and the writer tests the queue under it before
    // it sleeps, so this wake-up cannot be lost.
    rows_work_cv_.notify_one();
    return;
  }
  WriteRowsHere();
}

void ElasticArray::StartRowWriter() {
  std::lock_guard lock(rows_mu_);
  if (row_writer_.joinable()) return;
  row_writer_ = std::thread([this] { RowWriterLoop(); });
  row_writer_on_.store(true, std::memory_order_relaxed);
}

void ElasticArray::RowWriterLoop() {
  NameThisThread("eraid-rows");
  for (;;) {
    {
      std::unique_lock lock(rows_mu_);
      rows_work_cv_.wait(lock, [&] { return row_writer_stop_ || !queued_rows_.empty(); });
      if (row_writer_stop_) return;  // the destructor writes what is left
    }
    row_writer_rows_.fetch_add(WriteRowsHere(), std::memory_order_relaxed);
  }
}

size_t ElasticArray::WriteRowsHere() {
  size_t written = 0;
  while (rows_queued_.load(std::memory_order_acquire) > 0) {
    std::shared_ptr<PendingRow> row;
    {
      std::lock_guard lock(rows_mu_);
      if (queued_rows_.empty()) return written;
      row = std::move(queued_rows_.front());
      queued_rows_.pop_front();
      rows_queued_.fetch_sub(1, std::memory_order_relaxed);
    }
    WriteRow(*row);
    row->written.store(true, std::memory_order_release);
    {
      std::lock_guard lock(rows_mu_);
      rows_unfinished_.erase(row->seq);
      rows_finished_.push_back(std::move(row));
      rows_to_apply_.store(true, std::memory_order_release);
    }
    rows_cv_.notify_all();
    ++written;
  }
  return written;
}

void ElasticArray::DrainRows(uint64_t upto) {
  (void)WriteRowsHere();
  std::unique_lock lock(rows_mu_);
  rows_cv_.wait(lock, [&] { return rows_unfinished_.empty() || *rows_unfinished_.begin() > upto; });
}

void ElasticArray::ApplyRowResultsLocked() {
  if (!rows_to_apply_.load(std::memory_order_acquire)) return;
  std::vector<std::shared_ptr<PendingRow>> done;
  {
    std::lock_guard lock(rows_mu_);
    done.swap(rows_finished_);
    rows_to_apply_.store(false, std::memory_order_relaxed);
  }
  for (auto& row : done) {
    for (auto& [d, st] : row->results) {
      io_->CountWrites(d, 1);
      io_->Note(d, st);
    }
    auto& in_flight = segments_[row->segment]->in_flight;
    std::erase(in_flight, row);
    if (spare_row_bufs_.size() < 16) spare_row_bufs_.push_back(std::move(row->buf));
  }
}

const std::byte* ElasticArray::UnwrittenBlockLocked(const Segment& seg, uint32_t pos) const {
  const uint64_t rb = geometry_.row_blocks();
  const uint64_t row_start = uint64_t{seg.row} * rb;
  if (seg.open && pos >= row_start) return seg.row_buf.data() + BlocksToBytes(pos - row_start);
  for (const auto& row : seg.in_flight) {
    if (pos / rb == row->row && !row->written.load(std::memory_order_acquire)) {
      return row->buf.data() + BlocksToBytes(pos % rb);
    }
  }
  return nullptr;
}

Status ElasticArray::PrepareFlushLocked() {
  for (uint32_t i = 0; i < segments_.size(); ++i) {
    Segment& seg = *segments_[i];
    if (!seg.open) continue;
    ERAID_RETURN_IF_ERROR(CloseBatchLocked(i));
    // The partial row's new blocks go to both slots: durable and redundant, no parity yet.
    const uint64_t row_start = uint64_t{seg.row} * geometry_.row_blocks();
    std::vector<DeviceWrite> writes;
    for (uint64_t pos = row_start + seg.row_synced; pos < seg.frontier; ++pos) {
      std::span<const std::byte> data(seg.row_buf.data() + BlocksToBytes(pos - row_start),
                                      kBlockSize);
      Place p = geometry_.Primary(SegmentId(i), pos), m = geometry_.Mirror(SegmentId(i), pos);
      writes.push_back({p.device, p.lba, data});
      writes.push_back({m.device, m.lba, data});
      if (SchemeFor(seg.entry.scheme).has_parity()) ++stats_.mirrored_partial_blocks;
    }
    io_->Write(writes);
    seg.row_synced = static_cast<uint32_t>(seg.frontier - row_start);
    // Rows completed since they were flushed part-full: once this flush has made their
    // parity durable, their slot-2 copies can go.
    for (uint32_t row : seg.rows_to_unmirror) {
      for (uint32_t j = 0; j < geometry_.data_devices(); ++j) {
        Place m = geometry_.Mirror(SegmentId(i), geometry_.PositionOf(row, j, 0));
        unmirror_awaiting_flush_[i].push_back(
            {flush_epoch_, {m.device, m.lba, geometry_.chunk_blocks}});
      }
    }
    seg.rows_to_unmirror.clear();
  }
  return Status::Ok();
}

Status ElasticArray::FlushLocked() {
  ERAID_RETURN_IF_ERROR(PrepareFlushLocked());
  FlushDevicesLocked();
  if (io_->take_failures_changed()) ERAID_RETURN_IF_ERROR(WriteSuperblocksLocked());
  if (io_->failed_count() >= io_->count()) return Status::IoError("every device has failed");
  return Status::Ok();
}

Status ElasticArray::Flush() {
  // The device flush, which takes milliseconds on drive files, runs without the array
  // lock: appends, reads and conversions go on beside it. What it must cover is in the
  // devices' queues before it starts (PrepareFlushLocked); what waits for a flush (trims
  // of freed segments and of slot-2 copies, seal records, a checkpoint) is completed
  // afterwards only if it was queued before it began (its epoch).
  // Full rows detached before it are written (or waited for) first, outside the lock.
  FlushSnapshot snap;
  std::vector<Backend*> devices;
  uint64_t rows_upto = 0;
  {
    std::lock_guard lock(mu_);
    ERAID_RETURN_IF_ERROR(PrepareFlushLocked());
    snap.epoch = flush_epoch_++;
    snap.pending_checkpoint = pending_checkpoint_seq_;
    snap.journal_seq = journal_seq_;
    rows_upto = rows_detached_;
    devices = io_->WritableDevices();
  }
  DrainRows(rows_upto);
  std::vector<std::pair<uint32_t, Status>> errors;
  io_->FlushDevices(devices, &errors);
  std::lock_guard lock(mu_);
  ApplyRowResultsLocked();
  for (auto& [d, st] : errors) io_->Note(d, st);
  FinishFlushLocked(snap);
  if (io_->take_failures_changed()) ERAID_RETURN_IF_ERROR(WriteSuperblocksLocked());
  if (io_->failed_count() >= io_->count()) return Status::IoError("every device has failed");
  return Status::Ok();
}

}  // namespace eraid
