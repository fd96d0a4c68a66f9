// The array's invariants, checked against its in-memory state (CheckInvariants), for the
// model-based and crash tests to call after every step. docs/raid.md states them.
#include <algorithm>
#include <string>

#include "raid/array_internal.h"

namespace eraid {

using namespace raid_format;     // NOLINT: this file checks that format's state
using namespace array_internal;  // NOLINT: the array's own helpers

namespace {
Status Broken(uint32_t segment, const std::string& what) {
  return Status::Corruption("array invariant: segment " + std::to_string(segment) + ": " + what);
}
}  // namespace

Status ElasticArray::CheckSegmentLocked(uint32_t index) const {
  ERAID_CHECK(index < segments_.size());
  const Segment& seg = *segments_[index];
  const uint64_t rb = geometry_.row_blocks();
  const uint32_t frontier = seg.frontier;
  // One CRC and one summary flag per written position (and a tag pair, until taken); a
  // sealed segment's CRCs may have left the cache, and no segment counts other than its own.
  const bool crc_evicted = seg.entry.sealed && !seg.open && !seg.converting && seg.crc.empty();
  if (seg.crc_counted != seg.crc.capacity() * sizeof(uint32_t))
    return Broken(index, "CRC cache counts other than its CRCs' bytes");
  if ((seg.crc.size() != frontier && !crc_evicted) || seg.is_summary.size() != frontier ||
      (!seg.recovered_tags.empty() && seg.recovered_tags.size() != frontier))
    return Broken(index, "per-position records do not match the frontier");
  if (frontier > geometry_.segment_positions()) return Broken(index, "frontier beyond the segment");
  if (seg.summaries !=
      static_cast<uint64_t>(std::count(seg.is_summary.begin(), seg.is_summary.end(), true)))
    return Broken(index, "summary count is off");
  // A summary opens every batch, and a batch holds at most kSummaryCapacity blocks.
  if (frontier > 0 && !seg.is_summary[0]) return Broken(index, "position 0 is not a summary");
  uint32_t run = 0;
  for (uint32_t pos = 0; pos < frontier; ++pos) {
    run = seg.is_summary[pos] ? 0 : run + 1;
    if (run > kSummaryCapacity) return Broken(index, "a batch longer than a summary holds");
  }
  if (seg.entry.scheme == SegmentScheme::kFree) {
    if (seg.open || frontier != 0 || seg.entry.sealed)
      return Broken(index, "free, yet open, written or sealed");
    return Status::Ok();
  }
  if (seg.open) {
    if (seg.entry.sealed) return Broken(index, "open and sealed");
    if (seg.row_buf.size() != BlocksToBytes(rb)) return Broken(index, "open without a row buffer");
    const uint64_t row_start = uint64_t{seg.row} * rb;
    if (frontier < row_start || frontier - row_start >= rb)
      return Broken(index, "frontier outside the row in the buffer");
    if (seg.row_synced > frontier - row_start) return Broken(index, "more synced than written");
    if (seg.batch_pos == kNoBatch) {
      if (!seg.batch.empty()) return Broken(index, "batch entries without a batch");
    } else {
      if (seg.batch_pos >= frontier || !seg.is_summary[seg.batch_pos])
        return Broken(index, "open batch not at a summary position");
      if (seg.batch.size() != frontier - seg.batch_pos - 1 || seg.batch.size() >= kSummaryCapacity)
        return Broken(index, "open batch does not hold the blocks after its summary");
      for (size_t k = 0; k < seg.batch.size(); ++k) {
        const uint32_t pos = seg.batch_pos + 1 + static_cast<uint32_t>(k);
        if (seg.batch[k].crc != seg.crc[pos])
          return Broken(index, "batch entry differs from its position's record");
      }
    }
    return Status::Ok();
  }
  // Sealed: nothing of an open segment left; its recorded frontier bounds the chain, and
  // lies beyond it only where recovery lost summaries.
  if (!seg.entry.sealed) return Broken(index, "neither free, open nor sealed");
  if (seg.batch_pos != kNoBatch || !seg.batch.empty() || seg.row_buf.size() != 0 ||
      !seg.rows_to_unmirror.empty())
    return Broken(index, "sealed with open-segment state");
  if (seg.entry.frontier < frontier) return Broken(index, "written beyond its recorded frontier");
  if ((seg.entry.frontier > frontier) != seg.summaries_lost)
    return Broken(index, "recorded frontier and lost summaries disagree");
  return Status::Ok();
}

Status ElasticArray::CheckInvariants() const {
  std::lock_guard lock(mu_);
  uint64_t crc_bytes = 0;
  for (uint32_t i = 0; i < segments_.size(); ++i) {
    ERAID_RETURN_IF_ERROR(CheckSegmentLocked(i));
    crc_bytes += segments_[i]->crc_counted;
  }
  if (crc_bytes != crc_bytes_)
    return Status::Corruption("array invariant: the CRC cache counts " +
                              std::to_string(crc_bytes_) + " bytes, its segments hold " +
                              std::to_string(crc_bytes));
  // Work waiting for a flush belongs to segments in the state it assumes.
  for (const auto& [s, epoch] : frees_awaiting_flush_) {
    if (segments_[s]->entry.scheme != SegmentScheme::kFree)
      return Broken(s, "awaits a free's trims but is in use");
  }
  for (const auto& [s, entry] : seals_awaiting_flush_) {
    if (!segments_[s]->entry.sealed || !seal_epochs_.count(s))
      return Broken(s, "awaits a seal record but is not sealed");
  }
  if (seal_epochs_.size() != seals_awaiting_flush_.size())
    return Status::Corruption("array invariant: seal epochs and seals awaiting a flush differ");
  for (const auto& [s, trims] : unmirror_awaiting_flush_) {
    const SegmentScheme scheme = segments_[s]->entry.scheme;
    if (scheme == SegmentScheme::kFree || !SchemeFor(scheme).has_parity())
      return Broken(s, "awaits slot-2 trims of a partial row but keeps no parity");
  }
  // The journal ring never holds more records than a durable checkpoint leaves room for.
  if (journal_seq_ < checkpoint_seq_ || journal_seq_ - checkpoint_seq_ >= kJournalBlocks)
    return Status::Corruption("array invariant: journal ring overrun (seq " +
                              std::to_string(journal_seq_) + ", checkpoint " +
                              std::to_string(checkpoint_seq_) + ")");
  if (pending_checkpoint_seq_ > journal_seq_)
    return Status::Corruption("array invariant: a pending checkpoint ahead of the journal");
  for (uint32_t d = 0; d < io_->count(); ++d) {
    if (joined_generation_[d] > super_generation_)
      return Status::Corruption("array invariant: device " + std::to_string(d) +
                                " joined at a generation not written yet");
  }
  return Status::Ok();
}

}  // namespace eraid
