// Device GC: erase units of garbage only are erased (by the eraser thread, after the
// writes that superseded their records are durable); others are collected by
// relocating their live records.
#include <algorithm>

#include "common/thread_priority.h"
#include "compress/drive_internal.h"

namespace eraid {

using namespace drive_format;  // NOLINT: this file implements that format
using namespace drive_internal;

// ---------------------------------------------------------------- device GC

Status CompressedDrive::EnsureFreeLocked() {
  while (free_eus_.size() < options_.gc_free_eus) {
    size_t before = free_eus_.size();
    ERAID_RETURN_IF_ERROR(CollectLocked());
    if (free_eus_.size() <= before) break;  // nothing left worth collecting
  }
  return Status::Ok();
}

void CompressedDrive::WaitForBackgroundLocked() {
  if (erasing_eus_ == 0 && !checkpointing_) return;
  std::unique_lock<std::mutex> lent(mu_, std::adopt_lock);  // the caller's lock, kept
  erased_cv_.wait(lent, [&] { return erasing_eus_ == 0 && !checkpointing_; });
  lent.release();
}

void CompressedDrive::Eraser() {
  NameThisThread("drive-erase");
  std::unique_lock lock(mu_);
  for (;;) {
    eraser_cv_.wait(lock, [&] { return eraser_stop_ || eraser_wanted_; });
    if (eraser_stop_) return;
    if (Status s = EraseGarbageEus(lock); !s.ok() && flash_error_.ok()) flash_error_ = s;
    eraser_wanted_ = false;
  }
}

Status CompressedDrive::EraseGarbageEus(std::unique_lock<std::mutex>& lock) {
  // Sealed EUs with no live record, none of them still on its way to flash and none
  // holding trim records a checkpoint has not covered (those are CollectLocked's: they
  // need a checkpoint, invariant 2). Those superseded durably first: they need no flush.
  const size_t want = options_.background_free_eus -
                      std::min<size_t>(free_eus_.size(), options_.background_free_eus);
  std::vector<uint32_t> picked;
  uint64_t needed = 0;
  for (int pass = 0; pass < 2 && picked.size() < want; ++pass) {
    for (uint32_t i = 0; i < num_eus_ && picked.size() < want; ++i) {
      const Eu& eu = eus_[i];
      if (eu.state != Eu::State::kSealed || eu.live_bytes != 0 || eu.writing ||
          eu.max_trim_seq > ckpt_seq_)
        continue;
      if ((eu.max_superseded_by <= durable_seq_) != (pass == 0)) continue;
      picked.push_back(i);
      needed = std::max(needed, eu.max_superseded_by);
    }
  }
  if (picked.empty()) return Status::Ok();
  ERAID_RETURN_IF_ERROR(DirtyLocked());  // the clean checkpoint says they hold records
  for (uint32_t v : picked) eus_[v].state = Eu::State::kErasing;
  erasing_eus_ += static_cast<uint32_t>(picked.size());
  // However this ends, the EUs go back: erased and free, or sealed as they were.
  bool erased = false;
  struct GiveBack {
    CompressedDrive* d;
    const std::vector<uint32_t>& picked;
    const bool& erased;
    ~GiveBack() {
      for (uint32_t v : picked) {
        if (erased) {
          d->eus_[v] = Eu{};
          d->free_eus_.push_back(v);
        } else {
          d->eus_[v].state = Eu::State::kSealed;
        }
      }
      if (erased) {
        d->stats_.gc_erased_eus += picked.size();
        d->stats_.background_erased_eus += picked.size();
      }
      d->erasing_eus_ -= static_cast<uint32_t>(picked.size());
      d->erased_cv_.notify_all();
    }
  } give_back{this, picked, erased};
  // Invariant 2: whatever superseded their records is durable before they are erased.
  if (needed > durable_seq_) {
    ERAID_RETURN_IF_ERROR(WriteUpToLocked(needed));
    lock.unlock();
    Status flushed = flash_.Flush();
    lock.lock();
    ERAID_RETURN_IF_ERROR(flushed);
    durable_seq_ = std::max(durable_seq_, needed);
  }
  // Erasing: see CollectLocked. Readers that looked an EU up before see erasures_ move.
  erasures_.fetch_add(1, std::memory_order_release);
  lock.unlock();
  Status st;
  for (uint32_t v : picked) {
    st = EraseEu(v);
    if (!st.ok()) break;
  }
  lock.lock();
  ERAID_RETURN_IF_ERROR(st);
  erased = true;
  return Status::Ok();
}

Status CompressedDrive::EraseEu(uint32_t eu) {
  static const std::vector<std::byte> zero_page(kBlockSize);
  ERAID_CHECK(eu < num_eus_);
  const uint64_t first = data_start_block_ + uint64_t(eu) * eu_blocks_;
  // The units are busy for the erase; nobody waits for it but what comes after on them.
  if (options_.timing) (void)options_.timing->FlashErase(BlocksToBytes(first), eu_bytes_);
  return flash_.Write(Lba(first), zero_page);
}

Status CompressedDrive::CollectLocked() {
  // Victims: sealed EUs with the least live data, while there is garbage to gain. Their
  // live records move to the GC stream; after a flush (and a checkpoint if they hold
  // recent trim records, invariant 2) they are erased.
  std::vector<uint32_t> pending;
  uint64_t relocated_upto = 0;  // newest relocated record's seq
  auto commit = [&]() -> Status {
    if (pending.empty()) return Status::Ok();
    // Invariant 2: relocated copies, and whatever superseded the victims' records, must
    // be durable before the victims' copies disappear.
    uint64_t needed = relocated_upto;
    bool trims = false;
    for (uint32_t v : pending) {
      needed = std::max(needed, eus_[v].max_superseded_by);
      trims |= eus_[v].max_trim_seq > ckpt_seq_;
    }
    if (trims) {
      ERAID_RETURN_IF_ERROR(CheckpointLocked());
    } else {
      ERAID_RETURN_IF_ERROR(SyncUpToLocked(needed));
    }
    // Erasing zeroes the EU's header page: recovery then finds the EU free, and the
    // records after it unreachable (a later incarnation's scan stops at the first record
    // not newer than its own header). The rest of the EU's flash is left as it is, as on
    // a real drive: trimming the whole range from the flash file freed its pages, and
    // the next incarnation's writes then paid for new ones (tmpfs: 0.8 GB/s into new
    // pages against 8.6 GB/s over old ones; 34% of a served array's CPU under random
    // writes went to that).
    for (uint32_t v : pending) {
      // Relocation moved every live record (invariant 4: live bytes are the mapped ones).
      ERAID_CHECK(v < num_eus_ && eus_[v].state == Eu::State::kSealed && eus_[v].live_bytes == 0);
      erasures_.fetch_add(1, std::memory_order_release);  // before the bytes go (DoRead)
      ERAID_RETURN_IF_ERROR(EraseEu(v));
      eus_[v] = Eu{};
      free_eus_.push_back(v);
      ++stats_.gc_erased_eus;
    }
    pending.clear();
    return Status::Ok();
  };
  // Collect a batch (twice the trigger level) so the flush before erasing is amortised.
  const size_t target = 2 * size_t{options_.gc_free_eus};
  while (free_eus_.size() + pending.size() < target) {
    if (free_eus_.empty()) ERAID_RETURN_IF_ERROR(commit());
    int64_t victim = -1;
    for (uint32_t i = 0; i < num_eus_; ++i) {
      const Eu& eu = eus_[i];
      if (eu.state != Eu::State::kSealed) continue;
      if (std::find(pending.begin(), pending.end(), i) != pending.end()) continue;
      if (victim < 0 || eu.live_bytes < eus_[size_t(victim)].live_bytes) victim = i;
    }
    if (victim < 0 ||
        eus_[size_t(victim)].live_bytes + kRecordHeaderBytes + kMaxRecordBytes > eu_bytes_) {
      break;
    }
    const uint64_t seq_before = next_seq_;
    ERAID_RETURN_IF_ERROR(RelocateLocked(static_cast<uint32_t>(victim)));
    if (next_seq_ != seq_before) relocated_upto = next_seq_ - 1;
    pending.push_back(static_cast<uint32_t>(victim));
  }
  return commit();
}

Status CompressedDrive::RelocateLocked(uint32_t victim) {
  ERAID_CHECK(victim < num_eus_ && eus_[victim].state == Eu::State::kSealed);
  if (eus_[victim].writing)
    ERAID_RETURN_IF_ERROR(ReapLocked(/*wait=*/true));     // before its erase too
  if (eus_[victim].live_bytes == 0) return Status::Ok();  // garbage only: nothing to read or move
  // Only the written part: past write_ptr a flash file may never have been written (an
  // EU sealed part-full), and reading it made the file system allocate and zero pages
  // that nothing needs. The buffer is kept between victims, not zeroed: every byte
  // looked at is read first.
  const uint32_t end = eus_[victim].write_ptr;
  const uint64_t eu_offset = BlocksToBytes(data_start_block_) + uint64_t(victim) * eu_bytes_;
  const uint64_t read_bytes =
      std::min<uint64_t>(eu_bytes_, BlocksToBytes(BytesToBlocks(uint64_t{end} + kBlockSize - 1)));
  if (!gc_buf_) gc_buf_ = std::make_unique_for_overwrite<std::byte[]>(eu_bytes_);
  const std::span<std::byte> buf(gc_buf_.get(), read_bytes);
  ERAID_RETURN_IF_ERROR(flash_.Read(Lba(eu_offset / kBlockSize), buf).WithContext("gc read"));
  for (uint32_t off = kRecordHeaderBytes; off + kRecordHeaderBytes <= end;) {
    auto h = DecodeRecord(std::span(buf).subspan(off), /*check_crc=*/false);
    if (!h.ok()) break;
    const uint32_t len = RecordFootprint(h->record_bytes(), align_shift_);
    if (off + len > end) break;
    const uint64_t loc = PackLoc(eu_offset + off, len);
    if (h->type == RecordType::kData && h->lba < logical_blocks_ && map_.Get(h->lba) == loc) {
      auto checked = DecodeRecord(std::span(buf).subspan(off, len), /*check_crc=*/true);
      if (!checked.ok()) {
        // The only copy is damaged: say so on every later read rather than return it.
        UnmapLocked(h->lba, 0);
        map_.Set(h->lba, kLostBlock);
      } else {
        RecordHeader moved = *h;  // a new sequence number: it is the newest version now
        uint64_t new_loc = 0;
        ERAID_RETURN_IF_ERROR(
            AppendLocked(kGcStream, &moved, buf.data() + off + kRecordHeaderBytes, &new_loc));
        map_.Set(h->lba, new_loc);
        eus_[victim].live_bytes -= len;
        eus_[(LocOffset(new_loc) - BlocksToBytes(data_start_block_)) / eu_bytes_].live_bytes += len;
        stats_.gc_relocated_bytes += len;
      }
    }
    off += len;
  }
  return Status::Ok();
}

}  // namespace eraid
