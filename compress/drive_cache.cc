// The drive's write cache: writes acknowledged from RAM and compressed and stored by a
// worker (DriveOptions::cache_blocks), as a drive's DRAM buffer with power-loss
// protection would.
#include <cstring>

#include "common/thread_priority.h"
#include "compress/drive_internal.h"

namespace eraid {

using namespace drive_format;  // NOLINT: this file implements that format
using namespace drive_internal;

// ---------------------------------------------------------------- the write cache

Status CompressedDrive::CachedBlock::CopyTo(std::byte* out) const {
  if (!packed) {
    std::memcpy(out, data->data() + offset, kBlockSize);
    return Status::Ok();
  }
  const Compressed c = packed->sizes[offset];
  return DecompressBlock(c.codec, std::span(packed->payload(offset), c.size_bytes), out);
}

Status CompressedDrive::CacheWrite(Lba lba, std::span<const std::byte> buf,
                                   std::shared_ptr<const PackedBlocks> packed, uint32_t first) {
  ERAID_RETURN_IF_ERROR(CheckExtent(lba, buf.size()));
  const uint64_t n = BytesToBlocks(buf.size());
  if (n > options_.write_cache_blocks) return DrainCache().ok() ? DoWrite(lba, buf) : DrainCache();
  const uint64_t worst = n * (kRecordHeaderBytes + kBlockSize);
  // The host's records, shared, or else a copy of the data (the caller's buffer is free
  // to go once this returns).
  auto data = packed ? nullptr : std::make_shared<std::vector<std::byte>>(buf.begin(), buf.end());
  std::unique_lock lock(cache_mu_);
  cache_done_cv_.wait(lock, [&] { return cache_blocks_ + n <= options_.write_cache_blocks; });
  if (!cache_error_.ok()) return cache_error_;
  ERAID_RETURN_IF_ERROR(AdmitLocked(lba, n, worst));
  const uint64_t id = next_cache_id_++;
  for (uint64_t i = 0; i < n; ++i) {
    cached_[lba.value + i] = packed ? CachedBlock{id, nullptr, first + i, packed}
                                    : CachedBlock{id, data, BlocksToBytes(i), nullptr};
  }
  cached_size_.store(cached_.size(), std::memory_order_release);
  cache_queue_.push_back(
      CachedWrite{lba.value, n, id, std::move(data), nullptr, worst, std::move(packed), first});
  cache_blocks_ += n;
  if (!cache_worker_.joinable()) cache_worker_ = std::thread([this] { CacheWorker(); });
  cache_work_cv_.notify_one();
  return Status::Ok();
}

Status CompressedDrive::AdmitLocked(Lba lba, uint64_t n, uint64_t worst) {
  // Admission (serialised by cache_mu_). The worker releases a write's reservation only
  // after publishing the live bytes its records added, so reading the reservations and
  // then live_bytes_ never sees less than is held: if even that fits, the write does —
  // without the drive lock, which the worker holds across flash writes (and the array
  // calls this under its own and the volume's locks). Otherwise the exact sum, under
  // mu_, also credits the records the write supersedes. (Releasing reservations only
  // after a whole batch of writes once counted stored blocks twice: a spurious NoSpace,
  // then a later write of the same size admitted.)
  const uint64_t reserved = cache_reserved_bytes_.load(std::memory_order_acquire);
  if (reserved + live_bytes_.load(std::memory_order_acquire) + worst > usable_bytes_) {
    std::lock_guard l(mu_);
    uint64_t old = 0;
    for (uint64_t i = 0; i < n; ++i) {
      uint64_t loc = map_.Get(lba.value + i);
      if (loc != kUnmapped && loc != kLostBlock) old += LocLength(loc);
    }
    const uint64_t held = cache_reserved_bytes_.load(std::memory_order_relaxed);
    if (stats_.live_bytes + held + worst > usable_bytes_ + old) {
      ++stats_.nospace_errors;
      return Status::NoSpace("drive full: " + std::to_string(stats_.live_bytes) + " of " +
                             std::to_string(usable_bytes_) + " physical bytes live, " +
                             std::to_string(held) + " cached");
    }
  }
  cache_reserved_bytes_.fetch_add(worst, std::memory_order_relaxed);
  return Status::Ok();
}

Status CompressedDrive::CachedRead(Lba lba, std::span<std::byte> buf) {
  ERAID_RETURN_IF_ERROR(CheckExtent(lba, buf.size()));
  // Nothing cached (a read-mostly load): the lock and the lookups are skipped. A write
  // acknowledged before this read began counts in cached_size_ until it is stored.
  if (cached_size_.load(std::memory_order_acquire) == 0) return DoRead(lba, buf);
  const uint64_t n = BytesToBlocks(buf.size());
  std::vector<bool> hit(n, false);
  bool any = false;
  {
    std::lock_guard lock(cache_mu_);
    for (uint64_t i = 0; i < n; ++i) {
      auto it = cached_.find(lba.value + i);
      if (it == cached_.end()) continue;
      ERAID_RETURN_IF_ERROR(it->second.CopyTo(buf.data() + BlocksToBytes(i)));
      hit[i] = any = true;
    }
  }
  if (!any) return DoRead(lba, buf);
  // A block leaves the cache only after the mapping points at its record, so a miss here
  // reads the stored copy (or a newer one).
  for (uint64_t i = 0; i < n; ++i) {
    if (!hit[i])
      ERAID_RETURN_IF_ERROR(DoRead(Lba(lba.value + i), buf.subspan(BlocksToBytes(i), kBlockSize)));
  }
  return Status::Ok();
}

Status CompressedDrive::DrainCacheOf(Lba lba, uint64_t count_blocks) {
  if (!options_.write_cache_blocks) return Status::Ok();
  // Only writes of these blocks must be stored first (a trim, a FlashAlloc range): the
  // array trims a segment as it allocates it, when nothing of it is cached, and waiting
  // for the whole cache there stalled every writer behind it.
  bool any = false;
  {
    std::lock_guard lock(cache_mu_);
    if (count_blocks < cached_.size()) {
      for (uint64_t b = lba.value; b < lba.value + count_blocks && !any; ++b)
        any = cached_.count(b) > 0;
    } else {
      for (const auto& [b, c] : cached_) any |= b >= lba.value && b - lba.value < count_blocks;
    }
    if (!any) return cache_error_;
  }
  return DrainCache();
}

Status CompressedDrive::DrainCache() {
  if (!options_.write_cache_blocks) return Status::Ok();
  std::unique_lock lock(cache_mu_);
  cache_done_cv_.wait(lock, [&] { return cache_blocks_ == 0; });
  return cache_error_;
}

void CompressedDrive::CacheWorker() {
  NameThisThread("drive-cache");
  std::unique_lock lock(cache_mu_);
  for (;;) {
    cache_work_cv_.wait(lock, [&] { return cache_stop_ || !cache_queue_.empty(); });
    if (cache_queue_.empty()) return;  // stopping, and nothing is left
    if (cache_queue_.front().flush) {
      // The pages of every write before the flush go to flash here; the flash flush that
      // makes them durable (an fdatasync: milliseconds) is the flusher thread's, so the
      // writes queued behind this flush are stored meanwhile and the cache does not fill
      // up behind it (writers above would wait for room, holding their locks).
      PendingFlush f{0, std::move(cache_queue_.front().flush), cache_error_};
      cache_queue_.pop_front();
      lock.unlock();
      if (f.status.ok()) {
        std::lock_guard l(mu_);
        f.status = WriteOpenPagesLocked(&f.upto);
        if (f.status.ok()) f.status = ReapLocked(/*wait=*/true);
      }
      lock.lock();
      flush_queue_.push_back(std::move(f));
      if (!flusher_.joinable()) flusher_ = std::thread([this] { Flusher(); });
      flusher_cv_.notify_one();
      continue;
    }
    // The writes up to the next flush, 64 at most, stored outside cache_mu_.
    std::vector<CachedWrite> batch;
    while (!cache_queue_.empty() && !cache_queue_.front().flush && batch.size() < 64) {
      batch.push_back(std::move(cache_queue_.front()));
      cache_queue_.pop_front();
    }
    lock.unlock();
    std::vector<Status> results;
    for (const CachedWrite& w : batch) {
      results.push_back(w.packed
                            ? Store(w.lba, w.blocks, w.packed->payload(w.packed_first),
                                    std::span(w.packed->sizes).subspan(w.packed_first, w.blocks),
                                    w.reserved, 0)
                            : DoWrite(Lba(w.lba), std::span<const std::byte>(*w.data), w.reserved));
    }
    lock.lock();
    for (size_t b = 0; b < batch.size(); ++b) {
      const CachedWrite& w = batch[b];
      for (uint64_t i = 0; i < w.blocks; ++i) {
        auto it = cached_.find(w.lba + i);
        if (it != cached_.end() && it->second.id == w.id) cached_.erase(it);
      }
      cached_size_.store(cached_.size(), std::memory_order_release);
      cache_blocks_ -= w.blocks;
      if (!results[b].ok() && cache_error_.ok()) {
        cache_error_ = results[b].WithContext("cached write of lba " + std::to_string(w.lba));
      }
    }
    cache_done_cv_.notify_all();
  }
}

}  // namespace eraid
