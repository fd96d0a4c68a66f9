#include "compress/compressed_drive.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "common/crc32c.h"
#include "common/encoding.h"
#include "common/thread_priority.h"
#include "compress/drive_format.h"

namespace eraid {

using namespace drive_format;  // NOLINT: this file implements that format

namespace {
constexpr uint32_t kUserStream = 0;
constexpr uint32_t kGcStream = 1;
constexpr uint32_t kTrimStream = 2;
constexpr uint32_t kFirstRangeStream = 3;
}  // namespace

struct CompressedDrive::Geometry {
  uint32_t eu_blocks;
  uint32_t num_eus;
  uint64_t logical_blocks;
  uint64_t data_start_block;
  uint32_t ckpt_slot_blocks;
};

struct CompressedDrive::Eu {
  // kErasing: garbage only, taken by the eraser; recorded as used until it is free.
  enum class State : uint8_t { kFree, kOpen, kSealed, kErasing };
  State state = State::kFree;
  uint32_t stream = 0;
  uint64_t gen = 0;                // seq of the EU-header record
  uint32_t write_ptr = 0;          // bytes of records written
  uint64_t live_bytes = 0;         // invariant 4
  uint64_t max_trim_seq = 0;       // newest trim record held; 0 if none
  uint64_t max_superseded_by = 0;  // newest record that made one of its records garbage
  bool writing = false;            // its pages are in flight to flash (flash_writes_)
};

struct CompressedDrive::Stream {
  int64_t eu = -1;                  // open EU, or -1
  std::vector<std::byte> buf;       // the open EU's bytes (zero beyond write_ptr)
  uint64_t synced_bytes = 0;        // prefix of buf known to be on flash
  uint64_t first_unsynced_seq = 0;  // oldest record not yet fully on flash; 0: none
  // Its latest page write of the open EU (WritePagesLocked), while it may be in flight.
  CompressedDrive::WriteDone last_write;
  bool active = false;  // a FlashAlloc range owns this stream
  uint64_t last_use = 0;
};

namespace {
Status ValidateOptions(const DriveOptions& o) {
  if (!(o.expansion >= 1.0 && o.expansion <= 16.0)) {
    return Status::InvalidArgument("expansion factor must be in [1, 16]");
  }
  if (o.erase_unit_blocks < 4 || o.erase_unit_blocks > 16384) {
    return Status::InvalidArgument("erase unit must be 4..16384 blocks");
  }
  if (o.gc_free_eus < 2) return Status::InvalidArgument("gc_free_eus must be at least 2");
  if (o.background_free_eus != 0 && o.background_free_eus <= o.gc_free_eus) {
    return Status::InvalidArgument("background_free_eus must be 0 or more than gc_free_eus");
  }
  if (o.max_flashalloc_ranges > 1024) {
    return Status::InvalidArgument("at most 1024 FlashAlloc ranges may be open");
  }
  if (o.checkpoint_every == 0) return Status::InvalidArgument("checkpoint_every must be positive");
  return Status::Ok();
}
}  // namespace

CompressedDrive::CompressedDrive(Backend& flash, const DriveOptions& options, const Geometry& g)
    : flash_(flash),
      options_(options),
      eu_blocks_(g.eu_blocks),
      eu_bytes_(BlocksToBytes(g.eu_blocks)),
      logical_blocks_(g.logical_blocks),
      num_eus_(g.num_eus),
      data_start_block_(g.data_start_block),
      ckpt_slot_blocks_(g.ckpt_slot_blocks),
      // Live data is capped so that, with every stream holding a partly filled EU and the
      // GC reserve free, some sealed EU always has at least a record's worth of garbage
      // (docs/compressed-drive.md, "Capacity").
      usable_bytes_([&] {
        int64_t eus = int64_t{g.num_eus} - (kFirstRangeStream + options.max_flashalloc_ranges) -
                      options.gc_free_eus - 1;
        return eus > 0 ? uint64_t(eus) *
                             (BlocksToBytes(g.eu_blocks) - kRecordHeaderBytes - kMaxRecordBytes)
                       : 0;
      }()),
      map_(g.logical_blocks, kUnmapped),
      eus_(g.num_eus),
      streams_(kFirstRangeStream + options.max_flashalloc_ranges) {
  free_eus_.reserve(num_eus_);
  for (uint32_t i = num_eus_; i-- > 0;) free_eus_.push_back(i);
  stats_.logical_blocks = logical_blocks_;
  stats_.flash_bytes = uint64_t{num_eus_} * eu_bytes_;
  stats_.usable_bytes = usable_bytes_;
}

CompressedDrive::~CompressedDrive() {
  // The eraser is stopped first, under mu_: the cache worker, still draining below, may
  // open an erase unit, and OpenEuLocked starts no eraser once eraser_stop_ is set (one
  // started after a joinable() check here would be destroyed unjoined: std::terminate).
  {
    std::lock_guard lock(mu_);
    eraser_stop_ = true;
  }
  eraser_cv_.notify_all();
  if (cache_worker_.joinable()) {
    {
      std::lock_guard lock(cache_mu_);
      cache_stop_ = true;
    }
    cache_work_cv_.notify_all();
    cache_worker_.join();  // the worker empties the queue first
  }
  if (flusher_.joinable()) {
    {
      std::lock_guard lock(cache_mu_);
      flusher_stop_ = true;
    }
    flusher_cv_.notify_all();
    flusher_.join();  // it completes the flushes queued first
  }
  if (eraser_.joinable()) eraser_.join();  // nothing is left to start it
  std::lock_guard lock(mu_);
  (void)ReapLocked(/*wait=*/true);  // the flash writes use buffers of ours
}

Result<std::unique_ptr<CompressedDrive>> CompressedDrive::Format(Backend& flash,
                                                                 const DriveOptions& options) {
  ERAID_RETURN_IF_ERROR(ValidateOptions(options));
  const uint64_t flash_blocks = flash.capacity_blocks();
  Geometry g{options.erase_unit_blocks, 0, 0, 0, 0};
  uint64_t eus = flash_blocks / options.erase_unit_blocks;
  for (; eus > 0; --eus) {
    g.logical_blocks = static_cast<uint64_t>(double(eus * g.eu_blocks) * options.expansion);
    uint64_t slot = CheckpointSlotBlocks(g.logical_blocks, eus);
    if (1 + 2 * slot + eus * g.eu_blocks <= flash_blocks) {
      g.num_eus = static_cast<uint32_t>(eus);
      g.ckpt_slot_blocks = static_cast<uint32_t>(slot);
      g.data_start_block = 1 + 2 * slot;
      break;
    }
  }
  auto drive = std::unique_ptr<CompressedDrive>(new CompressedDrive(flash, options, g));
  if (drive->usable_bytes_ == 0) {
    return Status::InvalidArgument("flash of " + std::to_string(flash_blocks) +
                                   " blocks is too small for this erase unit size and reserve");
  }
  // Erase everything so no record of an earlier format can be mistaken for ours, and
  // invalidate both checkpoint slots before writing the first one.
  ERAID_RETURN_IF_ERROR(flash.Trim(Lba(1), flash_blocks - 1).WithContext("format: erase"));
  std::vector<std::byte> block(kBlockSize);
  Superblock sb{g.eu_blocks,
                flash_blocks,
                g.logical_blocks,
                g.data_start_block,
                g.num_eus,
                g.ckpt_slot_blocks,
                static_cast<uint32_t>(options.expansion * 1000)};
  EncodeSuperblock(sb, block);
  ERAID_RETURN_IF_ERROR(flash.Write(Lba(0), block).WithContext("format: superblock"));
  std::lock_guard lock(drive->mu_);
  ERAID_RETURN_IF_ERROR(drive->CheckpointLocked());
  return drive;
}

Result<std::unique_ptr<CompressedDrive>> CompressedDrive::Open(Backend& flash,
                                                               const DriveOptions& options) {
  ERAID_RETURN_IF_ERROR(ValidateOptions(options));
  std::vector<std::byte> block(kBlockSize);
  ERAID_RETURN_IF_ERROR(flash.Read(Lba(0), block).WithContext("open: superblock"));
  ERAID_ASSIGN_OR_RETURN(Superblock sb, DecodeSuperblock(block));
  if (sb.flash_blocks > flash.capacity_blocks()) {
    return Status::InvalidArgument("drive was formatted on " + std::to_string(sb.flash_blocks) +
                                   " blocks but the flash now has " +
                                   std::to_string(flash.capacity_blocks()));
  }
  DriveOptions o = options;
  o.erase_unit_blocks = sb.eu_blocks;
  o.expansion = sb.expansion_milli / 1000.0;
  Geometry g{sb.eu_blocks, sb.num_eus, sb.logical_blocks, sb.data_start_block, sb.ckpt_slot_blocks};
  auto drive = std::unique_ptr<CompressedDrive>(new CompressedDrive(flash, o, g));
  if (drive->usable_bytes_ == 0) return Status::InvalidArgument("flash too small for this reserve");
  std::lock_guard lock(drive->mu_);
  ERAID_RETURN_IF_ERROR(drive->RecoverLocked().WithContext("open: recovery"));
  return drive;
}

// ---------------------------------------------------------------- host operations

void CompressedDrive::SubmitRead(Lba lba, std::span<std::byte> buf, IoCallback done) {
  completions_.Push(std::move(done), Read(lba, buf));
}
Status CompressedDrive::Read(Lba lba, std::span<std::byte> buf) {
  return options_.write_cache_blocks ? CachedRead(lba, buf) : DoRead(lba, buf);
}
void CompressedDrive::SubmitWrite(Lba lba, std::span<const std::byte> buf, IoCallback done) {
  completions_.Push(std::move(done),
                    options_.write_cache_blocks ? CacheWrite(lba, buf) : DoWrite(lba, buf));
}
void CompressedDrive::SubmitWritePacked(Lba lba, std::span<const std::byte> buf,
                                        std::shared_ptr<const PackedBlocks> packed, uint32_t first,
                                        IoCallback done) {
  const uint64_t n = BytesToBlocks(buf.size());
  bool usable = packed && packed->Matches(options_.codec) && first + n <= packed->sizes.size();
  for (uint64_t i = 0; usable && i < n; ++i) {  // every block packed ({kRaw, 0}: not)
    const Compressed c = packed->sizes[first + i];
    usable = c.size_bytes > 0 && c.size_bytes <= kMaxCompressedBlockBytes &&
             (c.codec != Codec::kRaw || c.size_bytes == kBlockSize);
  }
  if (!usable) {
    SubmitWrite(lba, buf, std::move(done));
    return;
  }
  Status s;
  if (options_.write_cache_blocks) {
    s = CacheWrite(lba, buf, std::move(packed), first);
  } else {
    s = CheckExtent(lba, buf.size());
    if (s.ok())
      s = Store(lba.value, n, packed->payload(first), std::span(packed->sizes).subspan(first, n), 0,
                0);
  }
  completions_.Push(std::move(done), std::move(s));
}
void CompressedDrive::SubmitTrim(Lba lba, uint64_t count_blocks, IoCallback done) {
  Status s = DrainCacheOf(lba, count_blocks);
  completions_.Push(std::move(done), s.ok() ? DoTrim(lba, count_blocks) : s);
}
void CompressedDrive::SubmitFlush(IoCallback done) {
  if (options_.write_cache_blocks) {
    std::lock_guard lock(cache_mu_);
    ++async_flushes_;
    cache_queue_.push_back(CachedWrite{0, 0, 0, nullptr, std::move(done)});
    if (!cache_worker_.joinable()) cache_worker_ = std::thread([this] { CacheWorker(); });
    cache_work_cv_.notify_one();
    return;
  }
  completions_.Push(std::move(done), FlushOutsideLock());
}

size_t CompressedDrive::Poll(bool wait) {
  size_t n = completions_.Poll(false);
  if (n > 0 || !wait) return n;
  if (async_flushes_ > 0) {
    std::unique_lock lock(cache_mu_);
    cache_done_cv_.wait(lock, [&] { return completions_.size() > 0 || async_flushes_ == 0; });
  }
  return completions_.Poll(wait);
}

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
      uint64_t loc = map_[lba.value + i];
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

Status CompressedDrive::DoRead(Lba lba, std::span<std::byte> buf) {
  ERAID_RETURN_IF_ERROR(CheckExtent(lba, buf.size()));
  for (uint64_t i = 0; i < BytesToBlocks(buf.size()); ++i) {
    ERAID_RETURN_IF_ERROR(ReadBlock(lba.value + i, buf.data() + BlocksToBytes(i)));
  }
  return Status::Ok();
}

Status CompressedDrive::ReadStored(Lba lba, std::span<std::byte> out, StoredBlock* stored) {
  stored->bytes.clear();
  ERAID_RETURN_IF_ERROR(CheckExtent(lba, out.size()));
  if (out.size() != kBlockSize) return Status::InvalidArgument("ReadStored takes one block");
  if (options_.write_cache_blocks && cached_size_.load(std::memory_order_acquire) != 0) {
    std::lock_guard lock(cache_mu_);
    if (auto it = cached_.find(lba.value); it != cached_.end())
      return it->second.CopyTo(out.data());  // not stored yet: the data only
  }
  return ReadBlock(lba.value, out.data(), stored);
}

Status CompressedDrive::WriteStored(Lba lba, std::span<const std::byte> data,
                                    std::span<const StoredBlock> stored) {
  const uint64_t n = BytesToBlocks(data.size());
  // Only records this drive would have written itself: a drive that does not compress
  // stores its blocks raw, and a payload must decode to a block (checked on every read).
  bool any = false;
  for (const StoredBlock& b : stored) any |= !b.bytes.empty();
  if (!options_.codec.enabled || stored.size() != n || !any) return Write(lba, data);
  ERAID_RETURN_IF_ERROR(CheckExtent(lba, data.size()));
  // An older write of these blocks still in the write cache must not be stored after this.
  ERAID_RETURN_IF_ERROR(DrainCacheOf(lba, n));
  // Its room is held like a cached write's, so the cached writes admitted before it still
  // fit when the worker stores them (AdmitLocked).
  uint64_t reserved = 0;
  if (options_.write_cache_blocks) {
    std::lock_guard lock(cache_mu_);
    ERAID_RETURN_IF_ERROR(AdmitLocked(lba, n, n * (kRecordHeaderBytes + kBlockSize)));
    reserved = n * (kRecordHeaderBytes + kBlockSize);
  }
  auto payloads = std::make_unique_for_overwrite<std::byte[]>(BlocksToBytes(n));
  std::vector<Compressed> sizes(n);
  uint64_t compressed = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const StoredBlock& b = stored[i];
    std::byte* out = payloads.get() + BlocksToBytes(i);
    if (b.bytes.empty() || b.bytes.size() > kMaxCompressedBlockBytes ||
        (b.codec == Codec::kRaw && b.bytes.size() != kBlockSize)) {
      const std::byte* in = data.data() + BlocksToBytes(i);
      sizes[i] = CompressBlock(options_.codec, in, out);
      ++compressed;
    } else {
      std::memcpy(out, b.bytes.data(), b.bytes.size());
      sizes[i] = Compressed{b.codec, static_cast<uint32_t>(b.bytes.size())};
    }
  }
  return Store(lba.value, n, payloads.get(), sizes, reserved, compressed);
}

