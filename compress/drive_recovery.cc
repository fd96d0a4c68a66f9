// Opening a drive: the newest checkpoint, then every record written after it. And the
// drive's invariants, checked (CheckInvariants).
#include <algorithm>
#include <bit>
#include <cstring>

#include "common/crc32c.h"
#include "common/encoding.h"
#include "compress/drive_internal.h"

namespace eraid {

using namespace drive_format;  // NOLINT: this file implements that format
using namespace drive_internal;

// ---------------------------------------------------------------- recovery

struct CompressedDrive::Checkpointed {
  CheckpointHeader header;
  struct Unit {
    uint64_t gen;
    uint32_t write_ptr;
    bool used, sealed;
  };
  std::vector<Unit> units;
  bool clean = false;  // written by a clean close: exact, nothing to scan for
};

struct CompressedDrive::FoundRecord {
  uint64_t seq;
  RecordType type;
  uint64_t lba;
  uint32_t count;
  uint64_t loc;
};

Status CompressedDrive::RecoverLocked() {
  ERAID_ASSIGN_OR_RETURN(const Checkpointed ckpt, LoadNewestCheckpointLocked());
  const uint64_t ckpt_seq = ckpt.header.ckpt_seq;
  uint64_t max_seq = std::max<uint64_t>(ckpt.header.next_seq, 1) - 1;
  opened_after_crash_ = !ckpt.clean;
  std::vector<FoundRecord> found;
  ERAID_RETURN_IF_ERROR(ScanUnitsLocked(ckpt, &found, &max_seq));
  ApplyFoundLocked(found, ckpt_seq);
  const std::vector<uint64_t> lost = CountLiveLocked();
  std::reverse(free_eus_.begin(), free_eus_.end());
  next_seq_ = max_seq + 1;
  ckpt_count_ = ckpt.header.ckpt_count;
  ckpt_seq_ = ckpt_seq;
  // 5. Fold the replay into a fresh checkpoint. After a clean close nothing was replayed:
  // the clean checkpoint on flash is this state exactly and stays the newest, and the
  // first record or erase writes one that is not clean first (DirtyLocked), as after a
  // Close. (Rewritten here, it cost each open a snapshot of the whole map: ~0.1 s and
  // 10,000 page faults per 4 GiB drive.)
  if (ckpt.clean && lost.empty()) {
    clean_on_flash_ = true;
    return Status::Ok();
  }
  return CheckpointLocked();
}

Result<CompressedDrive::Checkpointed> CompressedDrive::LoadNewestCheckpointLocked() {
  // 1. The newer of the two valid checkpoints: both headers first, then the payload of
  // the newer (only the blocks it takes), or of the older if that one fails its CRC.
  struct Candidate {
    CheckpointHeader h;
    uint32_t slot;
  };
  std::vector<Candidate> candidates;
  std::vector<std::byte> head(kBlockSize);
  const uint64_t slot_payload_room = BlocksToBytes(ckpt_slot_blocks_ - 1);
  for (uint32_t slot = 0; slot < 2; ++slot) {
    if (!flash_.Read(Lba(1 + uint64_t(slot) * ckpt_slot_blocks_), head).ok()) continue;
    auto h = DecodeCheckpointHeader(head);
    if (!h.ok() || h->logical_blocks != logical_blocks_ || h->num_eus != num_eus_ ||
        h->payload_bytes > slot_payload_room) {
      continue;
    }
    const uint64_t fixed = h->version == kCheckpointVersionDense
                               ? DensePayloadBytes(logical_blocks_, num_eus_)
                               : SparsePayloadBytes(logical_blocks_, 0, num_eus_);
    if (h->version == kCheckpointVersionDense
            ? h->payload_bytes != fixed
            : h->payload_bytes < fixed || (h->payload_bytes - fixed) % kMapPageBytes) {
      continue;
    }
    candidates.push_back({*h, slot});
  }
  std::sort(candidates.begin(), candidates.end(),
            [](const Candidate& a, const Candidate& b) { return a.h.ckpt_count > b.h.ckpt_count; });
  for (const Candidate& c : candidates) {
    std::vector<std::byte> payload(
        BlocksToBytes(BytesToBlocks(c.h.payload_bytes + kBlockSize - 1)));
    if (payload.empty() ||
        !flash_.Read(Lba(2 + uint64_t(c.slot) * ckpt_slot_blocks_), payload).ok() ||
        Crc32c(payload.data(), c.h.payload_bytes) != c.h.payload_crc ||
        !LoadCheckpointMapLocked(c.h, payload).ok()) {
      continue;
    }
    Checkpointed ckpt;
    ckpt.header = c.h;
    const std::byte* p =
        payload.data() + (c.h.payload_bytes - uint64_t{num_eus_} * kCheckpointEuEntryBytes);
    ckpt.units.resize(num_eus_);
    for (auto& e : ckpt.units) {
      const auto flags = std::to_integer<uint8_t>(p[12]);
      e = {GetLe64(p), GetLe32(p + 8), flags != 0, (flags & kCkptEuSealed) != 0};
      p += kCheckpointEuEntryBytes;
    }
    // After a clean close the checkpoint is exact: each EU as it records it, nothing to
    // scan for (one header page per EU was most of an open: 16,384 random reads per 4 GiB).
    ckpt.clean = (c.h.flags & kCheckpointClean) != 0;
    return ckpt;
  }
  return Status::Corruption("no valid checkpoint on the drive");
}

void CompressedDrive::PrefetchScanLocked(const Checkpointed& ckpt) {
  // Every page the scan may read, named at once (Backend::PrefetchBytes): each erase
  // unit's header page, and past what the checkpoint covers of those in use. The scan's
  // reads then find them in the cache rather than each waiting on the medium.
  std::vector<ByteExtent> pages;
  pages.reserve(num_eus_);
  for (uint32_t i = 0; i < num_eus_; ++i) {
    const uint64_t eu_offset = BlocksToBytes(data_start_block_) + uint64_t(i) * eu_bytes_;
    const auto& u = ckpt.units[i];
    const uint64_t from = u.used && !u.sealed ? u.write_ptr / kBlockSize * kBlockSize : 0;
    pages.push_back({eu_offset, kBlockSize});
    if (from >= kBlockSize && from < eu_bytes_)
      pages.push_back({eu_offset + from, eu_bytes_ - from});
  }
  flash_.PrefetchBytes(pages);
}

Status CompressedDrive::ScanUnitsLocked(const Checkpointed& ckpt, std::vector<FoundRecord>* found,
                                        uint64_t* max_seq) {
  // 2. Scan every erase unit for records newer than the checkpoint.
  std::vector<std::byte> buf(eu_bytes_);
  free_eus_.clear();
  if (!ckpt.clean) PrefetchScanLocked(ckpt);
  for (uint32_t i = 0; i < num_eus_; ++i) {
    const auto& u = ckpt.units[i];
    eus_[i] = Eu{};
    if (ckpt.clean) {
      if (u.used) {
        eus_[i] = Eu{Eu::State::kSealed, 0, u.gen, u.write_ptr, 0, 0};
        *max_seq = std::max(*max_seq, u.gen);
      } else {
        free_eus_.push_back(i);
      }
      continue;
    }
    const uint64_t eu_offset = BlocksToBytes(data_start_block_) + uint64_t(i) * eu_bytes_;
    // The header page first; then only the pages that can hold records after `start`
    // (a clean shutdown leaves nothing to read past each EU's checkpointed end).
    ERAID_RETURN_IF_ERROR(
        flash_.Read(Lba(eu_offset / kBlockSize), std::span(buf).first(kBlockSize)));
    auto head = DecodeRecord(std::span(buf).first(kBlockSize), /*check_crc=*/true);
    bool valid = head.ok() && head->type == RecordType::kEuHeader && head->lba == i;
    uint32_t start = 0;
    if (valid && u.used && head->seq == u.gen && u.sealed) {
      // Same incarnation, sealed before the checkpoint: nothing can follow its write
      // pointer (sealed EUs were most of a crash recovery's reads: ~1 GB per 4 GiB drive).
      eus_[i] = Eu{Eu::State::kSealed, 0, head->seq, u.write_ptr, 0, 0};
      *max_seq = std::max(*max_seq, head->seq);
      continue;
    }
    if (valid && u.used && head->seq == u.gen) {
      start = u.write_ptr;  // same incarnation: only what follows the checkpoint
    } else if (valid && head->seq > ckpt.header.ckpt_seq) {
      start = kRecordHeaderBytes;  // allocated after the checkpoint: all of it
    } else {
      free_eus_.push_back(i);  // erased, never used, or a stale incarnation
      continue;
    }
    const uint64_t gen = head->seq;
    *max_seq = std::max(*max_seq, gen);
    if (const uint64_t first_page = std::max<uint64_t>(1, start / kBlockSize);
        first_page < eu_blocks_) {
      ERAID_RETURN_IF_ERROR(flash_.Read(Lba(eu_offset / kBlockSize + first_page),
                                        std::span(buf).subspan(BlocksToBytes(first_page))));
    }
    uint32_t off = start;
    while (off + kRecordHeaderBytes <= eu_bytes_) {
      auto h = DecodeRecord(std::span(buf).subspan(off), /*check_crc=*/false);
      const uint32_t len = h.ok() ? RecordFootprint(h->record_bytes(), align_shift_) : 0;
      if (!h.ok() || h->type == RecordType::kEuHeader || h->seq <= gen || off + len > eu_bytes_ ||
          !DecodeRecord(std::span(buf).subspan(off, h->record_bytes()), true).ok()) {
        break;  // the end of what reached flash in this incarnation
      }
      found->push_back({h->seq, h->type, h->lba, h->count_blocks, PackLoc(eu_offset + off, len)});
      *max_seq = std::max(*max_seq, h->seq);
      off += len;
    }
    eus_[i] = Eu{Eu::State::kSealed, 0, gen, off, 0, 0};
  }
  return Status::Ok();
}

void CompressedDrive::ApplyFoundLocked(std::vector<FoundRecord>& found, uint64_t ckpt_seq) {
  // 3. Apply them oldest first, so the newest write or trim of each LBA wins.
  std::sort(found.begin(), found.end(),
            [](const FoundRecord& a, const FoundRecord& b) { return a.seq < b.seq; });
  for (const FoundRecord& f : found) {
    if (f.seq <= ckpt_seq) continue;
    if (f.type == RecordType::kData) {
      if (f.lba < logical_blocks_) map_.Set(f.lba, f.loc);
    } else {
      uint64_t end = std::min<uint64_t>(logical_blocks_, f.lba + f.count);
      for (uint64_t b = f.lba; b < end; ++b) map_.Set(b, kUnmapped);
    }
  }
}

std::vector<uint64_t> CompressedDrive::CountLiveLocked() {
  // 4. Rebuild the accounting from the mapping (invariant 4).
  stats_.live_bytes = 0;
  stats_.mapped_blocks = 0;
  std::vector<uint64_t> lost;
  map_.ForEachSet([&](uint64_t b, uint64_t loc) {
    if (loc == kLostBlock) return;
    uint64_t rel = LocOffset(loc) - BlocksToBytes(data_start_block_);
    if (LocOffset(loc) < BlocksToBytes(data_start_block_) || rel / eu_bytes_ >= num_eus_ ||
        eus_[rel / eu_bytes_].state == Eu::State::kFree) {
      lost.push_back(b);  // points where nothing survives: never return garbage for it
      return;
    }
    eus_[rel / eu_bytes_].live_bytes += LocLength(loc);
    stats_.live_bytes += LocLength(loc);
    ++stats_.mapped_blocks;
  });
  for (uint64_t b : lost) map_.Set(b, kLostBlock);
  live_bytes_.store(stats_.live_bytes, std::memory_order_release);
  return lost;
}

Status CompressedDrive::LoadCheckpointMapLocked(const CheckpointHeader& h,
                                                std::span<const std::byte> payload) {
  map_.Clear();
  auto load = [&](uint64_t first, const std::byte* p, uint64_t n) {
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t loc = GetLe64(p + i * 8);
      if (loc == kUnmapped) continue;
      if (!map_.Holds(loc)) {
        return Status::Corruption("checkpoint maps lba " + std::to_string(first + i) +
                                  " to a place no record can have");
      }
      map_.Set(first + i, loc);
    }
    return Status::Ok();
  };
  if (h.version == kCheckpointVersionDense) return load(0, payload.data(), logical_blocks_);
  const std::byte* bitmap = payload.data();
  const std::byte* page = bitmap + MapBitmapBytes(logical_blocks_);
  const uint64_t pages = MapPages(logical_blocks_);
  // Room for every run of the pages present, at once: grown by doubling, the pool was
  // copied over and over into fresh memory (most of an open's page faults).
  if (h.payload_bytes >= SparsePayloadBytes(logical_blocks_, 0, num_eus_)) {
    const uint64_t in_payload =
        (h.payload_bytes - SparsePayloadBytes(logical_blocks_, 0, num_eus_)) / kMapPageBytes;
    map_.Reserve(std::min(pages, in_payload) * (DriveMap::kPageEntries / DriveMap::kRunEntries));
  }
  uint64_t present = 0;
  for (uint64_t k = 0; k < MapBitmapBytes(logical_blocks_) * 8; ++k) {
    if ((std::to_integer<unsigned>(bitmap[k / 8]) >> (k % 8) & 1) == 0) continue;
    if (k >= pages) return Status::Corruption("checkpoint bitmap names a page past the map");
    const uint64_t first = k * kMapPageEntries;
    // The last page's entries past the map must be zero, like the dense form's padding.
    for (uint64_t i = std::min(kMapPageEntries, logical_blocks_ - first); i < kMapPageEntries; ++i)
      if (GetLe64(page + i * 8) != kUnmapped)
        return Status::Corruption("checkpoint maps an LBA past the map");
    ERAID_RETURN_IF_ERROR(load(first, page, std::min(kMapPageEntries, logical_blocks_ - first)));
    page += kMapPageBytes;
    ++present;
  }
  if (SparsePayloadBytes(logical_blocks_, present, num_eus_) != h.payload_bytes)
    return Status::Corruption("checkpoint bitmap and payload size disagree");
  return Status::Ok();
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
  Status bad = Status::Ok();
  map_.ForEachSet([&](uint64_t lba, uint64_t loc) {
    if (!bad.ok() || loc == kLostBlock) return;
    const uint64_t off = LocOffset(loc), len = LocLength(loc);
    const std::string at = "lba " + std::to_string(lba) + ": ";
    if (off < data_start || off - data_start >= uint64_t{num_eus_} * eu_bytes_) {
      bad = broken(at + "record outside the data area");
      return;
    }
    const uint64_t e = (off - data_start) / eu_bytes_;
    const Eu& eu = eus_[e];
    if (eu.state != Eu::State::kOpen && eu.state != Eu::State::kSealed) {
      bad = broken(at + "record in erase unit " + std::to_string(e) +
                   ", which is free or being erased");
      return;
    }
    if ((off - data_start) % eu_bytes_ + len > eu.write_ptr) {
      bad = broken(at + "record past erase unit " + std::to_string(e) + "'s write pointer");
      return;
    }
    live[e] += len;
    total += len;
  });
  ERAID_RETURN_IF_ERROR(bad);
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

}  // namespace eraid
