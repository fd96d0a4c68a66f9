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
  // After a clean close the checkpoint is exact: each EU as it records it, nothing to
  // scan for (one header page per EU was most of an open: 16,384 random reads per 4 GiB).
  const bool clean = (best_header.flags & kCheckpointClean) != 0;

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
    if (clean) {
      if (ckpt_eus[i].used) {
        eus_[i] = Eu{Eu::State::kSealed, 0, ckpt_eus[i].gen, ckpt_eus[i].write_ptr, 0, 0};
        max_seq = std::max(max_seq, ckpt_eus[i].gen);
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

}  // namespace eraid
