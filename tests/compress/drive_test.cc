// CompressedDrive behaviour: data integrity at every compressibility, honest ratios,
// zeros for unwritten and trimmed blocks, no-space, device GC at high fullness,
// FlashAlloc, reopen, corruption detection, and faults surfacing as statuses.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <thread>

#include "common/data_gen.h"
#include "compress/compressed_drive.h"
#include "compress/drive_format.h"
#include "compress/faulty_backend.h"
#include "compress/file_backend.h"
#include "compress/mem_backend.h"
#include "tests/support/seed.h"

namespace eraid {
namespace {

using Block = std::vector<std::byte>;

Block MakeBlock(uint32_t pct, std::mt19937_64& rng) {
  Block b(kBlockSize);
  FillBlockWithCompressibility(b, pct, rng);
  return b;
}

// A drive plus a plain LBA -> bytes model of what it must return.
class DriveModel {
 public:
  DriveModel(uint64_t flash_blocks, DriveOptions options) : flash_(flash_blocks) {
    auto d = CompressedDrive::Format(flash_, options);
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    drive_ = std::move(d).value();
  }
  CompressedDrive& drive() { return *drive_; }
  MemBackend& flash() { return flash_; }

  // Writes one or more blocks; the model follows only if the drive acknowledged.
  Status Write(uint64_t lba, const Block& data) {
    Status s = drive_->Write(Lba(lba), data);
    if (!s.ok()) return s;
    for (uint64_t b = 0; b < BytesToBlocks(data.size()); ++b) {
      model_[lba + b] = Block(data.begin() + BlocksToBytes(b), data.begin() + BlocksToBytes(b + 1));
    }
    return s;
  }
  // What a write the test made itself (not through Write) stored.
  void Track(uint64_t lba, const Block& block) { model_[lba] = block; }
  void Trim(uint64_t lba, uint64_t n) {
    ASSERT_TRUE(drive_->Trim(Lba(lba), n).ok());
    for (uint64_t i = 0; i < n; ++i) model_.erase(lba + i);
  }
  void Verify(uint64_t lba) {
    Block back(kBlockSize);
    ASSERT_TRUE(drive_->Read(Lba(lba), back).ok()) << "lba " << lba;
    auto it = model_.find(lba);
    if (it == model_.end()) {
      ASSERT_EQ(back, Block(kBlockSize)) << "lba " << lba << " should be zeros";
    } else {
      ASSERT_EQ(back, it->second) << "lba " << lba;
    }
  }
  void VerifyAll() {
    for (uint64_t lba = 0; lba < drive_->capacity_blocks(); ++lba) {
      Verify(lba);
      if (HasFatalFailure()) return;
    }
  }
  void Reopen(const DriveOptions& options) {
    ASSERT_TRUE(drive_->Close().ok());
    drive_.reset();
    auto d = CompressedDrive::Open(flash_, options);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    drive_ = std::move(d).value();
  }
  const std::map<uint64_t, Block>& model() const { return model_; }