Status CompressedDrive::ReadBlock(uint64_t block, std::byte* out, StoredBlock* keep) {
  // The record is found under the lock, and read from flash without it: records are
  // never rewritten in place, so the bytes at its location stay its own until its erase
  // unit is erased, which bumps erasures_. A read that saw an erase go by is done again
  // under the lock (rare: drive GC).
  thread_local std::vector<std::byte> record;
  for (int attempt = 0;; ++attempt) {
    uint64_t loc = 0, erasures = 0;
    bool from_flash = false;
    {
      std::lock_guard lock(mu_);
      loc = map_[block];
      if (loc == kLostBlock) {
        ++stats_.corrupt_reads;
        return Status::Corruption("lba " + std::to_string(block) + " was lost to a bad CRC");
      }
      if (loc == kUnmapped) {
        std::memset(out, 0, kBlockSize);
        return Status::Ok();
      }
      if (attempt > 0 || !OnFlashLocked(loc)) {
        ERAID_RETURN_IF_ERROR(ReadRecordLocked(loc, &record));
      } else {
        from_flash = true;
        erasures = erasures_.load(std::memory_order_relaxed);
      }
    }
    if (from_flash) {
      record.resize(LocLength(loc));
      Status s = flash_.ReadBytes(LocOffset(loc), record);
      if (erasures_.load(std::memory_order_acquire) != erasures) continue;
      ERAID_RETURN_IF_ERROR(s);
    }
    auto h = DecodeRecord(record, /*check_crc=*/true);
    Status s = h.ok() ? Status::Ok() : h.status();
    if (s.ok() && (h->type != RecordType::kData || h->lba != block)) {
      s = Status::Corruption("record belongs to another lba");
    }
    const auto payload =
        std::span(record).subspan(kRecordHeaderBytes, s.ok() ? h->payload_bytes : 0);
    if (s.ok()) s = DecompressBlock(h->codec, payload, out);
    if (s.ok() && keep) {
      keep->codec = h->codec;
      keep->bytes.assign(payload.begin(), payload.end());
    }
    if (!s.ok()) {
      std::lock_guard lock(mu_);
      ++stats_.corrupt_reads;
      return s.WithContext("read lba " + std::to_string(block));
    }
    return Status::Ok();
  }
}

