// The compressed drive: lifecycle, host operations, reads and writes of blocks, trims,
// FlashAlloc, statistics. The rest: drive_cache.cc (the write cache), drive_log.cc (the
// flash log: streams, erase units, pages, flushes, checkpoints), drive_gc.cc (device
// GC and the eraser), drive_recovery.cc (open after a crash; CheckInvariants).
#include <algorithm>
#include <cstring>

#include "common/crc32c.h"
#include "common/thread_priority.h"
#include "compress/drive_internal.h"

namespace eraid {

using namespace drive_format;  // NOLINT: this file implements that format
using namespace drive_internal;

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
  if (o.format_version != kDriveFormatVersion && o.format_version != kDriveFormatVersionUnaligned) {
    return Status::InvalidArgument("drive format must be " +
                                   std::to_string(kDriveFormatVersionUnaligned) + " or " +
                                   std::to_string(kDriveFormatVersion));
  }
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
      format_version_(g.format_version),
      align_shift_(g.record_align_shift),
      // Live data is capped so that, with every stream holding a partly filled EU and the
      // GC reserve free, some sealed EU always has at least a record's worth of garbage
      // (docs/compressed-drive.md, "Capacity").
      usable_bytes_([&] {
        int64_t eus = int64_t{g.num_eus} - (kFirstRangeStream + options.max_flashalloc_ranges) -
                      options.gc_free_eus - 1;
        return eus > 0 ? uint64_t(eus) * (BlocksToBytes(g.eu_blocks) - kRecordHeaderBytes -
                                          RecordFootprint(kMaxRecordBytes, g.record_align_shift))
                       : 0;
      }()),
      map_(g.logical_blocks, g.record_align_shift),
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
  const uint32_t align_shift =
      options.format_version == kDriveFormatVersionUnaligned ? 0 : kRecordAlignShift;
  if (BlocksToBytes(flash_blocks) > DriveMap::MaxFlashBytes(align_shift)) {
    return Status::InvalidArgument("flash of " + std::to_string(BlocksToBytes(flash_blocks)) +
                                   " bytes is more than a format " +
                                   std::to_string(options.format_version) + " drive can map (" +
                                   std::to_string(DriveMap::MaxFlashBytes(align_shift)) + ")");
  }
  Geometry g{options.erase_unit_blocks, 0, 0, 0, 0, options.format_version, align_shift};
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
                static_cast<uint32_t>(options.expansion * 1000),
                g.format_version,
                g.record_align_shift};
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
  o.format_version = sb.version;
  if (BlocksToBytes(sb.flash_blocks) > DriveMap::MaxFlashBytes(sb.record_align_shift)) {
    // Format 1 packed records back to back: its byte offsets need more than 6-byte map
    // entries beyond 32 GiB (DriveMap).
    return Status::NotSupported(
        "drive format " + std::to_string(sb.version) + " with " +
        std::to_string(BlocksToBytes(sb.flash_blocks)) + " bytes of flash: this build maps " +
        std::to_string(DriveMap::MaxFlashBytes(sb.record_align_shift)) +
        " at most for that format; copy the data to a drive formatted by this build");
  }
  Geometry g{sb.eu_blocks,        sb.num_eus, sb.logical_blocks,    sb.data_start_block,
             sb.ckpt_slot_blocks, sb.version, sb.record_align_shift};
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

Status CompressedDrive::DoRead(Lba lba, std::span<std::byte> buf) {
  ERAID_RETURN_IF_ERROR(CheckExtent(lba, buf.size()));
  for (uint64_t i = 0; i < BytesToBlocks(buf.size()); ++i) {
    ERAID_RETURN_IF_ERROR(ReadBlock(lba.value + i, buf.data() + BlocksToBytes(i)));
  }
  return Status::Ok();
}

void CompressedDrive::Prefetch(std::span<const Lba> blocks) {
  std::vector<ByteExtent> records;
  records.reserve(blocks.size());
  {
    std::lock_guard lock(mu_);
    for (Lba b : blocks) {
      if (b.value >= logical_blocks_) continue;
      const uint64_t loc = map_.Get(b.value);
      if (loc != kUnmapped && loc != kLostBlock && OnFlashLocked(loc))
        records.push_back({LocOffset(loc), LocLength(loc)});
    }
  }
  flash_.PrefetchBytes(records);
}

void CompressedDrive::ReadStoredMany(std::span<const Lba> blocks, std::span<std::byte> out,
                                     std::span<StoredBlock> stored, std::span<Status> results) {
  ReadManyKeeping(blocks, out, stored, results);
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
      loc = map_.Get(block);
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
    return DecodeBlockRecord(block, record, out, keep);
  }
}