 private:
  static bool HasFatalFailure() { return ::testing::Test::HasFatalFailure(); }
  MemBackend flash_;
  std::unique_ptr<CompressedDrive> drive_;
  std::map<uint64_t, Block> model_;
};

DriveOptions SmallOptions() {
  DriveOptions o;
  o.erase_unit_blocks = 16;
  o.max_flashalloc_ranges = 4;
  o.expansion = 2.0;
  return o;
}

// (compressibility %, write cache blocks)
class DriveRoundTrip : public ::testing::TestWithParam<std::tuple<uint32_t, uint32_t>> {};

TEST_P(DriveRoundTrip, RandomWritesAndOverwritesMatchModel) {
  const auto [pct, cache] = GetParam();
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu compressibility=%u%% write_cache=%u\n", (unsigned long long)seed, pct,
              cache);
  std::mt19937_64 rng(seed);
  // Size flash and working set so live data fills ~60% of flash at any compressibility,
  // and write ~3x the flash so device GC runs.
  const double record_bytes = 32 + 4096.0 * std::max(100u - pct, 2u) / 100.0;
  const uint64_t flash_blocks = 1024 + 3072 * (100 - pct) / 100;
  DriveOptions o = SmallOptions();
  o.expansion = 4.0;
  o.write_cache_blocks = cache;
  // With the cache, as a served array's drives: an open EU goes to flash when it fills.
  if (cache > 0) o.write_batch_blocks = std::numeric_limits<uint32_t>::max();
  DriveModel m(flash_blocks, o);
  const auto span = std::min<uint64_t>(
      m.drive().capacity_blocks(), uint64_t(0.6 * m.drive().stats().flash_bytes / record_bytes));
  const auto iterations = uint64_t(3.0 * m.drive().stats().flash_bytes / (2.5 * record_bytes));
  for (uint64_t i = 0; i < iterations; ++i) {
    uint64_t lba = rng() % span;
    uint64_t n = 1 + rng() % 4;
    if (lba + n > span) n = span - lba;
    Block data(BlocksToBytes(n));
    for (uint64_t b = 0; b < n; ++b) {
      FillBlockWithCompressibility(std::span(data).subspan(BlocksToBytes(b), kBlockSize), pct, rng);
    }
    ASSERT_TRUE(m.Write(lba, data).ok());
    if (i % 500 == 0) {
      ASSERT_TRUE(m.drive().Flush().ok());
      Status inv = m.drive().CheckInvariants();
      ASSERT_TRUE(inv.ok()) << "after write " << i << ": " << inv.ToString();
    }
  }
  m.VerifyAll();
  ASSERT_TRUE(m.drive().Flush().ok());  // the write cache is empty after a flush
  DriveStats st = m.drive().stats();
  // The ratio tracks the data: 0% stores ~4 KiB + header, 90% stores ~10%.
  double expected = 4096.0 / (32 + 4096.0 * std::max(100u - pct, 1u) / 100.0);
  EXPECT_NEAR(st.compression_ratio(), expected, expected * 0.15) << "compressibility " << pct;
  EXPECT_GT(st.gc_erased_eus, 0u) << "the workload is meant to exercise device GC";
  EXPECT_EQ(m.drive().live_bytes(), st.live_bytes);  // the lock-free copy follows GC too
  m.Trim(0, span / 2);
  EXPECT_EQ(m.drive().live_bytes(), m.drive().stats().live_bytes);
  Status inv = m.drive().CheckInvariants();
  EXPECT_TRUE(inv.ok()) << "after the trim: " << inv.ToString();
  m.Reopen(o);
  EXPECT_EQ(m.drive().live_bytes(), m.drive().stats().live_bytes);  // rebuilt by recovery
  inv = m.drive().CheckInvariants();
  EXPECT_TRUE(inv.ok()) << "after the reopen: " << inv.ToString();
  m.VerifyAll();
}

INSTANTIATE_TEST_SUITE_P(Compressibility, DriveRoundTrip,
                         ::testing::Combine(::testing::Values(0u, 25u, 50u, 75u, 90u),
                                            ::testing::Values(0u, 64u)));

// The bytes the drive says it stores are the bytes on flash: parse every record on
// flash independently and compare with Usage() and stats().
TEST(DriveTest, ReportedRatioEqualsStoredBytes) {
  std::mt19937_64 rng(11);
  DriveModel m(4096, SmallOptions());
  for (uint64_t lba = 0; lba < 600; ++lba) {
    ASSERT_TRUE(m.Write(lba, MakeBlock(static_cast<uint32_t>(lba % 10) * 10, rng)).ok());
  }
  for (uint64_t lba = 0; lba < 100; ++lba) ASSERT_TRUE(m.Write(lba, MakeBlock(50, rng)).ok());
  m.Trim(500, 50);
  ASSERT_TRUE(m.drive().Close().ok());  // everything on flash

  // Independent parse: newest record per LBA, by sequence number.
  using namespace drive_format;
  Block sb(kBlockSize);
  ASSERT_TRUE(m.flash().Read(Lba(0), sb).ok());
  auto super = DecodeSuperblock(sb);
  ASSERT_TRUE(super.ok());
  EXPECT_EQ(super->version, kDriveFormatVersion);
  EXPECT_EQ(super->record_align_shift, kRecordAlignShift);
  std::map<uint64_t, std::pair<uint64_t, uint32_t>> newest;  // lba -> (seq, footprint)
  std::map<uint64_t, uint64_t> trimmed_at;
  Block eu(BlocksToBytes(super->eu_blocks));
  for (uint32_t i = 0; i < super->num_eus; ++i) {
    ASSERT_TRUE(
        m.flash().Read(Lba(super->data_start_block + uint64_t(i) * super->eu_blocks), eu).ok());
    auto head = DecodeRecord(eu, true);
    if (!head.ok()) continue;
    uint32_t off = head->record_bytes();
    for (; off + kRecordHeaderBytes <= eu.size();) {
      auto h = DecodeRecord(std::span(eu).subspan(off), false);
      if (!h.ok() || h->seq <= head->seq) break;
      // Records start at multiples of 16, the gap before the next one zeros.
      ASSERT_EQ(off % 16, 0u);
      const uint32_t footprint = RecordFootprint(h->record_bytes(), kRecordAlignShift);
      ASSERT_GE(footprint, h->record_bytes());
      ASSERT_LT(footprint, h->record_bytes() + 16);
      for (uint32_t b = off + h->record_bytes(); b < off + footprint; ++b)
        ASSERT_EQ(eu[b], std::byte{0}) << "gap byte " << b;
      if (h->type == RecordType::kData) {
        auto& n = newest[h->lba];
        if (h->seq > n.first) n = {h->seq, footprint};
      } else if (h->type == RecordType::kTrim) {
        for (uint64_t b = h->lba; b < h->lba + h->count_blocks; ++b)
          trimmed_at[b] = std::max(trimmed_at[b], h->seq);
      }
      off += footprint;
    }
    // Past the last record the rest of its page is zeros, not what the stream's buffer
    // held from the EU it filled before.
    const size_t page_end =
        std::min<size_t>(eu.size(), (off + kBlockSize - 1) / kBlockSize * kBlockSize);
    for (size_t b = off; b < page_end; ++b)
      ASSERT_EQ(eu[b], std::byte{0}) << "eu " << i << " byte " << b;
  }
  uint64_t on_flash = 0, mapped = 0;
  for (auto& [lba, n] : newest) {
    if (trimmed_at.count(lba) && trimmed_at[lba] > n.first) continue;
    on_flash += n.second;
    ++mapped;
  }
  RangeUsage u = m.drive().Usage(Lba(0), m.drive().capacity_blocks()).value();
  EXPECT_EQ(u.stored_bytes, on_flash);
  EXPECT_EQ(u.mapped_blocks, mapped);
  EXPECT_EQ(mapped, 550u);
  EXPECT_EQ(m.drive().stats().live_bytes, on_flash);
  EXPECT_DOUBLE_EQ(u.ratio(), double(mapped * kBlockSize) / on_flash);
  // Per-range ratios follow the data: blocks 100..109 were written at 0..90%.
  EXPECT_LT(m.drive().Usage(Lba(190), 1)->ratio(), m.drive().Usage(Lba(199), 1)->ratio());
  EXPECT_EQ(m.drive().Usage(Lba(510), 10)->ratio(), 0.0) << "trimmed range stores nothing";
}

// Drives made before format 2 still open, read, take writes, collect garbage and recover:
// a format-1 drive keeps its records back to back (an older build, which walks them so,
// can still read it), and is refused past the 32 GiB its 6-byte map entries can place.
TEST(DriveTest, Format1DrivesStillServeWithRecordsBackToBack) {
  using namespace drive_format;
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu\n", (unsigned long long)seed);
  std::mt19937_64 rng(seed);
  DriveOptions o = SmallOptions();
  o.format_version = kDriveFormatVersionUnaligned;
  DriveModel m(1536, o);
  auto write = [&](int n) {
    for (int i = 0; i < n; ++i) {
      const uint64_t lba = rng() % 1200;
      ASSERT_TRUE(m.Write(lba, MakeBlock(static_cast<uint32_t>(rng() % 100), rng)).ok());
    }
  };
  write(6000);
  ASSERT_GT(m.drive().stats().gc_relocated_bytes, 0u) << "device GC moved unaligned records";
  m.Reopen(SmallOptions());  // the drive's format wins over the options'
  m.VerifyAll();
  write(1500);
  m.Reopen(SmallOptions());
  m.VerifyAll();

  Block sb(kBlockSize);
  ASSERT_TRUE(m.flash().Read(Lba(0), sb).ok());
  auto super = DecodeSuperblock(sb).value();
  EXPECT_EQ(super.version, kDriveFormatVersionUnaligned);
  EXPECT_EQ(super.record_align_shift, 0u);
  // Walked back to back, as format 1 lays them: some record starts off a 16-byte boundary.
  uint64_t records = 0, unaligned = 0;
  Block eu(BlocksToBytes(super.eu_blocks));
  for (uint32_t i = 0; i < super.num_eus; ++i) {
    ASSERT_TRUE(
        m.flash().Read(Lba(super.data_start_block + uint64_t(i) * super.eu_blocks), eu).ok());
    auto head = DecodeRecord(eu, true);
    if (!head.ok()) continue;
    for (uint32_t off = kRecordHeaderBytes; off + kRecordHeaderBytes <= eu.size();) {
      auto h = DecodeRecord(std::span(eu).subspan(off), false);
      if (!h.ok() || h->seq <= head->seq) break;
      ++records;
      unaligned += off % 16 != 0;
      off += h->record_bytes();
    }
  }
  EXPECT_GT(records, 100u);
  EXPECT_GT(unaligned, 0u);
}

TEST(DriveTest, FlashBeyondWhatAFormatCanMapIsRefusedClearly) {
  using namespace drive_format;
  // 40 GiB, sparse: only the superblock is ever written.
  const std::string path = "/tmp/eraid-drive-40g-" + std::to_string(::getpid());
  FileBackendOptions fo;
  fo.create = true;
  fo.size_bytes = uint64_t{40} << 30;
  auto flash = FileBackend::Open(path, fo);
  ::unlink(path.c_str());
  ASSERT_TRUE(flash.ok()) << flash.status().ToString();
  DriveOptions o = SmallOptions();
  o.format_version = kDriveFormatVersionUnaligned;
  auto made = CompressedDrive::Format(**flash, o);
  ASSERT_EQ(made.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(made.status().ToString().find("more than a format 1 drive can map"), std::string::npos)
      << made.status().ToString();
  // A format-1 superblock of that size, as an older build could have written.
  Superblock sb;
  sb.version = kDriveFormatVersionUnaligned;
  sb.record_align_shift = 0;
  sb.eu_blocks = 64;
  sb.num_eus = 100;
  sb.logical_blocks = 12800;
  sb.ckpt_slot_blocks = static_cast<uint32_t>(CheckpointSlotBlocks(sb.logical_blocks, sb.num_eus));
  sb.data_start_block = 1 + 2 * uint64_t{sb.ckpt_slot_blocks};
  sb.flash_blocks = (*flash)->capacity_blocks();
  sb.expansion_milli = 2000;
  Block block(kBlockSize);
  EncodeSuperblock(sb, block);
  ASSERT_TRUE((*flash)->Write(Lba(0), block).ok());
  auto opened = CompressedDrive::Open(**flash, SmallOptions());
  ASSERT_EQ(opened.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(opened.status().ToString().find("drive format 1"), std::string::npos)
      << opened.status().ToString();
  // Format 2 maps it.
  auto v2 = CompressedDrive::Format(**flash, SmallOptions());
  ASSERT_TRUE(v2.ok()) << v2.status().ToString();
}

TEST(DriveTest, UnwrittenAndTrimmedReadZerosAndCostNothing) {
  std::mt19937_64 rng(5);
  DriveModel m(4096, SmallOptions());
  m.Verify(77);
  for (uint64_t lba = 0; lba < 64; ++lba) ASSERT_TRUE(m.Write(lba, MakeBlock(30, rng)).ok());
  uint64_t live = m.drive().stats().live_bytes;
  EXPECT_GT(live, 0u);
  m.Trim(0, 64);
  for (uint64_t lba = 0; lba < 64; ++lba) m.Verify(lba);
  EXPECT_EQ(m.drive().stats().live_bytes, 0u);
  EXPECT_EQ(m.drive().stats().mapped_blocks, 0u);
  m.Reopen(SmallOptions());
  for (uint64_t lba = 0; lba < 64; ++lba) m.Verify(lba);
}

// Submits a packed write and waits for it.
Status WritePacked(Backend& d, uint64_t lba, const Block& data,
                   std::shared_ptr<const PackedBlocks> packed, uint32_t first) {
  std::optional<Status> result;
  d.SubmitWritePacked(Lba(lba), data, std::move(packed), first,
                      [&](Status s) { result = std::move(s); });
  while (!result) d.Poll(true);
  return *result;
}

// Records compressed by the host (as an array packs a row) are stored as they are: the
// drive compresses nothing, stores exactly the bytes a drive compressing them itself
// would (the same live bytes as a twin written plainly), and reads them back — from its
// write cache before they are stored, from flash after, and after a reopen. Records
// made under other codec settings, or a write with a block left unpacked, are not
// taken: the drive compresses the data.
TEST(DriveTest, PackedWritesStoreTheHostsRecordsAsTheyAre) {
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu\n", (unsigned long long)seed);
  for (uint32_t cache : {0u, 64u}) {
    SCOPED_TRACE("write cache " + std::to_string(cache));
    std::mt19937_64 rng(seed + cache);
    DriveOptions o = SmallOptions();
    o.write_cache_blocks = cache;
    DriveModel packed(2048, o), plain(2048, o);
    uint64_t blocks = 0;
    for (int i = 0; i < 300; ++i) {
      const uint64_t n = 1 + rng() % 4, lba = rng() % (512 - n), first = rng() % 3;
      Block data(BlocksToBytes(n));
      for (uint64_t b = 0; b < n; ++b) {
        const Block one = MakeBlock(static_cast<uint32_t>(rng() % 101), rng);
        std::copy(one.begin(), one.end(), data.begin() + BlocksToBytes(b));
      }
      auto p = std::make_shared<PackedBlocks>(o.codec, first + n);
      for (uint64_t b = 0; b < n; ++b) {
        p->sizes[first + b] =
            CompressBlock(o.codec, data.data() + BlocksToBytes(b), p->payload(first + b));
      }
      ASSERT_TRUE(WritePacked(packed.drive(), lba, data, p, static_cast<uint32_t>(first)).ok());
      for (uint64_t b = 0; b < n; ++b) {
        packed.Track(lba + b,
                     Block(data.begin() + BlocksToBytes(b), data.begin() + BlocksToBytes(b + 1)));
      }
      ASSERT_TRUE(plain.Write(lba, data).ok());
      blocks += n;
      packed.Verify(lba + rng() % n);  // often still in the write cache: decoded from the record
      if (HasFatalFailure()) return;
    }
    ASSERT_TRUE(packed.drive().Flush().ok());
    ASSERT_TRUE(plain.drive().Flush().ok());
    DriveStats ps = packed.drive().stats(), qs = plain.drive().stats();
    EXPECT_EQ(ps.compressed_blocks, 0u);
    EXPECT_EQ(ps.given_records, blocks);
    EXPECT_EQ(qs.compressed_blocks, blocks);
    EXPECT_EQ(ps.host_stored_bytes, qs.host_stored_bytes) << "the same records";
    EXPECT_EQ(ps.live_bytes, qs.live_bytes);

    // Packed at another level: not this drive's records.
    CodecConfig level1 = o.codec;
    level1.zstd_level = 1;
    const Block data = MakeBlock(50, rng);
    auto other = std::make_shared<PackedBlocks>(level1, 1);
    other->sizes[0] = CompressBlock(level1, data.data(), other->payload(0));
    ASSERT_TRUE(WritePacked(packed.drive(), 600, data, other, 0).ok());
    packed.Track(600, data);
    // A block of the write left unpacked ({kRaw, 0}): the drive encodes the write itself.
    Block two = MakeBlock(50, rng), second = MakeBlock(30, rng);
    two.insert(two.end(), second.begin(), second.end());
    auto half = std::make_shared<PackedBlocks>(o.codec, 2);
    half->sizes[0] = CompressBlock(o.codec, two.data(), half->payload(0));
    ASSERT_TRUE(WritePacked(packed.drive(), 610, two, half, 0).ok());
    packed.Track(610, Block(two.begin(), two.begin() + kBlockSize));
    packed.Track(611, second);
    ASSERT_TRUE(packed.drive().Flush().ok());
    EXPECT_EQ(packed.drive().stats().compressed_blocks, 3u);
    packed.VerifyAll();
    packed.Reopen(o);
    packed.VerifyAll();
  }
}

// A stored copy (a conversion's mirror) keeps the source drive's record as it is: here the
// source stores raw (it does not compress) and the copy's drive would compress, so the
// copy's stored bytes tell which was kept. Blocks without a stored form are compressed; a
// drive that does not compress stores raw whatever it is given; a copy lands after an
// older cached write of the same LBA.
TEST(DriveTest, StoredCopiesKeepTheSourceRecord) {
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu\n", (unsigned long long)seed);
  std::mt19937_64 rng(seed);
  DriveOptions raw = SmallOptions();
  raw.codec.enabled = false;
  DriveOptions cached = SmallOptions();
  cached.write_cache_blocks = 64;
  DriveModel raw_src(2048, raw), src(2048, SmallOptions()), copy(2048, SmallOptions()),
      copy_cached(2048, cached), uncompressed(2048, raw);
  constexpr uint64_t kBlocks = 96;
  constexpr uint64_t kRawRecord = drive_format::kRecordHeaderBytes + kBlockSize;
  std::vector<Block> data;
  for (uint64_t lba = 0; lba < kBlocks; ++lba) {
    data.push_back(MakeBlock(50, rng));
    ASSERT_TRUE(raw_src.Write(lba, data.back()).ok());
    ASSERT_TRUE(src.Write(lba, data.back()).ok());
    // An older write of the same LBA in the cache: the copy must land after it.
    ASSERT_TRUE(copy_cached.Write(lba, MakeBlock(10, rng)).ok());
  }
  Block out(kBlockSize);
  for (uint64_t lba = 0; lba < kBlocks; ++lba) {
    StoredBlock stored, compressed;
    ASSERT_TRUE(raw_src.drive().ReadStored(Lba(lba), out, &stored).ok());
    ASSERT_EQ(out, data[lba]);
    ASSERT_EQ(stored.bytes.size(), kBlockSize);
    EXPECT_EQ(stored.codec, Codec::kRaw);
    for (DriveModel* m : {&copy, &copy_cached}) {
      ASSERT_TRUE(m->drive().WriteStored(Lba(lba), out, std::span(&stored, 1)).ok());
      m->Track(lba, out);
    }
    ASSERT_TRUE(src.drive().ReadStored(Lba(lba), out, &compressed).ok());
    ASSERT_EQ(out, data[lba]);
    EXPECT_EQ(compressed.codec, Codec::kZstd);
    EXPECT_LT(compressed.bytes.size(), kBlockSize);
    ASSERT_TRUE(uncompressed.drive().WriteStored(Lba(lba), out, std::span(&compressed, 1)).ok());
    uncompressed.Track(lba, out);
  }
  // Two blocks at once, the second without a stored form: it is compressed.
  StoredBlock two[2];
  Block pair(2 * kBlockSize);
  ASSERT_TRUE(raw_src.drive().ReadStored(Lba(0), std::span(pair).first(kBlockSize), &two[0]).ok());
  const Block fresh = MakeBlock(50, rng);
  std::copy(fresh.begin(), fresh.end(), pair.begin() + kBlockSize);
  ASSERT_TRUE(copy.drive().WriteStored(Lba(kBlocks), pair, two).ok());
  copy.Track(kBlocks, Block(pair.begin(), pair.begin() + kBlockSize));
  copy.Track(kBlocks + 1, fresh);
  ASSERT_TRUE(copy_cached.drive().Flush().ok());

  EXPECT_EQ(copy_cached.drive().stats().live_bytes, kBlocks * kRawRecord);
  const uint64_t last_two = copy.drive().stats().live_bytes - kBlocks * kRawRecord;
  EXPECT_GT(last_two, kRawRecord);
  EXPECT_LT(last_two, 2 * kRawRecord) << "the block without a stored form is compressed";
  EXPECT_EQ(uncompressed.drive().stats().live_bytes, kBlocks * kRawRecord);
  EXPECT_LT(src.drive().stats().live_bytes, kBlocks * kRawRecord * 3 / 4);
  for (DriveModel* m : {&copy, &copy_cached, &uncompressed}) {
    m->VerifyAll();
    m->Reopen(SmallOptions());
    m->VerifyAll();
  }
}

// With and without the write cache (which reserves the worst case while a block waits).
class DriveNoSpace : public ::testing::TestWithParam<uint32_t> {};

TEST_P(DriveNoSpace, NoSpaceChangesNothingAndDriveRecovers) {
  std::mt19937_64 rng(9);
  DriveOptions o = SmallOptions();
  o.write_cache_blocks = GetParam();
  o.expansion = 3.0;  // far more LBAs than incompressible data can fill
  DriveModel m(2048, o);
  uint64_t lba = 0;
  Status s;
  for (; lba < m.drive().capacity_blocks(); ++lba) {
    s = m.Write(lba, MakeBlock(0, rng));
    if (!s.ok()) break;
  }
  ASSERT_EQ(s.code(), StatusCode::kNoSpace) << s.ToString();
  const uint64_t full_at = lba;
  EXPECT_GT(full_at, m.drive().capacity_blocks() / 4);
  DriveStats st = m.drive().stats();
  EXPECT_LE(st.live_bytes, st.usable_bytes);
  EXPECT_EQ(st.nospace_errors, 1u);
  // A multi-block write that cannot fit changes none of its blocks.
  Block four(BlocksToBytes(4));
  for (int i = 0; i < 4; ++i)
    FillBlockWithCompressibility(std::span(four).subspan(BlocksToBytes(i), kBlockSize), 0, rng);
  EXPECT_EQ(m.drive().Write(Lba(full_at - 2), four).code(), StatusCode::kNoSpace);
  m.Verify(full_at - 2);
  m.Verify(full_at - 1);
  m.Verify(full_at);
  // Compressible data still fits in what is left, and after a trim more does.
  m.Trim(0, 200);
  for (uint64_t i = 0; i < 150; ++i) ASSERT_TRUE(m.Write(i, MakeBlock(0, rng)).ok()) << i;
  m.VerifyAll();
}

INSTANTIATE_TEST_SUITE_P(WriteCache, DriveNoSpace, ::testing::Values(0u, 64u));

// Sustained random overwrites with live data at 90% of flash: GC must keep every block.
TEST(DriveTest, GcKeepsDataAtNinetyPercentFull) {
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu\n", (unsigned long long)seed);
  std::mt19937_64 rng(seed);
  DriveOptions o;
  o.erase_unit_blocks = 64;
  o.max_flashalloc_ranges = 2;
  o.expansion = 2.5;
  DriveModel m(BytesToBlocks(32ull << 20), o);
  DriveStats st = m.drive().stats();
  const uint64_t target = st.flash_bytes * 9 / 10;
  ASSERT_GE(st.usable_bytes, target) << "geometry must allow 90% fullness";
  uint64_t n = 0;
  while (m.drive().stats().live_bytes < target) {
    ASSERT_TRUE(m.Write(n++, MakeBlock(50, rng)).ok());
  }
  const uint64_t written = n;
  uint64_t nospace = 0;
  for (uint64_t i = 0; i < 4 * written; ++i) {
    Status s = m.Write(rng() % written, MakeBlock(50, rng));
    if (s.code() == StatusCode::kNoSpace) {
      ++nospace;
    } else {
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
  }
  st = m.drive().stats();
  std::printf("live %.1f%% of flash, erased %llu EUs, device WAF %.2f, nospace %llu\n",
              100.0 * st.live_bytes / st.flash_bytes, (unsigned long long)st.gc_erased_eus,
              st.device_waf(), (unsigned long long)nospace);
  EXPECT_GE(st.live_bytes, st.flash_bytes * 88 / 100);
  EXPECT_GT(st.gc_erased_eus, 100u);
  EXPECT_LT(nospace, written / 100) << "no-space only at the exact boundary";
  m.VerifyAll();
  Status inv = m.drive().CheckInvariants();
  EXPECT_TRUE(inv.ok()) << "after GC at 90%: " << inv.ToString();
  m.Reopen(o);
  inv = m.drive().CheckInvariants();
  EXPECT_TRUE(inv.ok()) << "reopened: " << inv.ToString();
  m.VerifyAll();
}

// Objects with different lifetimes written by six interleaved streams at ~75% physical
// fullness: with FlashAlloc each object's erase units die whole, and GC copies (almost)
// nothing; without it, objects share erase units and GC must copy the survivors.
DriveStats RunObjectStreams(bool flashalloc) {
  std::mt19937_64 rng(21);
  DriveOptions o;
  o.erase_unit_blocks = 32;
  o.max_flashalloc_ranges = 8;
  o.expansion = 2.5;
  o.flashalloc = flashalloc;
  MemBackend flash(16384);
  auto drive = std::move(CompressedDrive::Format(flash, o)).value();
  const uint64_t object_blocks = 1024;  // 4 MiB objects, ~16 erase units each at 2:1
  const uint64_t slots = drive->capacity_blocks() / object_blocks;
  std::vector<uint64_t> live, free_slots;
  for (uint64_t i = 0; i < slots; ++i) free_slots.push_back(i);
  std::vector<std::byte> block(kBlockSize);
  for (int round = 0; round < 25; ++round) {
    std::vector<uint64_t> objs;
    for (int s = 0; s < 6; ++s) {
      size_t k = rng() % free_slots.size();
      objs.push_back(free_slots[k]);
      free_slots.erase(free_slots.begin() + static_cast<long>(k));
      (void)drive->FlashAlloc(Lba(objs.back() * object_blocks), object_blocks);
    }
    for (uint64_t b = 0; b < object_blocks; ++b) {
      for (uint64_t obj : objs) {
        FillBlockWithCompressibility(block, 50, rng);
        EXPECT_TRUE(drive->Write(Lba(obj * object_blocks + b), block).ok());
      }
    }
    live.insert(live.end(), objs.begin(), objs.end());
    // Objects die in random order (different lifetimes), each trimmed whole.
    while (drive->stats().live_bytes > drive->stats().flash_bytes * 3 / 4) {
      size_t k = rng() % live.size();
      EXPECT_TRUE(drive->Trim(Lba(live[k] * object_blocks), object_blocks).ok());
      free_slots.push_back(live[k]);
      live.erase(live.begin() + static_cast<long>(k));
    }
  }
  DriveStats st = drive->stats();
  std::printf(
      "flashalloc=%d WAF %.3f: host %llu B, flash %llu B (checkpoints %llu B), "
      "relocated %llu B, erased %llu EUs\n",
      flashalloc, st.device_waf(), (unsigned long long)st.host_stored_bytes,
      (unsigned long long)st.flash_write_bytes, (unsigned long long)st.meta_write_bytes,
      (unsigned long long)st.gc_relocated_bytes, (unsigned long long)st.gc_erased_eus);
  return st;
}

TEST(DriveTest, FlashAllocAvoidsGcCopies) {
  DriveStats with = RunObjectStreams(true);
  DriveStats without = RunObjectStreams(false);
  EXPECT_GT(without.gc_erased_eus, 100u) << "the workload must make the device collect";
  EXPECT_LE(with.device_waf(), 1.05);
  EXPECT_GT(without.device_waf(), with.device_waf() + 0.1);
  EXPECT_LT(with.gc_relocated_bytes * 10, without.gc_relocated_bytes);
}

TEST(DriveTest, FlashAllocRangesAreBoundedAndCanBeDisabled) {
  DriveModel m(4096, SmallOptions());
  for (uint64_t i = 0; i < 6; ++i) ASSERT_TRUE(m.drive().FlashAlloc(Lba(i * 100), 50).ok());
  EXPECT_EQ(m.drive().stats().flashalloc_ranges, 4u);
  EXPECT_EQ(m.drive().stats().flashalloc_evictions, 2u);
  m.Trim(500, 50);
  EXPECT_EQ(m.drive().stats().flashalloc_ranges, 3u) << "a fully trimmed range is released";
  EXPECT_EQ(m.drive().FlashAlloc(Lba(m.drive().capacity_blocks()), 1).code(),
            StatusCode::kInvalidArgument);
  DriveOptions off = SmallOptions();
  off.flashalloc = false;
  DriveModel n(4096, off);
  EXPECT_EQ(n.drive().FlashAlloc(Lba(0), 10).code(), StatusCode::kNotSupported);
}

TEST(DriveTest, BitFlipOnFlashIsDetectedNeverReturned) {
  std::mt19937_64 rng(4);
  MemBackend media(4096);
  FaultyBackend flash(media);
  auto drive = std::move(CompressedDrive::Format(flash, SmallOptions())).value();
  Block data = MakeBlock(50, rng);
  ASSERT_TRUE(drive->Write(Lba(3), data).ok());
  ASSERT_TRUE(drive->Close().ok());
  drive.reset();
  // Find the page holding lba 3's record and flip a bit in its payload.
  Block sb(kBlockSize);
  ASSERT_TRUE(media.Read(Lba(0), sb).ok());
  auto super = drive_format::DecodeSuperblock(sb).value();
  bool flipped = false;
  for (uint64_t b = super.data_start_block; b < super.flash_blocks && !flipped; ++b) {
    Block page(kBlockSize);
    ASSERT_TRUE(media.Read(Lba(b), page).ok());
    for (uint32_t off = 0; off + 32 <= kBlockSize; ++off) {
      auto h = drive_format::DecodeRecord(std::span(page).subspan(off), false);
      if (h.ok() && h->type == drive_format::RecordType::kData && h->lba == 3) {
        ASSERT_TRUE(flash.FlipBit(Lba(b), (off + 40) * 8).ok());
        flipped = true;
        break;
      }
    }
  }
  ASSERT_TRUE(flipped);
  drive = std::move(CompressedDrive::Open(flash, SmallOptions())).value();
  Block back(kBlockSize);
  EXPECT_EQ(drive->Read(Lba(3), back).code(), StatusCode::kCorruption);
  EXPECT_EQ(drive->stats().corrupt_reads, 1u);
  // Rewriting the block heals it.
  ASSERT_TRUE(drive->Write(Lba(3), data).ok());
  ASSERT_TRUE(drive->Read(Lba(3), back).ok());
  EXPECT_EQ(back, data);
}

TEST(DriveTest, FlashFaultsSurfaceAsStatuses) {
  std::mt19937_64 rng(8);
  MemBackend media(4096);
  FaultyBackend flash(media);
  auto drive = std::move(CompressedDrive::Format(flash, SmallOptions())).value();
  Block data = MakeBlock(50, rng);
  ASSERT_TRUE(drive->Write(Lba(1), data).ok());
  ASSERT_TRUE(drive->Close().ok());  // reopen so reads go to flash, not the open EU's buffer
  drive = std::move(CompressedDrive::Open(flash, SmallOptions())).value();
  flash.FailStop();
  Block back(kBlockSize);
  EXPECT_EQ(drive->Read(Lba(1), back).code(), StatusCode::kIoError);
  EXPECT_EQ(drive->Flush().code(), StatusCode::kIoError);
  flash.ClearFaults();
  flash.FailNthOp(1);
  EXPECT_EQ(drive->Read(Lba(1), back).code(), StatusCode::kIoError);
  ASSERT_TRUE(drive->Read(Lba(1), back).ok());
  EXPECT_EQ(back, data);
}

// Flash whose writes reach the media only when they complete, and complete only when
// someone waits for them (Poll(true)): as a file written through io_uring's workers, whose
// pages are not there yet while the write is in flight.
class DeferredWriteFlash final : public Backend {
 public:
  explicit DeferredWriteFlash(uint64_t blocks) : media_(blocks) {}
  uint64_t capacity_blocks() const override { return media_.capacity_blocks(); }
  uint32_t queue_depth() const override { return 64; }
  std::string name() const override { return "deferred"; }
  void SubmitRead(Lba lba, std::span<std::byte> buf, IoCallback done) override {
    media_.SubmitRead(lba, buf, std::move(done));
  }
  void SubmitWrite(Lba lba, std::span<const std::byte> buf, IoCallback done) override {
    pending_.push_back({lba, buf, std::move(done)});
  }
  void SubmitTrim(Lba lba, uint64_t n, IoCallback done) override {
    media_.SubmitTrim(lba, n, std::move(done));
  }
  void SubmitFlush(IoCallback done) override { media_.SubmitFlush(std::move(done)); }
  size_t Poll(bool wait) override {
    size_t n = media_.Poll(false);
    if (wait && n == 0) {
      for (Pending& p : pending_) media_.SubmitWrite(p.lba, p.buf, std::move(p.done));
      writes_completed_ += pending_.size();
      pending_.clear();
      n = media_.Poll(false);
    }
    return n;
  }
  size_t in_flight() const override { return pending_.size() + media_.in_flight(); }
  size_t writes_completed() const { return writes_completed_; }

 private:
  struct Pending {
    Lba lba;
    std::span<const std::byte> buf;
    IoCallback done;
  };
  MemBackend media_;
  std::vector<Pending> pending_;
  size_t writes_completed_ = 0;
};

// A full erase unit goes to flash without the writer waiting for it: until the write is
// done, reads of its records come from its buffer, and a flush waits for it.
TEST(DriveTest, EraseUnitsInFlightServeReadsAndAFlushWaitsForThem) {
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu\n", (unsigned long long)seed);
  std::mt19937_64 rng(seed);
  DeferredWriteFlash flash(4096);
  DriveOptions o = SmallOptions();
  o.checkpoint_every = 1 << 20;  // no checkpoint (which flushes) in the writes below
  auto drive = std::move(CompressedDrive::Format(flash, o)).value();
  const size_t completed = flash.writes_completed();  // formatting's own
  std::map<uint64_t, Block> model;
  for (int i = 0; i < 120; ++i) {  // a few EUs of 64 KiB: fewer than the drive keeps in flight
    const uint64_t lba = rng() % 256;
    model[lba] = MakeBlock(static_cast<uint32_t>(rng() % 100), rng);
    ASSERT_TRUE(drive->Write(Lba(lba), model[lba]).ok());
  }
  ASSERT_GE(flash.in_flight(), 3u);  // the sealed EUs, none of them waited for
  ASSERT_EQ(flash.writes_completed(), completed);
  Block back(kBlockSize);
  for (const auto& [lba, data] : model) {
    ASSERT_TRUE(drive->Read(Lba(lba), back).ok()) << lba;
    ASSERT_EQ(back, data) << "lba " << lba << ", its erase unit in flight";
  }
  ASSERT_EQ(flash.writes_completed(), completed);
  ASSERT_TRUE(drive->Flush().ok());
  EXPECT_EQ(flash.in_flight(), 0u);
  EXPECT_GT(flash.writes_completed(), completed);
  ASSERT_TRUE(drive->Close().ok());
  drive = std::move(CompressedDrive::Open(flash, SmallOptions())).value();
  for (const auto& [lba, data] : model) {
    ASSERT_TRUE(drive->Read(Lba(lba), back).ok()) << lba;
    ASSERT_EQ(back, data) << "lba " << lba << " after reopening";
  }
}

// The same over flash that answers at once: a power cut after the flush loses nothing,
// and a background write that fails is reported, not lost.
TEST(DriveTest, EraseUnitsWrittenInTheBackgroundSurviveAPowerCutOrReportAFailure) {
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu\n", (unsigned long long)seed);
  std::mt19937_64 rng(seed);
  MemBackend media(4096);
  FaultyBackend flash(media);
  auto drive = std::move(CompressedDrive::Format(flash, SmallOptions())).value();
  flash.SetLatency(20'000'000);  // 20 ms: every EU written below is still in flight when read
  std::map<uint64_t, Block> model;
  for (int i = 0; i < 200; ++i) {
    const uint64_t lba = rng() % 256;
    model[lba] = MakeBlock(static_cast<uint32_t>(rng() % 100), rng);
    ASSERT_TRUE(drive->Write(Lba(lba), model[lba]).ok());
  }
  Block back(kBlockSize);
  for (const auto& [lba, data] : model) {
    ASSERT_TRUE(drive->Read(Lba(lba), back).ok()) << lba;
    ASSERT_EQ(back, data) << "lba " << lba;
  }
  ASSERT_TRUE(drive->Flush().ok());
  flash.Crash();
  flash.Restart();
  flash.ClearFaults();
  drive.reset();
  drive = std::move(CompressedDrive::Open(flash, SmallOptions())).value();
  for (const auto& [lba, data] : model) {
    ASSERT_TRUE(drive->Read(Lba(lba), back).ok()) << lba;
    ASSERT_EQ(back, data) << "lba " << lba << " after the power cut";
  }
  // The next flash operation fails: an EU's background write (or the flush that waits
  // for it); either way the flush reports it.
  flash.FailNthOp(1);
  Status s;
  for (int i = 0; i < 64 && s.ok(); ++i) s = drive->Write(Lba(rng() % 256), MakeBlock(0, rng));
  if (s.ok()) s = drive->Flush();
  EXPECT_EQ(s.code(), StatusCode::kIoError) << s.ToString();
  EXPECT_EQ(drive->Flush().code(), StatusCode::kIoError);
}

// Runs worker(t) for t < n on threads of their own; their outcomes, by t.
std::vector<Status> RunThreads(int n, const std::function<Status(int)>& worker) {
  std::vector<Status> outcomes(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int t = 0; t < n; ++t)
    threads.emplace_back([&, t] { outcomes[static_cast<size_t>(t)] = worker(t); });
  for (auto& th : threads) th.join();
  return outcomes;
}

// Every block of the writers' models reads back as written.
void ExpectReadsMatch(CompressedDrive& drive, const std::vector<std::map<uint64_t, Block>>& models,
                      const char* when) {
  Block back(kBlockSize);
  for (const auto& model : models) {
    for (const auto& [lba, data] : model) {
      Status s = drive.Read(Lba(lba), back);
      ASSERT_TRUE(s.ok()) << "lba " << lba << " " << when << ": " << s.ToString();
      ASSERT_EQ(back, data) << "lba " << lba << " " << when;
    }
  }
}

// The eraser thread (background_free_eus) and checkpoints written without the drive's
// lock, beside writers: several threads each fill FlashAlloc'd objects of their own and
// trim old ones whole, so erase units die whole and the eraser takes them, while
// frequent checkpoints let go of the lock mid-write. Every block must read back, before
// and after a reopen, and the eraser must have done the erasing (TSan runs this too).
TEST(DriveTest, EraserAndCheckpointsRunBesideWriters) {
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu\n", (unsigned long long)seed);
  DriveOptions o = SmallOptions();
  o.max_flashalloc_ranges = 8;
  o.background_free_eus = 16;
  o.checkpoint_every = 2;
  o.write_batch_blocks = std::numeric_limits<uint32_t>::max();  // as a served array's drives
  MemBackend flash(2048);  // ~120 erase units: the writers go round them several times
  auto drive = std::move(CompressedDrive::Format(flash, o)).value();
  constexpr int kThreads = 3;
  constexpr uint64_t kObjectBlocks = 48, kObjectsPerThread = 12;
  const uint64_t region = kObjectBlocks * kObjectsPerThread;
  ASSERT_LE(region * kThreads, drive->capacity_blocks());
  std::vector<std::map<uint64_t, Block>> models(kThreads);
  auto worker = [&](int t) -> Status {
    std::mt19937_64 rng(seed + static_cast<uint64_t>(t));
    std::map<uint64_t, Block>& model = models[static_cast<size_t>(t)];
    for (int round = 0; round < 60; ++round) {
      // A random object of this thread's: its old version trimmed whole, the new one
      // written into a FlashAlloc range of its own.
      const uint64_t first =
          region * static_cast<uint64_t>(t) + rng() % kObjectsPerThread * kObjectBlocks;
      Status s = drive->Trim(Lba(first), kObjectBlocks);
      if (s.ok()) s = drive->FlashAlloc(Lba(first), kObjectBlocks);
      for (uint64_t b = 0; b < kObjectBlocks && s.ok(); ++b) {
        Block data = MakeBlock(static_cast<uint32_t>(rng() % 100), rng);
        s = drive->Write(Lba(first + b), data);
        model[first + b] = std::move(data);
      }
      if (s.ok() && rng() % 8 == 0) s = drive->Flush();
      if (!s.ok()) return s;
    }
    return Status::Ok();
  };
  for (const Status& s : RunThreads(kThreads, worker)) ASSERT_TRUE(s.ok()) << s.ToString();
  auto verify = [&](const char* when) { ExpectReadsMatch(*drive, models, when); };
  verify("after the writers");
  const DriveStats st = drive->stats();
  std::printf("erased %llu EUs, %llu of them by the eraser; %llu checkpoints\n",
              (unsigned long long)st.gc_erased_eus, (unsigned long long)st.background_erased_eus,
              (unsigned long long)st.checkpoints);
  EXPECT_GT(st.background_erased_eus, 0u) << "the eraser is meant to take the dead erase units";
  EXPECT_GT(st.checkpoints, 2u) << "checkpoints are meant to run beside the writers";
  EXPECT_EQ(st.gc_relocated_bytes, 0u) << "objects die whole: nothing to copy";
  ASSERT_TRUE(drive->Close().ok());
  drive.reset();
  drive = std::move(CompressedDrive::Open(flash, o)).value();
  verify("after reopening");
}

// An open erase unit's pages go to flash without waiting, and a flush writes the partly
// filled last page that the next write of the stream rewrites whole. Neither io_uring
// nor NBD orders writes in flight together: if the rewrite were in flight beside the
// first write, the older page could land last and the records added since would be gone
// from flash. Here the flash lands every write in flight newest first; writers flush
// often, so their streams' next writes (further flushes, sealed EUs) come while the
// last flush's page is still in flight. Every block must read back, also after reopening.
void WritersFlushingOverReorderingFlash(uint64_t seed) {
  std::printf("seed=%llu\n", (unsigned long long)seed);
  DriveOptions o = SmallOptions();
  o.write_batch_blocks = std::numeric_limits<uint32_t>::max();  // as a served array's drives
  o.checkpoint_every = 2;
  MemBackend media(2048);
  FaultyBackend flash(media);
  flash.ReorderWrites(true);
  auto drive = std::move(CompressedDrive::Format(flash, o)).value();
  constexpr int kThreads = 3;
  constexpr uint64_t kRegion = 64;
  std::vector<std::map<uint64_t, Block>> models(kThreads);
  auto worker = [&](int t) -> Status {
    std::mt19937_64 rng(seed + static_cast<uint64_t>(t));
    std::map<uint64_t, Block>& model = models[static_cast<size_t>(t)];
    for (int i = 0; i < 1500; ++i) {
      const uint64_t lba = kRegion * static_cast<uint64_t>(t) + rng() % kRegion;
      Block data =
          MakeBlock(80 + static_cast<uint32_t>(rng() % 20), rng);  // small records: many per page
      Status s = drive->Write(Lba(lba), data);
      model[lba] = std::move(data);
      if (s.ok() && rng() % 3 == 0) s = drive->Flush();
      if (!s.ok()) return s;
    }
    return Status::Ok();
  };
  for (const Status& s : RunThreads(kThreads, worker)) ASSERT_TRUE(s.ok()) << s.ToString();
  auto verify = [&](const char* when) { ExpectReadsMatch(*drive, models, when); };
  verify("after the writers");
  ASSERT_TRUE(drive->Close().ok());
  drive.reset();
  flash.ReorderWrites(false);
  drive = std::move(CompressedDrive::Open(flash, o)).value();
  verify("after reopening");
}

// With the wait in OrderAfterLastWriteLocked taken out, 6 of 7 runs of this test failed
// (a read found the older page: "bad record magic").
TEST(DriveTest, PageWritesOfAnOpenEraseUnitNeverOvertakeEachOther) {
  for (uint64_t seed : TestSeeds("ERAID_REORDER_SEEDS", 4)) {
    WritersFlushingOverReorderingFlash(seed);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// A drive destroyed while its write cache still holds writes: the cache worker stores
// them during the destructor, opening erase units, and an EU opened below
// background_free_eus wakes the eraser. The destructor must stop that thread too, not
// leave a std::thread started behind its back to be destroyed unjoined (std::terminate;
// this failed CI once, one power cut in a few hundred of DriveCrashTest). Each round
// queues writes and destroys at once, so the worker's first EU opens during the
// destructor. The writes are admitted (the cache's completions delivered) before it.
TEST(DriveTest, DestroyedWhileItsCacheDrainsStopsTheEraserItWakes) {
  DriveOptions o = SmallOptions();
  o.write_cache_blocks = 64;
  o.background_free_eus = 1000;  // more than the drive has: every EU opened wakes it
  std::mt19937_64 rng(7);
  const Block data = MakeBlock(50, rng);
  for (int round = 0; round < 40; ++round) {
    MemBackend flash(1024);
    auto drive = std::move(CompressedDrive::Format(flash, o)).value();
    std::atomic<int> completed{0};
    for (uint64_t lba = 0; lba < 32; ++lba) {
      drive->SubmitWrite(Lba(lba), data, [&](Status s) {
        EXPECT_TRUE(s.ok() || s.code() == StatusCode::kAborted) << s.ToString();
        completed.fetch_add(1);
      });
    }
    while (drive->Poll(false) > 0) {
    }
    ASSERT_EQ(completed.load(), 32) << "round " << round;
    drive.reset();  // the worker stores the 32 writes, opening an EU, in here
  }
}

// A clean Close leaves a checkpoint that says so: the next open reads the superblock, the
// two checkpoint headers and the newer one's payload, not one header page per erase unit. A write
// after it (by a reopened drive, or by the same object after Close) first takes the mark away, so a
// power cut after it is recovered by the full scan, and nothing flushed is lost.
TEST(DriveTest, ACleanCloseOpensFromTheCheckpointAloneAndAnyWriteAfterItUndoesThat) {
  MemBackend media(4096);
  FaultyBackend flash(media);
  DriveOptions o;
  o.erase_unit_blocks = 16;
  auto drive = std::move(CompressedDrive::Format(flash, o)).value();
  const uint64_t eus = drive->stats().free_eus;
  std::mt19937_64 rng(5);
  std::map<uint64_t, Block> model;
  auto write = [&](uint64_t lba) {
    Block b(kBlockSize);
    FillBlockWithCompressibility(b, 50, rng);
    ASSERT_TRUE(drive->Write(Lba(lba), b).ok());
    model[lba] = b;
  };
  auto verify = [&](const char* when) {
    Block back(kBlockSize);
    for (const auto& [lba, want] : model) {
      ASSERT_TRUE(drive->Read(Lba(lba), back).ok()) << when << ": lba " << lba;
      ASSERT_EQ(back, want) << when << ": lba " << lba;
    }
  };
  auto reads_to_open = [&](bool crash) -> uint64_t {
    if (crash) {
      drive.reset();
      flash.Crash();
      flash.Restart();
    } else {
      EXPECT_TRUE(drive->Close().ok());
      drive.reset();
    }
    const uint64_t before = flash.stats().reads;
    auto d = CompressedDrive::Open(flash, o);
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    drive = std::move(d).value();
    EXPECT_TRUE(drive->CheckInvariants().ok());
    return flash.stats().reads - before;
  };
  for (uint64_t lba = 0; lba < 600; ++lba) write(rng() % 1500);
  EXPECT_EQ(reads_to_open(/*crash=*/false), 4u)
      << "superblock, the two checkpoint headers, the newer one's payload";
  verify("after a clean close");
  // Written after the clean open, flushed, then the power goes: the scan finds them.
  for (int i = 0; i < 200; ++i) write(rng() % 1500);
  ASSERT_TRUE(drive->Flush().ok());
  EXPECT_GE(reads_to_open(/*crash=*/true), eus) << "a crash: every erase unit's header";
  verify("after a power cut following a clean open");
  // The same object goes on writing after Close: its writes are not hidden by the clean
  // checkpoint either.
  ASSERT_TRUE(drive->Close().ok());
  for (int i = 0; i < 200; ++i) write(rng() % 1500);
  ASSERT_TRUE(drive->Flush().ok());
  EXPECT_GE(reads_to_open(/*crash=*/true), eus);
  verify("after writes that followed a Close");
}

TEST(DriveTest, OpenRejectsForeignAndDamagedMedia) {
  MemBackend blank(4096);
  EXPECT_EQ(CompressedDrive::Open(blank, {}).status().code(), StatusCode::kCorruption);
  DriveModel m(4096, SmallOptions());
  ASSERT_TRUE(m.drive().Close().ok());
  Block sb(kBlockSize);
  ASSERT_TRUE(m.flash().Read(Lba(0), sb).ok());
  sb[20] ^= std::byte{1};
  ASSERT_TRUE(m.flash().Write(Lba(0), sb).ok());
  auto r = CompressedDrive::Open(m.flash(), {});
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_NE(r.status().message().find("CRC"), std::string::npos) << r.status().ToString();
  DriveOptions bad;
  bad.expansion = 0.5;
  EXPECT_EQ(CompressedDrive::Format(blank, bad).status().code(), StatusCode::kInvalidArgument);
  MemBackend tiny(64);
  EXPECT_EQ(CompressedDrive::Format(tiny, {}).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace eraid