Status CompressedDrive::DoWrite(Lba lba, std::span<const std::byte> buf, uint64_t reserved) {
  if (Status s = CheckExtent(lba, buf.size()); !s.ok()) {
    cache_reserved_bytes_.fetch_sub(reserved, std::memory_order_release);
    return s;
  }
  const uint64_t n = BytesToBlocks(buf.size());
  // Compress outside the lock: it is the expensive part, and independent per block.
  // Not zeroed: each block's payload is written before it is read (a 64 KiB memset per
  // chunk showed in write profiles).
  auto payloads = std::make_unique_for_overwrite<std::byte[]>(BlocksToBytes(n));
  std::vector<Compressed> sizes(n);
  for (uint64_t i = 0; i < n; ++i) {
    const std::byte* in = buf.data() + BlocksToBytes(i);
    std::byte* out = payloads.get() + BlocksToBytes(i);
    sizes[i] = CompressBlock(options_.codec, in, out);
  }
  return Store(lba.value, n, payloads.get(), sizes, reserved, n);
}

Status CompressedDrive::Store(uint64_t lba, uint64_t n, const std::byte* payloads,
                              std::span<const Compressed> sizes, uint64_t reserved,
                              uint64_t compressed) {
  uint64_t new_bytes = 0;
  for (const Compressed& c : sizes) new_bytes += kRecordHeaderBytes + c.size_bytes;
  std::unique_lock lock(mu_);
  // However it returns, the write then no longer needs its room held: the live bytes its
  // records added are published first, and the reservation released after (CacheWrite
  // reads them lock-free in the other order, so it never sees less than is taken).
  struct Publish {
    CompressedDrive* d;
    uint64_t reserved;
    ~Publish() {
      d->live_bytes_.store(d->stats_.live_bytes, std::memory_order_release);
      if (reserved) d->cache_reserved_bytes_.fetch_sub(reserved, std::memory_order_release);
    }
  } publish{this, reserved};
  ERAID_RETURN_IF_ERROR(ReapLocked(/*wait=*/false));
  uint64_t old_bytes = 0;
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t loc = map_[lba + i];
    if (loc != kUnmapped && loc != kLostBlock) old_bytes += LocLength(loc);
  }
  if (stats_.live_bytes - old_bytes + new_bytes > usable_bytes_) {
    ++stats_.nospace_errors;
    return Status::NoSpace("drive full: " + std::to_string(stats_.live_bytes) + " of " +
                           std::to_string(usable_bytes_) + " physical bytes live");
  }
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t block = lba + i;
    RecordHeader h{
        RecordType::kData, sizes[i].codec, static_cast<uint16_t>(sizes[i].size_bytes), block, 0, 1};
    uint64_t loc = 0;
    ERAID_RETURN_IF_ERROR(
        AppendLocked(StreamForLocked(block), &h, payloads + BlocksToBytes(i), &loc));
    UnmapLocked(block, h.seq);  // after the append: GC inside it may have moved the old record
    map_[block] = loc;
    eus_[(LocOffset(loc) - BlocksToBytes(data_start_block_)) / eu_bytes_].live_bytes +=
        LocLength(loc);
    stats_.live_bytes += LocLength(loc);
    ++stats_.mapped_blocks;
  }
  stats_.host_write_bytes += BlocksToBytes(n);
  stats_.host_stored_bytes += new_bytes;
  stats_.compressed_blocks += compressed;
  stats_.given_records += n - compressed;
  uint64_t ckpt_bytes = BlocksToBytes(2ull * ckpt_slot_blocks_);  // counts both, as a margin
  if (bytes_since_ckpt_ >= ckpt_bytes / 2 * options_.checkpoint_every) {
    ERAID_RETURN_IF_ERROR(CheckpointOutsideLock(lock));
  }
  return Status::Ok();
}

