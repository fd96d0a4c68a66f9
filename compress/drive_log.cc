// The flash log of the drive: the map, append streams and their erase units, page
// writes, flushes and checkpoints.
#include <algorithm>
#include <cstring>

#include "common/check.h"
#include "common/crash_point.h"
#include "common/crc32c.h"
#include "common/encoding.h"
#include "compress/drive_internal.h"

namespace eraid {

using namespace drive_format;  // NOLINT: this file implements that format
using namespace drive_internal;

// ---------------------------------------------------------------- internals

void CompressedDrive::UnmapLocked(uint64_t lba, uint64_t by_seq) {
  uint64_t loc = map_.Get(lba);
  map_.Set(lba, kUnmapped);
  if (loc == kUnmapped || loc == kLostBlock) return;
  ERAID_CHECK(LocOffset(loc) >= BlocksToBytes(data_start_block_));
  const uint64_t index = (LocOffset(loc) - BlocksToBytes(data_start_block_)) / eu_bytes_;
  ERAID_CHECK(index < num_eus_);
  Eu& eu = eus_[index];
  ERAID_CHECK(eu.live_bytes >= LocLength(loc));  // invariant 4: live bytes are the mapped ones
  eu.live_bytes -= LocLength(loc);
  eu.max_superseded_by = std::max(eu.max_superseded_by, by_seq);
  stats_.live_bytes -= LocLength(loc);
  live_bytes_.store(stats_.live_bytes, std::memory_order_release);
  --stats_.mapped_blocks;
}

uint32_t CompressedDrive::StreamForLocked(uint64_t lba) {
  if (ranges_.empty()) return kUserStream;
  auto it = ranges_.upper_bound(lba);
  if (it == ranges_.begin()) return kUserStream;
  --it;
  if (lba >= it->second.first) return kUserStream;
  streams_[it->second.second].last_use = ++use_clock_;
  return it->second.second;
}

void CompressedDrive::CloseRangeLocked(
    std::map<uint64_t, std::pair<uint64_t, uint32_t>>::iterator it) {
  uint32_t stream = it->second.second;
  // Sealing writes the EU's last partial page; if that fails the data stays in the
  // stream's buffer only until the next flush reports the error, so record it there.
  if (streams_[stream].eu >= 0) (void)SealLocked(stream);
  streams_[stream].active = false;
  ranges_.erase(it);
}

Status CompressedDrive::WritePagesLocked(Stream& s, bool include_partial) {
  const Eu& eu = eus_[static_cast<size_t>(s.eu)];
  const uint64_t first_page = s.synced_bytes / kBlockSize;
  const uint64_t full_end = eu.write_ptr / kBlockSize;
  const uint64_t end_page =
      include_partial ? (eu.write_ptr + kBlockSize - 1) / kBlockSize : full_end;
  if (end_page <= first_page || eu.write_ptr <= s.synced_bytes) return Status::Ok();
  OrderAfterLastWriteLocked(s);
  const auto index = static_cast<uint32_t>(s.eu);
  if (full_end > first_page) {
    const std::span<const std::byte> pages(s.buf.data() + BlocksToBytes(first_page),
                                           BlocksToBytes(full_end - first_page));
    ERAID_RETURN_IF_ERROR(
        SubmitPagesLocked(index, first_page, pages, {}, /*whole=*/false, &s.last_write));
  }
  if (end_page > full_end) {
    // The tail of a partial page is zeros on flash (invariant 1 fills only that), never
    // what an earlier EU left in the buffer.
    std::vector<std::byte> page(kBlockSize);
    std::memcpy(page.data(), s.buf.data() + BlocksToBytes(full_end),
                eu.write_ptr - BlocksToBytes(full_end));
    const std::span<const std::byte> bytes(page);
    ERAID_RETURN_IF_ERROR(
        SubmitPagesLocked(index, full_end, bytes, std::move(page), /*whole=*/false, &s.last_write));
  }
  s.synced_bytes = include_partial ? eu.write_ptr : BlocksToBytes(end_page);
  if (s.synced_bytes == eu.write_ptr) s.first_unsynced_seq = 0;
  return Status::Ok();
}

Status CompressedDrive::SubmitPagesLocked(uint32_t eu, uint64_t first_page,
                                          std::span<const std::byte> pages,
                                          std::vector<std::byte>&& buf, bool whole,
                                          WriteDone* done) {
  // A few writes in flight per drive are enough to keep the flash busy.
  constexpr size_t kMaxInFlight = 8;
  if (flash_writes_.size() >= kMaxInFlight) ERAID_RETURN_IF_ERROR(ReapLocked(/*wait=*/true));
  FlashWrite& w = flash_writes_.emplace_back();
  w.eu = eu;
  w.buf = std::move(buf);  // only now (not on an error above); its bytes stay where `pages` points
  w.whole = whole;
  w.done = std::make_shared<std::pair<std::atomic<bool>, Status>>(pages.empty(), Status::Ok());
  if (whole) eus_[eu].writing = true;
  if (done) *done = w.done;
  if (pages.empty()) return Status::Ok();
  flash_.SubmitWrite(Lba(data_start_block_ + uint64_t(eu) * eu_blocks_ + first_page), pages,
                     [done = w.done](Status st) {
                       done->second = std::move(st);
                       done->first.store(true, std::memory_order_release);
                     });
  stats_.flash_write_bytes += pages.size();
  return Status::Ok();
}

void CompressedDrive::OrderAfterLastWriteLocked(Stream& s) {
  // Only a write that ended inside a page is rewritten by the next (from that page on).
  if (s.last_write && s.synced_bytes % kBlockSize != 0) WaitForWrite(flash_, s.last_write);
  s.last_write.reset();
}

void CompressedDrive::WaitForWrite(Backend& flash, const WriteDone& w) {
  while (!w->first.load(std::memory_order_acquire)) {
    if (flash.Poll(true) == 0) std::this_thread::yield();  // another thread delivers it
  }
}

std::vector<CompressedDrive::WriteDone> CompressedDrive::WritesInFlightLocked() const {
  std::vector<WriteDone> writes;
  writes.reserve(flash_writes_.size());
  for (const FlashWrite& w : flash_writes_) writes.push_back(w.done);
  return writes;
}

Status CompressedDrive::WaitForWrites(const std::vector<WriteDone>& writes) {
  for (const WriteDone& w : writes) {
    WaitForWrite(flash_, w);
    ERAID_RETURN_IF_ERROR(w->second);
  }
  return Status::Ok();
}

Status CompressedDrive::WritePagesAsyncLocked(Stream& s) {
  Eu& eu = eus_[static_cast<size_t>(s.eu)];
  const uint64_t first_page = s.synced_bytes / kBlockSize;
  const uint64_t end_page =
      std::max<uint64_t>(first_page, (eu.write_ptr + kBlockSize - 1) / kBlockSize);
  const bool any = eu.write_ptr > s.synced_bytes;
  if (any) OrderAfterLastWriteLocked(s);
  if (BlocksToBytes(end_page) > eu.write_ptr) {
    std::memset(s.buf.data() + eu.write_ptr, 0, BlocksToBytes(end_page) - eu.write_ptr);
  }
  // Even with nothing left to write, the buffer goes into an entry of its own: earlier
  // page writes of this EU may still be reading it, and it is recycled only once they
  // (and it, in order) are reaped.
  const std::span<const std::byte> pages(s.buf.data() + BlocksToBytes(first_page),
                                         any ? BlocksToBytes(end_page - first_page) : 0);
  ERAID_RETURN_IF_ERROR(SubmitPagesLocked(static_cast<uint32_t>(s.eu), first_page, pages,
                                          std::move(s.buf),
                                          /*whole=*/true));
  s.synced_bytes = eu.write_ptr;
  s.first_unsynced_seq = 0;  // durable at the next flush, which waits for this write first
  return Status::Ok();
}

Status CompressedDrive::ReapLocked(bool wait) {
  while (!flash_writes_.empty()) {
    FlashWrite& w = flash_writes_.front();
    if (!w.done->first.load(std::memory_order_acquire)) {
      // Completions are delivered by whoever polls the flash; ours may already be.
      flash_.Poll(false);
      if (!w.done->first.load(std::memory_order_acquire)) {
        if (!wait) break;
        flash_.Poll(true);
        continue;
      }
    }
    if (!w.done->second.ok() && flash_error_.ok()) {
      flash_error_ =
          w.done->second.WithContext("flash write of erase unit " + std::to_string(w.eu));
    }
    if (w.whole) {
      eus_[w.eu].writing = false;
      if (spare_bufs_.size() < 8) spare_bufs_.push_back(std::move(w.buf));
    }
    flash_writes_.pop_front();
  }
  return flash_error_;
}

Status CompressedDrive::OpenEuLocked(uint32_t stream) {
  if (stream != kGcStream) {
    ERAID_RETURN_IF_ERROR(EnsureFreeLocked());
    // The last free EU is kept for GC, so GC can always make progress.
    if (free_eus_.size() <= 1) return Status::NoSpace("no free erase unit");
  }
  if (free_eus_.empty()) return Status::NoSpace("no free erase unit for GC");
  uint32_t index = free_eus_.back();
  free_eus_.pop_back();
  if (options_.background_free_eus > 0 && free_eus_.size() < options_.background_free_eus &&
      !eraser_wanted_ && !eraser_stop_) {
    if (!eraser_.joinable()) eraser_ = std::thread([this] { Eraser(); });
    eraser_wanted_ = true;
    eraser_cv_.notify_one();
  }
  Eu& eu = eus_[index];
  eu = Eu{Eu::State::kOpen, stream, next_seq_++, 0, 0, 0};
  Stream& s = streams_[stream];
  s.eu = index;
  // Not zeroed (256 KiB per EU showed in write profiles): bytes past write_ptr are stale
  // until written, and WritePagesLocked zeroes a partial page's tail before it goes out.
  // The last EU's buffer may be in flight to flash: a spare one is taken.
  if (s.buf.size() != eu_bytes_ && !spare_bufs_.empty()) {
    s.buf = std::move(spare_bufs_.back());
    spare_bufs_.pop_back();
  }
  s.buf.resize(eu_bytes_);
  s.synced_bytes = 0;
  s.first_unsynced_seq = 0;
  s.last_write.reset();  // the last EU's: other pages
  RecordHeader h{RecordType::kEuHeader, Codec::kRaw, 0, index, eu.gen, 0};
  EncodeRecordHeader(h, {}, s.buf.data());
  eu.write_ptr = kRecordHeaderBytes;
  bytes_since_ckpt_ += eu_bytes_;
  return Status::Ok();
}

Status CompressedDrive::SealLocked(uint32_t stream) {
  ERAID_CHECK(stream < streams_.size());
  Stream& s = streams_[stream];
  ERAID_CHECK(s.eu >= 0 && eus_[static_cast<size_t>(s.eu)].state == Eu::State::kOpen);
  ERAID_RETURN_IF_ERROR(WritePagesAsyncLocked(s));
  eus_[static_cast<size_t>(s.eu)].state = Eu::State::kSealed;
  s.eu = -1;
  return Status::Ok();
}

Status CompressedDrive::AppendLocked(uint32_t stream, RecordHeader* h, const std::byte* payload,
                                     uint64_t* loc) {
  ERAID_RETURN_IF_ERROR(DirtyLocked());
  const uint32_t len = RecordFootprint(h->record_bytes(), align_shift_);
  auto fits = [&] {
    return streams_[stream].eu >= 0 &&
           eus_[static_cast<size_t>(streams_[stream].eu)].write_ptr + len <= eu_bytes_;
  };
  if (!fits()) {
    // Opening an EU may collect garbage here, which must see the eraser's EUs back and
    // no checkpoint half-written: wait for both first (lending the lock), before this
    // stream's EU is sealed, since others may use the stream meanwhile.
    if (stream != kGcStream && free_eus_.size() < options_.gc_free_eus) WaitForBackgroundLocked();
    if (!fits()) {
      if (streams_[stream].eu >= 0) ERAID_RETURN_IF_ERROR(SealLocked(stream));
      ERAID_RETURN_IF_ERROR(OpenEuLocked(stream));
    }
  }
  Stream& s = streams_[stream];
  ERAID_CHECK(s.eu >= 0);
  Eu& eu = eus_[static_cast<size_t>(s.eu)];
  ERAID_CHECK(eu.state == Eu::State::kOpen && eu.stream == stream &&
              eu.write_ptr + len <= eu_bytes_);
  std::byte* dst = s.buf.data() + eu.write_ptr;
  std::span<const std::byte> body(payload, h->payload_bytes);
  if (!body.empty()) std::memcpy(dst + kRecordHeaderBytes, payload, body.size());
  h->seq = next_seq_++;
  if (s.first_unsynced_seq == 0) s.first_unsynced_seq = h->seq;
  EncodeRecordHeader(*h, body, dst);
  // The gap to the next record's start: zeros, never stale bytes of an earlier EU.
  std::memset(dst + h->record_bytes(), 0, len - h->record_bytes());
  *loc = PackLoc(BlocksToBytes(data_start_block_) + uint64_t(s.eu) * eu_bytes_ + eu.write_ptr, len);
  eu.write_ptr += len;
  // Full pages go to flash in batches: reads of the open EU are served from its buffer,
  // so writing each page as it fills would only multiply backend operations.
  if (eu.write_ptr - s.synced_bytes < BlocksToBytes(options_.write_batch_blocks))
    return Status::Ok();
  return WritePagesLocked(s, /*include_partial=*/false);
}

bool CompressedDrive::OnFlashLocked(uint64_t loc) const {
  const auto index =
      static_cast<uint32_t>((LocOffset(loc) - BlocksToBytes(data_start_block_)) / eu_bytes_);
  ERAID_CHECK(index < num_eus_);
  const Eu& eu = eus_[index];
  return !eu.writing && !(eu.state == Eu::State::kOpen && streams_[eu.stream].eu == index);
}

Status CompressedDrive::ReadRecordLocked(uint64_t loc, std::vector<std::byte>* out) {
  const uint64_t offset = LocOffset(loc);
  const uint32_t len = LocLength(loc);
  const uint64_t rel = offset - BlocksToBytes(data_start_block_);
  const auto index = static_cast<uint32_t>(rel / eu_bytes_);
  const uint64_t in_eu = rel % eu_bytes_;
  ERAID_CHECK(offset >= BlocksToBytes(data_start_block_) && index < num_eus_ &&
              in_eu + len <= eu_bytes_);
  out->resize(len);
  const Eu& eu = eus_[index];
  if (eu.state == Eu::State::kOpen && streams_[eu.stream].eu == index) {
    std::memcpy(out->data(), streams_[eu.stream].buf.data() + in_eu, len);
    return Status::Ok();
  }
  if (eu.writing) {
    for (const FlashWrite& w : flash_writes_) {
      if (w.whole && w.eu == index) {
        std::memcpy(out->data(), w.buf.data() + in_eu, len);
        return Status::Ok();
      }
    }
  }
  return flash_.ReadBytes(offset, *out);
}

Status CompressedDrive::WriteOpenPagesLocked(uint64_t* upto) {
  *upto = next_seq_ - 1;
  for (auto& s : streams_) {
    if (s.eu >= 0) ERAID_RETURN_IF_ERROR(WritePagesLocked(s, /*include_partial=*/true));
  }
  return Status::Ok();
}

Status CompressedDrive::FlushLocked() {
  uint64_t upto = 0;
  ERAID_RETURN_IF_ERROR(WriteOpenPagesLocked(&upto));
  ERAID_RETURN_IF_ERROR(ReapLocked(/*wait=*/true));
  ERAID_RETURN_IF_ERROR(flash_.Flush());
  durable_seq_ = upto;
  return Status::Ok();
}

Status CompressedDrive::FlushOutsideLock() {
  uint64_t upto = 0;
  std::vector<WriteDone> writes;
  {
    std::lock_guard lock(mu_);
    ERAID_RETURN_IF_ERROR(flash_error_);
    ERAID_RETURN_IF_ERROR(WriteOpenPagesLocked(&upto));
    writes = WritesInFlightLocked();
  }
  // Every record up to `upto` is on its way to the backend now: once those writes are
  // done, a flush covers them whatever is written meanwhile, so writers and readers need
  // not wait for the writes or the flush (an fsync takes tens of milliseconds on a loaded
  // disk).
  ERAID_RETURN_IF_ERROR(WaitForWrites(writes));
  ERAID_RETURN_IF_ERROR(flash_.Flush());
  std::lock_guard lock(mu_);
  ERAID_RETURN_IF_ERROR(ReapLocked(/*wait=*/false));
  durable_seq_ = std::max(durable_seq_, upto);
  return Status::Ok();
}

Status CompressedDrive::WriteUpToLocked(uint64_t seq) {
  // A stream whose oldest unsynced record is newer than `seq` holds nothing older:
  // leave its partial page alone (writing it now would only be rewritten later).
  for (auto& s : streams_) {
    if (s.eu >= 0 && s.first_unsynced_seq != 0 && s.first_unsynced_seq <= seq) {
      ERAID_RETURN_IF_ERROR(WritePagesLocked(s, /*include_partial=*/true));
    }
  }
  return ReapLocked(/*wait=*/true);
}

Status CompressedDrive::SyncUpToLocked(uint64_t seq) {
  if (seq <= durable_seq_) return Status::Ok();
  ERAID_RETURN_IF_ERROR(WriteUpToLocked(seq));
  ERAID_RETURN_IF_ERROR(flash_.Flush());
  durable_seq_ = std::max(durable_seq_, seq);
  return Status::Ok();
}

Status CompressedDrive::CheckpointLocked(bool clean) {
  // One being written without the lock: this one follows it. (Never from inside a
  // collection: AppendLocked waited before it began.)
  WaitForBackgroundLocked();
  ERAID_RETURN_IF_ERROR(FlushLocked());
  CheckpointHeader h;
  std::vector<std::byte> slot;
  SnapshotCheckpointLocked(&h, &slot);
  h.flags = clean ? kCheckpointClean : 0;
  SealCheckpoint(&h, &slot);
  ERAID_RETURN_IF_ERROR(WriteCheckpointSlot(h.ckpt_count, slot));
  ERAID_RETURN_IF_ERROR(flash_.Flush());
  CheckpointWrittenLocked(h, slot.size());
  clean_on_flash_ = clean;
  return Status::Ok();
}

Status CompressedDrive::CheckpointOutsideLock(std::unique_lock<std::mutex>& lock) {
  if (checkpointing_)
    return Status::Ok();  // the one being written is as recent as this one would be
  checkpointing_ = true;
  struct Done {
    CompressedDrive* d;
    ~Done() {
      d->checkpointing_ = false;
      d->erased_cv_.notify_all();
    }
  } done{this};
  // The image is taken now, under the lock, with every record it refers to on its way to
  // flash: the open EUs' pages written, the sealed ones' writes in flight noted. Those
  // writes and both flash flushes are waited for without the lock.
  uint64_t upto = 0;
  ERAID_RETURN_IF_ERROR(WriteOpenPagesLocked(&upto));
  const std::vector<WriteDone> writes = WritesInFlightLocked();
  CheckpointHeader h;
  std::vector<std::byte> slot;
  // Its buffer is taken and touched without the lock (page faults for megabytes of map
  // under mu_ held up every I/O), and freed after the write (kept, it cost as much RAM
  // again as the map itself).
  {
    bool sparse = false;
    // With room for 64 more map pages, made while the lock is dropped.
    const uint64_t bytes =
        BlocksToBytes(1) + CheckpointPayloadBytesLocked(&sparse) + 64 * kMapPageBytes;
    lock.unlock();
    slot.assign(bytes, std::byte{0});
    lock.lock();
  }
  SnapshotCheckpointLocked(&h, &slot);
  lock.unlock();
  Status st = [&]() -> Status {
    SealCheckpoint(&h, &slot);
    ERAID_RETURN_IF_ERROR(WaitForWrites(writes));
    ERAID_RETURN_IF_ERROR(flash_.Flush());
    ERAID_RETURN_IF_ERROR(WriteCheckpointSlot(h.ckpt_count, slot));
    return flash_.Flush();
  }();
  lock.lock();
  ERAID_RETURN_IF_ERROR(st);
  durable_seq_ = std::max(durable_seq_, upto);
  CheckpointWrittenLocked(h, slot.size());
  clean_on_flash_ = false;
  return Status::Ok();
}

Status CompressedDrive::WriteCheckpointSlot(uint64_t ckpt_count, std::span<const std::byte> slot) {
  const Lba at(1 + (ckpt_count % 2) * ckpt_slot_blocks_);
  if (CrashPointDue("drive-checkpoint")) {
    // Tests only (common/crash_point.h): the process dies with the header and half the
    // payload written — a torn checkpoint, whose slot the next open must pass over.
    const uint64_t blocks = BytesToBlocks(slot.size());
    (void)flash_.Write(at, slot.first(BlocksToBytes(std::max<uint64_t>(1, blocks / 2))));
    CrashNow("drive-checkpoint");
  }
  return flash_.Write(at, slot).WithContext("checkpoint");
}

void CompressedDrive::CheckpointWrittenLocked(const CheckpointHeader& h, uint64_t slot_bytes) {
  stats_.flash_write_bytes += slot_bytes;
  stats_.meta_write_bytes += slot_bytes;
  ++stats_.checkpoints;
  ckpt_count_ = h.ckpt_count;
  ckpt_seq_ = h.ckpt_seq;
}

namespace {

static_assert(DriveMap::kPageEntries == kMapPageEntries);

// Writes n map entries little-endian at p; returns the end.
std::byte* PutMapEntries(std::byte* p, const uint64_t* entries, uint64_t n) {
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(p, entries, n * 8);  // the on-disk form already
  } else {
    for (uint64_t i = 0; i < n; ++i) PutLe64(p + i * 8, entries[i]);
  }
  return p + n * 8;
}

}  // namespace

