// libFuzzer target: every decoder of what eraid stores on disk — the array's superblock,
// bitmap checkpoint, journal record and segment summary; the compressing drive's record
// header, superblock and checkpoint header; compressed block payloads; the codec and
// size option parsers. The first input byte picks one, the rest is its input.
//
// Properties: no crash, no sanitizer report, and for anything a decoder accepts, encoding
// what it returned and decoding that again reaches a fixed point (the same bytes).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "compress/codec.h"
#include "compress/drive_format.h"
#include "raid/metadata.h"

namespace {

using Bytes = std::vector<std::byte>;

// The input as one 4 KiB block (zero-padded or cut).
Bytes AsBlock(const uint8_t* data, size_t size) {
  Bytes b(eraid::kBlockSize);
  std::memcpy(b.data(), data, std::min(size, b.size()));
  return b;
}

void Check(bool ok) {
  if (!ok) std::abort();  // libFuzzer reports the input
}

// Decode -> encode -> decode -> encode: the two encodings must be equal.
template <typename Decode, typename Encode>
void FixedPoint(const Bytes& block, Decode decode, Encode encode) {
  auto first = decode(std::span<const std::byte>(block));
  if (!first.ok()) return;
  Bytes a(eraid::kBlockSize), b(eraid::kBlockSize);
  encode(*first, std::span<std::byte>(a));
  auto second = decode(std::span<const std::byte>(a));
  Check(second.ok());
  encode(*second, std::span<std::byte>(b));
  Check(a == b);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  namespace rf = eraid::raid_format;
  namespace df = eraid::drive_format;
  const uint8_t which = data[0] % 10;
  ++data;
  --size;
  const Bytes block = AsBlock(data, size);
  switch (which) {
    case 0:
      FixedPoint(
          block, [](auto in) { return rf::DecodeSuperblock(in); },
          [](const rf::Superblock& v, auto out) { rf::EncodeSuperblock(v, out); });
      break;
    case 1: {
      // The caller knows how many segments to expect: take the count the header claims.
      Bytes in(reinterpret_cast<const std::byte*>(data),
               reinterpret_cast<const std::byte*>(data) + size);
      uint32_t claimed = 0;
      if (size >= 16) std::memcpy(&claimed, data + 12, 4);
      std::vector<rf::SegmentEntry> entries(std::min<uint32_t>(claimed, 1u << 16));
      auto seq = rf::DecodeBitmap(in, &entries);
      if (seq.ok()) {
        Bytes again(in.size() + eraid::kBlockSize);
        again.resize(static_cast<size_t>(rf::BitmapBlocks(static_cast<uint32_t>(entries.size()))) *
                     eraid::kBlockSize);
        rf::EncodeBitmap(*seq, entries, again);
        std::vector<rf::SegmentEntry> back(entries.size());
        auto seq2 = rf::DecodeBitmap(again, &back);
        Check(seq2.ok() && *seq2 == *seq && back.size() == entries.size());
      }
      break;
    }
    case 2:
      FixedPoint(
          block, [](auto in) { return rf::DecodeJournal(in); },
          [](const rf::JournalRecord& v, auto out) { rf::EncodeJournal(v, out); });
      break;
    case 3:
      FixedPoint(
          block, [](auto in) { return rf::DecodeSummary(in); },
          [](const rf::Summary& v, auto out) { rf::EncodeSummary(v, out); });
      break;
    case 4: {
      // A record header, with and without its CRC over a payload that follows it.
      Bytes in(reinterpret_cast<const std::byte*>(data),
               reinterpret_cast<const std::byte*>(data) + size);
      (void)df::DecodeRecord(in, true);
      auto h = df::DecodeRecord(in, false);
      if (h.ok() && in.size() >= df::kRecordHeaderBytes) {
        Bytes out(df::kRecordHeaderBytes);
        df::EncodeRecordHeader(*h, {}, out.data());
        auto again = df::DecodeRecord(out, false);
        Check(again.ok() && again->lba == h->lba && again->seq == h->seq && again->type == h->type);
      }
      break;
    }
    case 5:
      FixedPoint(
          block, [](auto in) { return df::DecodeSuperblock(in); },
          [](const df::Superblock& v, auto out) { df::EncodeSuperblock(v, out); });
      break;
    case 6:
      FixedPoint(
          block, [](auto in) { return df::DecodeCheckpointHeader(in); },
          [](const df::CheckpointHeader& v, auto out) { df::EncodeCheckpointHeader(v, out); });
      break;
    case 7: {
      // A compressed payload: zstd (1) or raw (0) by the next byte.
      if (size == 0) break;
      const auto codec = static_cast<eraid::Codec>(data[0] % 2);
      std::span<const std::byte> payload(reinterpret_cast<const std::byte*>(data + 1), size - 1);
      Bytes out(eraid::kBlockSize);
      (void)eraid::DecompressBlock(codec, payload, out.data());
      break;
    }
    case 8:
      (void)eraid::ParseCodecConfig(std::string(reinterpret_cast<const char*>(data), size));
      break;
    case 9: {
      // Round trip from the other side: a summary built from the input encodes and
      // decodes to itself.
      rf::Summary s;
      size_t at = 0;
      auto take = [&](size_t n) {
        uint64_t v = 0;
        for (size_t i = 0; i < n && at < size; ++i) v |= uint64_t{data[at++]} << (8 * i);
        return v;
      };
      s.segment = static_cast<uint32_t>(take(4));
      s.generation = take(8);
      s.position = static_cast<uint32_t>(take(4));
      const size_t n = std::min<size_t>(take(1), rf::kSummaryCapacity);
      for (size_t i = 0; i < n; ++i)
        s.entries.push_back({take(8), take(8), static_cast<uint32_t>(take(4))});
      Bytes out(eraid::kBlockSize);
      rf::EncodeSummary(s, out);
      auto back = rf::DecodeSummary(out);
      Check(back.ok() && back->segment == s.segment && back->generation == s.generation &&
            back->position == s.position && back->entries.size() == s.entries.size());
      for (size_t i = 0; i < n; ++i) {
        Check(back->entries[i].tag_lba == s.entries[i].tag_lba &&
              back->entries[i].tag_time == s.entries[i].tag_time &&
              back->entries[i].crc == s.entries[i].crc);
      }
      break;
    }
  }
  return 0;
}