Status CompressedDrive::DoTrim(Lba lba, uint64_t count_blocks) {
  ERAID_RETURN_IF_ERROR(CheckRange(lba, count_blocks));
  std::lock_guard lock(mu_);
  bool any_mapped = false;
  for (uint64_t i = 0; i < count_blocks && !any_mapped; ++i)
    any_mapped = map_[lba.value + i] != kUnmapped;
  if (any_mapped) {
    // The trim must survive a crash like a write: log it as a record, then unmap.
    for (uint64_t done = 0; done < count_blocks;) {
      auto chunk = static_cast<uint32_t>(std::min<uint64_t>(count_blocks - done, UINT32_MAX));
      RecordHeader h{RecordType::kTrim, Codec::kRaw, 0, lba.value + done, 0, chunk};
      uint64_t loc = 0;
      ERAID_RETURN_IF_ERROR(AppendLocked(kTrimStream, &h, nullptr, &loc));
      eus_[(LocOffset(loc) - BlocksToBytes(data_start_block_)) / eu_bytes_].max_trim_seq = h.seq;
      for (uint64_t i = done; i < done + chunk; ++i) UnmapLocked(lba.value + i, h.seq);
      done += chunk;
    }
  }
  // A FlashAlloc range ends when the whole of it has been trimmed.
  const uint64_t end = lba.value + count_blocks;
  auto it = ranges_.upper_bound(lba.value);
  if (it != ranges_.begin()) --it;
  while (it != ranges_.end() && it->first < end) {
    auto next = std::next(it);
    if (it->first >= lba.value && it->second.first <= end) CloseRangeLocked(it);
    it = next;
  }
  return Status::Ok();
}