uint64_t CompressedDrive::CheckpointPayloadBytesLocked(bool* sparse) const {
  // Sparse unless its pages would not fit the slot; a dense one always does (the slot
  // was sized for it), and is then no larger.
  const uint64_t sparse_bytes =
      SparsePayloadBytes(logical_blocks_, map_.resident_pages(), num_eus_);
  *sparse = sparse_bytes <= BlocksToBytes(ckpt_slot_blocks_ - 1);
  return *sparse ? sparse_bytes : DensePayloadBytes(logical_blocks_, num_eus_);
}

void CompressedDrive::SnapshotCheckpointLocked(CheckpointHeader* header,
                                               std::vector<std::byte>* slot) {
  bool sparse = false;
  const uint64_t payload = CheckpointPayloadBytesLocked(&sparse);
  // Only the blocks the payload takes are written; zeros pad the last (and make the dense
  // form's absent pages and the bitmap's unset bits).
  slot->assign(BlocksToBytes(1 + BytesToBlocks(payload + kBlockSize - 1)), std::byte{0});
  std::byte* const start = slot->data() + kBlockSize;
  std::byte* p = start;
  std::vector<uint64_t> page(kMapPageEntries);
  if (sparse) {
    std::byte* const bitmap = p;
    p += MapBitmapBytes(logical_blocks_);
    for (uint64_t k = 0; k < map_.page_count(); ++k) {
      if (map_.CopyPage(k, page.data())) {
        bitmap[k / 8] |= static_cast<std::byte>(1u << (k % 8));
        p = PutMapEntries(p, page.data(), kMapPageEntries);
      }
    }
  } else {
    for (uint64_t k = 0; k < map_.page_count(); ++k) {
      if (map_.CopyPage(k, page.data())) {
        PutMapEntries(p + k * kMapPageBytes, page.data(),
                      std::min(kMapPageEntries, logical_blocks_ - k * kMapPageEntries));
      }
    }
    p += logical_blocks_ * 8;
  }
  for (const Eu& eu : eus_) {
    bool used = eu.state != Eu::State::kFree;
    PutLe64(p, used ? eu.gen : 0);
    PutLe32(p + 8, used ? eu.write_ptr : 0);
    p[12] = static_cast<std::byte>(
        used ? kCkptEuUsed | (eu.state == Eu::State::kSealed ? kCkptEuSealed : 0) : 0);
    p += kCheckpointEuEntryBytes;
  }
  ERAID_CHECK(static_cast<uint64_t>(p - start) == payload);
  CheckpointHeader& h = *header;
  h = CheckpointHeader{};
  h.version = sparse ? kCheckpointVersionSparse : kCheckpointVersionDense;
  h.ckpt_seq = next_seq_ - 1;
  h.next_seq = next_seq_;
  h.ckpt_count = ckpt_count_ + 1;
  h.logical_blocks = logical_blocks_;
  h.num_eus = num_eus_;
  h.payload_bytes = payload;
  bytes_since_ckpt_ = 0;
}

void CompressedDrive::SealCheckpoint(CheckpointHeader* header, std::vector<std::byte>* slot) {
  header->payload_crc = Crc32c(slot->data() + kBlockSize, header->payload_bytes);
  EncodeCheckpointHeader(*header, *slot);
}

}  // namespace eraid