Status CompressedDrive::DecodeBlockRecord(uint64_t block, std::span<const std::byte> record,
                                          std::byte* out, StoredBlock* keep) {
  auto h = DecodeRecord(record, /*check_crc=*/true);
  Status s = h.ok() ? Status::Ok() : h.status();
  if (s.ok() && (h->type != RecordType::kData || h->lba != block)) {
    s = Status::Corruption("record belongs to another lba");
  }
  const auto payload = record.subspan(kRecordHeaderBytes, s.ok() ? h->payload_bytes : 0);
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

void CompressedDrive::SubmitReadMany(std::span<const Lba> blocks, std::span<std::byte> out,
                                     std::span<Status> results, IoCallback done) {
  // Read here, the records in one batch from the flash (as SubmitRead reads at once).
  ReadManyKeeping(blocks, out, {}, results);
  completions_.Push(std::move(done), Status::Ok());
}

void CompressedDrive::ReadManyKeeping(std::span<const Lba> blocks, std::span<std::byte> out,
                                      std::span<StoredBlock> keep, std::span<Status> results) {
  auto block_out = [&](size_t i) { return out.subspan(BlocksToBytes(i), kBlockSize); };
  auto keep_of = [&](size_t i) { return keep.empty() ? nullptr : &keep[i]; };
  for (StoredBlock& b : keep) b.bytes.clear();  // unmapped, cached: no stored form
  // The write cache's hits first, as Read() does (a cached block has no record yet: the
  // data only). A block leaves the cache only after the map points at its record, so a
  // miss reads the stored copy (or a newer one) below, with the others.
  std::vector<bool> hit;
  if (options_.write_cache_blocks && cached_size_.load(std::memory_order_acquire) != 0) {
    hit.assign(blocks.size(), false);
    std::lock_guard lock(cache_mu_);
    for (size_t i = 0; i < blocks.size(); ++i) {
      auto it = cached_.find(blocks[i].value);
      if (it == cached_.end() || !CheckExtent(blocks[i], kBlockSize).ok()) continue;
      results[i] = it->second.CopyTo(block_out(i).data());
      hit[i] = true;
    }
  }
  // As in ReadBlock: the records are found under the lock and read without it; if an
  // erase went by meanwhile, each is read again the careful way.
  std::vector<size_t> which;
  std::vector<ByteExtent> extents;
  uint64_t erasures = 0;
  {
    std::lock_guard lock(mu_);
    erasures = erasures_.load(std::memory_order_relaxed);
    for (size_t i = 0; i < blocks.size(); ++i) {
      if (!hit.empty() && hit[i]) continue;
      results[i] = CheckExtent(blocks[i], kBlockSize);
      if (!results[i].ok()) continue;
      const uint64_t loc = map_.Get(blocks[i].value);
      if (loc == kUnmapped) {
        std::memset(block_out(i).data(), 0, kBlockSize);
      } else if (loc == kLostBlock || !OnFlashLocked(loc)) {
        which.push_back(i);  // ReadBlock below: its message, its count, its buffer copy
        extents.push_back({0, 0});
      } else {
        which.push_back(i);
        extents.push_back({LocOffset(loc), LocLength(loc)});
      }
    }
  }
  uint64_t total = 0;
  for (const ByteExtent& e : extents) total += e.length;
  // Not zeroed: every byte a record is decoded from is read first (zeroed, megabytes per
  // call, it was a large part of an array open's memset and page faults).
  auto records = std::make_unique_for_overwrite<std::byte[]>(std::max<uint64_t>(total, 1));
  std::vector<std::span<std::byte>> bufs;
  std::vector<ByteExtent> reads;
  std::vector<size_t> read_of(extents.size(), SIZE_MAX);
  uint64_t at = 0;
  for (size_t k = 0; k < extents.size(); ++k) {
    if (extents[k].length == 0) continue;
    read_of[k] = reads.size();
    reads.push_back(extents[k]);
    bufs.emplace_back(records.get() + at, extents[k].length);
    at += extents[k].length;
  }
  std::vector<Status> got(reads.size());
  flash_.ReadBytesMany(reads, bufs, got);
  const bool erased = erasures_.load(std::memory_order_acquire) != erasures;
  for (size_t k = 0; k < which.size(); ++k) {
    const size_t i = which[k];
    const size_t r = read_of[k];
    if (r == SIZE_MAX || erased || !got[r].ok()) {
      results[i] = r != SIZE_MAX && !erased && got[r].code() == StatusCode::kIoError
                       ? got[r]
                       : ReadBlock(blocks[i].value, block_out(i).data(), keep_of(i));
      continue;
    }
    results[i] = DecodeBlockRecord(blocks[i].value, bufs[r], block_out(i).data(), keep_of(i));
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
    uint64_t loc = map_.Get(lba + i);
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
    map_.Set(block, loc);
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
    any_mapped = map_.Get(lba.value + i) != kUnmapped;
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
  return CheckpointLocked(/*clean=*/true);
}

DriveStats CompressedDrive::stats() const {
  std::lock_guard lock(mu_);
  DriveStats s = stats_;
  s.free_eus = free_eus_.size();
  s.used_eu_bytes = (num_eus_ - free_eus_.size()) * eu_bytes_;
  s.flashalloc_ranges = ranges_.size();
  s.map_bytes = map_.bytes();
  return s;
}

std::optional<RangeUsage> CompressedDrive::Usage(Lba lba, uint64_t count_blocks) const {
  RangeUsage u;
  if (lba.value >= logical_blocks_) return u;
  uint64_t end = std::min(logical_blocks_, lba.value + count_blocks);
  std::lock_guard lock(mu_);
  for (uint64_t b = lba.value; b < end; ++b) {
    uint64_t loc = map_.Get(b);
    if (loc == kUnmapped || loc == kLostBlock) continue;
    ++u.mapped_blocks;
    u.stored_bytes += LocLength(loc);
  }
  return u;
}

}  // namespace eraid