Status CompressedDrive::FlashAlloc(Lba lba, uint64_t count_blocks) {
  if (!options_.flashalloc || options_.max_flashalloc_ranges == 0) {
    return Status::NotSupported("FlashAlloc is disabled on " + name());
  }
  ERAID_RETURN_IF_ERROR(CheckRange(lba, count_blocks));
  ERAID_RETURN_IF_ERROR(
      DrainCacheOf(lba, count_blocks));  // cached writes of the range: the streams of before
  std::lock_guard lock(mu_);
  const uint64_t end = lba.value + count_blocks;
  // A new range replaces any it overlaps.
  auto it = ranges_.upper_bound(lba.value);
  if (it != ranges_.begin()) --it;
  while (it != ranges_.end() && it->first < end) {
    auto next = std::next(it);
    if (it->second.first > lba.value) CloseRangeLocked(it);
    it = next;
  }
  if (ranges_.size() >= options_.max_flashalloc_ranges) {
    auto oldest = ranges_.begin();
    for (auto r = ranges_.begin(); r != ranges_.end(); ++r) {
      if (streams_[r->second.second].last_use < streams_[oldest->second.second].last_use)
        oldest = r;
    }
    CloseRangeLocked(oldest);
    ++stats_.flashalloc_evictions;
  }
  uint32_t stream = kFirstRangeStream;
  while (streams_[stream].active) ++stream;
  streams_[stream].active = true;
  streams_[stream].last_use = ++use_clock_;
  ranges_[lba.value] = {end, stream};
  return Status::Ok();
}

void CompressedDrive::Flusher() {
  NameThisThread("drive-flush");
  std::unique_lock lock(cache_mu_);
  for (;;) {
    flusher_cv_.wait(lock, [&] { return flusher_stop_ || !flush_queue_.empty(); });
    if (flush_queue_.empty()) return;  // stopping, and nothing is left
    // Every flush queued by now: one flash flush covers them all.
    std::deque<PendingFlush> batch = std::exchange(flush_queue_, {});
    lock.unlock();
    uint64_t upto = 0;
    bool any = false;
    for (const PendingFlush& f : batch) {
      if (!f.status.ok()) continue;
      upto = std::max(upto, f.upto);
      any = true;
    }
    Status flushed = any ? flash_.Flush() : Status::Ok();
    if (any && flushed.ok()) {
      std::lock_guard l(mu_);
      durable_seq_ = std::max(durable_seq_, upto);
    }
    for (PendingFlush& f : batch)
      completions_.Push(std::move(f.done), f.status.ok() ? flushed : f.status);
    lock.lock();
    async_flushes_ -= batch.size();
    cache_done_cv_.notify_all();
  }
}

Status CompressedDrive::Close() {
  ERAID_RETURN_IF_ERROR(DrainCache());
  std::lock_guard lock(mu_);
  return CheckpointLocked();
}

Status CompressedDrive::CheckInvariants() {
  ERAID_RETURN_IF_ERROR(DrainCache());
  std::unique_lock lock(mu_);
  WaitForBackgroundLocked();
  auto broken = [](const std::string& what) {
    return Status::Corruption("drive invariant: " + what);
  };
  const uint64_t data_start = BlocksToBytes(data_start_block_);
  std::vector<uint64_t> live(num_eus_, 0);
  uint64_t total = 0;
  for (uint64_t lba = 0; lba < map_.size(); ++lba) {
    const uint64_t loc = map_[lba];
    if (loc == kUnmapped || loc == kLostBlock) continue;
    const uint64_t off = LocOffset(loc), len = LocLength(loc);
    const std::string at = "lba " + std::to_string(lba) + ": ";
    if (off < data_start || off - data_start >= uint64_t{num_eus_} * eu_bytes_) {
      return broken(at + "record outside the data area");
    }
    const uint64_t e = (off - data_start) / eu_bytes_;
    const Eu& eu = eus_[e];
    if (eu.state != Eu::State::kOpen && eu.state != Eu::State::kSealed) {
      return broken(at + "record in erase unit " + std::to_string(e) +
                    ", which is free or being erased");
    }
    if ((off - data_start) % eu_bytes_ + len > eu.write_ptr) {
      return broken(at + "record past erase unit " + std::to_string(e) + "'s write pointer");
    }
    live[e] += len;
    total += len;
  }
  size_t free_units = 0, open_units = 0;
  for (uint32_t e = 0; e < num_eus_; ++e) {
    const Eu& eu = eus_[e];
    if (live[e] != eu.live_bytes) {
      return broken("erase unit " + std::to_string(e) + " counts " + std::to_string(eu.live_bytes) +
                    " live bytes, its mapped records take " + std::to_string(live[e]) +
                    " (invariant 4)");
    }
    if (eu.state == Eu::State::kFree && (eu.write_ptr != 0 || eu.live_bytes != 0)) {
      return broken("free erase unit " + std::to_string(e) + " holds records");
    }
    free_units += eu.state == Eu::State::kFree;
    open_units += eu.state == Eu::State::kOpen;
  }
  if (total != stats_.live_bytes) {
    return broken("live bytes " + std::to_string(stats_.live_bytes) + ", mapped records " +
                  std::to_string(total));
  }
  std::vector<bool> listed(num_eus_, false);
  for (uint32_t e : free_eus_) {
    if (e >= num_eus_ || listed[e] || eus_[e].state != Eu::State::kFree) {
      return broken("free list entry " + std::to_string(e) +
                    " is out of range, repeated or not free");
    }
    listed[e] = true;
  }
  if (free_eus_.size() != free_units) {
    return broken(std::to_string(free_units) + " free erase units, " +
                  std::to_string(free_eus_.size()) + " on the free list");
  }
  size_t streams_open = 0;
  for (const Stream& st : streams_) {
    if (st.eu < 0) continue;
    ++streams_open;
    if (static_cast<uint64_t>(st.eu) >= num_eus_ ||
        eus_[static_cast<size_t>(st.eu)].state != Eu::State::kOpen) {
      return broken("a stream's erase unit " + std::to_string(st.eu) + " is not open");
    }
  }
  if (streams_open != open_units) {
    return broken(std::to_string(open_units) + " open erase units, " +
                  std::to_string(streams_open) + " held by streams");
  }
  return Status::Ok();
}

DriveStats CompressedDrive::stats() const {
  std::lock_guard lock(mu_);
  DriveStats s = stats_;
  s.free_eus = free_eus_.size();
  s.used_eu_bytes = (num_eus_ - free_eus_.size()) * eu_bytes_;
  s.flashalloc_ranges = ranges_.size();
  return s;
}

std::optional<RangeUsage> CompressedDrive::Usage(Lba lba, uint64_t count_blocks) const {
  RangeUsage u;
  if (lba.value >= logical_blocks_) return u;
  uint64_t end = std::min(logical_blocks_, lba.value + count_blocks);
  std::lock_guard lock(mu_);
  for (uint64_t b = lba.value; b < end; ++b) {
    uint64_t loc = map_[b];
    if (loc == kUnmapped || loc == kLostBlock) continue;
    ++u.mapped_blocks;
    u.stored_bytes += LocLength(loc);
  }
  return u;
}

// ---------------------------------------------------------------- internals

void CompressedDrive::UnmapLocked(uint64_t lba, uint64_t by_seq) {
  uint64_t loc = map_[lba];
  map_[lba] = kUnmapped;
  if (loc == kUnmapped || loc == kLostBlock) return;
  Eu& eu = eus_[(LocOffset(loc) - BlocksToBytes(data_start_block_)) / eu_bytes_];
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
  Stream& s = streams_[stream];
  ERAID_RETURN_IF_ERROR(WritePagesAsyncLocked(s));
  eus_[static_cast<size_t>(s.eu)].state = Eu::State::kSealed;
  s.eu = -1;
  return Status::Ok();
}

Status CompressedDrive::AppendLocked(uint32_t stream, RecordHeader* h, const std::byte* payload,
                                     uint64_t* loc) {
  const uint32_t len = h->record_bytes();
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
  Eu& eu = eus_[static_cast<size_t>(s.eu)];
  std::byte* dst = s.buf.data() + eu.write_ptr;
  std::span<const std::byte> body(payload, h->payload_bytes);
  if (!body.empty()) std::memcpy(dst + kRecordHeaderBytes, payload, body.size());
  h->seq = next_seq_++;
  if (s.first_unsynced_seq == 0) s.first_unsynced_seq = h->seq;
  EncodeRecordHeader(*h, body, dst);
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
  const Eu& eu = eus_[index];
  return !eu.writing && !(eu.state == Eu::State::kOpen && streams_[eu.stream].eu == index);
}

Status CompressedDrive::ReadRecordLocked(uint64_t loc, std::vector<std::byte>* out) {
  const uint64_t offset = LocOffset(loc);
  const uint32_t len = LocLength(loc);
  const uint64_t rel = offset - BlocksToBytes(data_start_block_);
  const auto index = static_cast<uint32_t>(rel / eu_bytes_);
  const uint64_t in_eu = rel % eu_bytes_;
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

Status CompressedDrive::CheckpointLocked() {
  // One being written without the lock: this one follows it. (Never from inside a
  // collection: AppendLocked waited before it began.)
  WaitForBackgroundLocked();
  ERAID_RETURN_IF_ERROR(FlushLocked());
  CheckpointHeader h;
  std::vector<std::byte> slot = EncodeCheckpointLocked(&h);
  ERAID_RETURN_IF_ERROR(flash_.Write(Lba(1 + (h.ckpt_count % 2) * ckpt_slot_blocks_), slot)
                            .WithContext("checkpoint"));
  ERAID_RETURN_IF_ERROR(flash_.Flush());
  CheckpointWrittenLocked(h, slot.size());
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
  std::vector<std::byte>& slot = ckpt_image_;
  SnapshotCheckpointLocked(&h, &slot);
  lock.unlock();
  Status st = [&]() -> Status {
    SealCheckpoint(&h, &slot);
    ERAID_RETURN_IF_ERROR(WaitForWrites(writes));
    ERAID_RETURN_IF_ERROR(flash_.Flush());
    ERAID_RETURN_IF_ERROR(flash_.Write(Lba(1 + (h.ckpt_count % 2) * ckpt_slot_blocks_), slot)
                              .WithContext("checkpoint"));
    return flash_.Flush();
  }();
  lock.lock();
  ERAID_RETURN_IF_ERROR(st);
  durable_seq_ = std::max(durable_seq_, upto);
  CheckpointWrittenLocked(h, slot.size());
  return Status::Ok();
}

void CompressedDrive::CheckpointWrittenLocked(const CheckpointHeader& h, uint64_t slot_bytes) {
  stats_.flash_write_bytes += slot_bytes;
  stats_.meta_write_bytes += slot_bytes;
  ++stats_.checkpoints;
  ckpt_count_ = h.ckpt_count;
  ckpt_seq_ = h.ckpt_seq;
}

std::vector<std::byte> CompressedDrive::EncodeCheckpointLocked(CheckpointHeader* header) {
  std::vector<std::byte> slot;
  SnapshotCheckpointLocked(header, &slot);
  SealCheckpoint(header, &slot);
  return slot;
}

void CompressedDrive::SnapshotCheckpointLocked(CheckpointHeader* header,
                                               std::vector<std::byte>* slot) {
  slot->resize(BlocksToBytes(ckpt_slot_blocks_));
  std::byte* p = slot->data() + kBlockSize;
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(p, map_.data(), map_.size() * 8);  // the on-disk form already
    p += map_.size() * 8;
  } else {
    for (uint64_t loc : map_) {
      PutLe64(p, loc);
      p += 8;
    }
  }
  for (const Eu& eu : eus_) {
    bool used = eu.state != Eu::State::kFree;
    PutLe64(p, used ? eu.gen : 0);
    PutLe32(p + 8, used ? eu.write_ptr : 0);
    p[12] = static_cast<std::byte>(used);
    p += kCheckpointEuEntryBytes;
  }
  // The rest of the slot is zeros, as every checkpoint wrote it (the buffer is reused).
  std::memset(p, 0, static_cast<size_t>(slot->data() + slot->size() - p));
  CheckpointHeader& h = *header;
  h = CheckpointHeader{};
  h.ckpt_seq = next_seq_ - 1;
  h.next_seq = next_seq_;
  h.ckpt_count = ckpt_count_ + 1;
  h.logical_blocks = logical_blocks_;
  h.num_eus = num_eus_;
  h.payload_bytes = static_cast<uint64_t>(p - (slot->data() + kBlockSize));
  bytes_since_ckpt_ = 0;
}

void CompressedDrive::SealCheckpoint(CheckpointHeader* header, std::vector<std::byte>* slot) {
  header->payload_crc = Crc32c(slot->data() + kBlockSize, header->payload_bytes);
  EncodeCheckpointHeader(*header, *slot);
}

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
  static const std::vector<std::byte> zero_page(kBlockSize);
  Status st;
  for (uint32_t v : picked) {
    st = flash_.Write(Lba(data_start_block_ + uint64_t(v) * eu_blocks_), zero_page);
    if (!st.ok()) break;
  }
  lock.lock();
  ERAID_RETURN_IF_ERROR(st);
  erased = true;
  return Status::Ok();
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
    static const std::vector<std::byte> zero_page(kBlockSize);
    for (uint32_t v : pending) {
      erasures_.fetch_add(1, std::memory_order_release);  // before the bytes go (DoRead)
      ERAID_RETURN_IF_ERROR(
          flash_.Write(Lba(data_start_block_ + uint64_t(v) * eu_blocks_), zero_page));
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
    const uint32_t len = h->record_bytes();
    if (off + len > end) break;
    const uint64_t loc = PackLoc(eu_offset + off, len);
    if (h->type == RecordType::kData && h->lba < logical_blocks_ && map_[h->lba] == loc) {
      auto checked = DecodeRecord(std::span(buf).subspan(off, len), /*check_crc=*/true);
      if (!checked.ok()) {
        // The only copy is damaged: say so on every later read rather than return it.
        UnmapLocked(h->lba, 0);
        map_[h->lba] = kLostBlock;
      } else {
        RecordHeader moved = *h;  // a new sequence number: it is the newest version now
        uint64_t new_loc = 0;
        ERAID_RETURN_IF_ERROR(
            AppendLocked(kGcStream, &moved, buf.data() + off + kRecordHeaderBytes, &new_loc));
        map_[h->lba] = new_loc;
        eus_[victim].live_bytes -= len;
        eus_[(LocOffset(new_loc) - BlocksToBytes(data_start_block_)) / eu_bytes_].live_bytes += len;
        stats_.gc_relocated_bytes += len;
      }
    }
    off += len;
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- recovery

Status CompressedDrive::RecoverLocked() {
  // 1. The newer of the two valid checkpoints.
  std::vector<std::byte> best;
  CheckpointHeader best_header;
  for (uint32_t slot = 0; slot < 2; ++slot) {
    std::vector<std::byte> buf(BlocksToBytes(ckpt_slot_blocks_));
    if (!flash_.Read(Lba(1 + uint64_t(slot) * ckpt_slot_blocks_), buf).ok()) continue;
    auto h = DecodeCheckpointHeader(buf);
    if (!h.ok() || h->logical_blocks != logical_blocks_ || h->num_eus != num_eus_ ||
        h->payload_bytes != logical_blocks_ * 8 + uint64_t(num_eus_) * kCheckpointEuEntryBytes ||
        Crc32c(buf.data() + kBlockSize, h->payload_bytes) != h->payload_crc) {
      continue;
    }
    if (best.empty() || h->ckpt_count > best_header.ckpt_count) {
      best = std::move(buf);
      best_header = *h;
    }
  }
  if (best.empty()) return Status::Corruption("no valid checkpoint on the drive");

  const std::byte* p = best.data() + kBlockSize;
  for (uint64_t b = 0; b < logical_blocks_; ++b, p += 8) map_[b] = GetLe64(p);
  struct CkptEu {
    uint64_t gen;
    uint32_t write_ptr;
    bool used;
  };
  std::vector<CkptEu> ckpt_eus(num_eus_);
  for (auto& e : ckpt_eus) {
    e = {GetLe64(p), GetLe32(p + 8), std::to_integer<uint8_t>(p[12]) != 0};
    p += kCheckpointEuEntryBytes;
  }
  const uint64_t ckpt_seq = best_header.ckpt_seq;
  uint64_t max_seq = std::max<uint64_t>(best_header.next_seq, 1) - 1;

  // 2. Scan every erase unit for records newer than the checkpoint.
  struct Found {
    uint64_t seq;
    RecordType type;
    uint64_t lba;
    uint32_t count;
    uint64_t loc;
  };
  std::vector<Found> found;
  std::vector<std::byte> buf(eu_bytes_);
  free_eus_.clear();
  for (uint32_t i = 0; i < num_eus_; ++i) {
    eus_[i] = Eu{};
    const uint64_t eu_offset = BlocksToBytes(data_start_block_) + uint64_t(i) * eu_bytes_;
    // The header page first; then only the pages that can hold records after `start`
    // (a clean shutdown leaves nothing to read past each EU's checkpointed end).
    ERAID_RETURN_IF_ERROR(
        flash_.Read(Lba(eu_offset / kBlockSize), std::span(buf).first(kBlockSize)));
    auto head = DecodeRecord(std::span(buf).first(kBlockSize), /*check_crc=*/true);
    bool valid = head.ok() && head->type == RecordType::kEuHeader && head->lba == i;
    uint32_t start = 0;
    if (valid && ckpt_eus[i].used && head->seq == ckpt_eus[i].gen) {
      start = ckpt_eus[i].write_ptr;  // same incarnation: only what follows the checkpoint
    } else if (valid && head->seq > ckpt_seq) {
      start = kRecordHeaderBytes;  // allocated after the checkpoint: all of it
    } else {
      free_eus_.push_back(i);  // erased, never used, or a stale incarnation
      continue;
    }
    const uint64_t gen = head->seq;
    max_seq = std::max(max_seq, gen);
    if (const uint64_t first_page = std::max<uint64_t>(1, start / kBlockSize);
        first_page < eu_blocks_) {
      ERAID_RETURN_IF_ERROR(flash_.Read(Lba(eu_offset / kBlockSize + first_page),
                                        std::span(buf).subspan(BlocksToBytes(first_page))));
    }
    uint32_t off = start;
    while (off + kRecordHeaderBytes <= eu_bytes_) {
      auto h = DecodeRecord(std::span(buf).subspan(off), /*check_crc=*/false);
      if (!h.ok() || h->type == RecordType::kEuHeader || h->seq <= gen ||
          off + h->record_bytes() > eu_bytes_ ||
          !DecodeRecord(std::span(buf).subspan(off, h->record_bytes()), true).ok()) {
        break;  // the end of what reached flash in this incarnation
      }
      found.push_back(
          {h->seq, h->type, h->lba, h->count_blocks, PackLoc(eu_offset + off, h->record_bytes())});
      max_seq = std::max(max_seq, h->seq);
      off += h->record_bytes();
    }
    eus_[i] = Eu{Eu::State::kSealed, 0, gen, off, 0, 0};
  }

  // 3. Apply them oldest first, so the newest write or trim of each LBA wins.
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.seq < b.seq; });
  for (const Found& f : found) {
    if (f.seq <= ckpt_seq) continue;
    if (f.type == RecordType::kData) {
      if (f.lba < logical_blocks_) map_[f.lba] = f.loc;
    } else {
      uint64_t end = std::min<uint64_t>(logical_blocks_, f.lba + f.count);
      for (uint64_t b = f.lba; b < end; ++b) map_[b] = kUnmapped;
    }
  }

  // 4. Rebuild the accounting from the mapping (invariant 4).
  stats_.live_bytes = 0;
  stats_.mapped_blocks = 0;
  for (uint64_t b = 0; b < logical_blocks_; ++b) {
    uint64_t loc = map_[b];
    if (loc == kUnmapped || loc == kLostBlock) continue;
    uint64_t rel = LocOffset(loc) - BlocksToBytes(data_start_block_);
    if (LocOffset(loc) < BlocksToBytes(data_start_block_) || rel / eu_bytes_ >= num_eus_ ||
        eus_[rel / eu_bytes_].state == Eu::State::kFree) {
      map_[b] = kLostBlock;  // points where nothing survives: never return garbage for it
      continue;
    }
    eus_[rel / eu_bytes_].live_bytes += LocLength(loc);
    stats_.live_bytes += LocLength(loc);
    ++stats_.mapped_blocks;
  }
  live_bytes_.store(stats_.live_bytes, std::memory_order_release);
  std::reverse(free_eus_.begin(), free_eus_.end());
  next_seq_ = max_seq + 1;
  ckpt_count_ = best_header.ckpt_count;
  ckpt_seq_ = ckpt_seq;
  // 5. Fold the replay into a fresh checkpoint.
  return CheckpointLocked();
}

}  // namespace eraid
