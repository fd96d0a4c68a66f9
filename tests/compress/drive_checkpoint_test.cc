// The drive's map in RAM (DriveMap: pages that exist only while used) and on flash (the
// sparse checkpoint, version 2): a checkpoint writes and an open reads only the pages in
// use; a dense version-1 checkpoint still opens; a newer checkpoint that does not add up
// is passed over for the older one.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <random>
#include <set>

#include "common/crc32c.h"
#include "common/data_gen.h"
#include "common/encoding.h"
#include "compress/compressed_drive.h"
#include "compress/drive_format.h"
#include "compress/drive_map.h"
#include "compress/faulty_backend.h"
#include "compress/mem_backend.h"
#include "tests/support/seed.h"

namespace eraid {
namespace {

namespace df = drive_format;
using Block = std::vector<std::byte>;

// A record's place as a format-2 drive has them: offset and footprint multiples of 16.
uint64_t L(uint64_t i) { return df::PackLoc(kBlockSize + i * 16, 32 + i % 256 * 16); }

TEST(DriveMapTest, APageExistsOnlyWhileOneOfItsEntriesIsSet) {
  DriveMap map(3 * DriveMap::kPageEntries + 7, df::kRecordAlignShift);
  EXPECT_EQ(map.page_count(), 4u);
  EXPECT_EQ(map.resident_pages(), 0u);
  map.Set(5, 0);  // unmapping what is not mapped allocates nothing
  EXPECT_EQ(map.resident_pages(), 0u);
  map.Set(5, L(42));
  map.Set(6, L(43));
  map.Set(3 * DriveMap::kPageEntries + 6, L(44));  // the last, partial page
  EXPECT_EQ(map.resident_pages(), 2u);
  EXPECT_EQ(map.Get(5), L(42));
  EXPECT_EQ(map.Get(7), 0u);
  EXPECT_EQ(map.Get(DriveMap::kPageEntries), 0u);  // an absent page reads as unmapped
  map.Set(5, L(45));                               // an overwrite keeps the count
  map.Set(5, 0);
  EXPECT_EQ(map.resident_pages(), 2u);
  std::vector<uint64_t> page(DriveMap::kPageEntries, 99);
  ASSERT_TRUE(map.CopyPage(0, page.data()));
  EXPECT_EQ(page[6], L(43));
  EXPECT_EQ(page[5], 0u);
  EXPECT_EQ(page[DriveMap::kPageEntries - 1], 0u) << "zeros where no run exists";
  map.Set(6, 0);
  EXPECT_EQ(map.resident_pages(), 1u);
  EXPECT_FALSE(map.CopyPage(0, page.data()));
  std::vector<std::pair<uint64_t, uint64_t>> set;
  map.ForEachSet([&](uint64_t lba, uint64_t v) { set.emplace_back(lba, v); });
  ASSERT_EQ(set.size(), 1u);
  EXPECT_EQ(set[0], std::make_pair(3 * DriveMap::kPageEntries + 6, L(44)));
  map.Clear();
  EXPECT_EQ(map.resident_pages(), 0u);
  EXPECT_EQ(map.Get(3 * DriveMap::kPageEntries + 6), 0u);
}

// An entry is 6 bytes: every location a drive can make round-trips — format 2's (16-byte
// aligned, up to 8 TiB of flash) and format 1's (any byte, up to 32 GiB) — and the others
// are refused by Holds, which a checkpoint's entries are checked with before Set.
TEST(DriveMapTest, EntriesHoldEveryPlaceOfTheirFormatUpToItsLimit) {
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu\n", (unsigned long long)seed);
  std::mt19937_64 rng(seed);
  EXPECT_EQ(DriveMap::MaxFlashBytes(0), uint64_t{32} << 30);
  EXPECT_EQ(DriveMap::MaxFlashBytes(df::kRecordAlignShift), uint64_t{8} << 40);
  for (uint32_t shift : {0u, df::kRecordAlignShift}) {
    SCOPED_TRACE("align shift " + std::to_string(shift));
    const uint64_t align = uint64_t{1} << shift, max = DriveMap::MaxFlashBytes(shift);
    const uint32_t longest = df::RecordFootprint(df::kMaxRecordBytes, shift);
    DriveMap map(1024, shift);
    std::vector<uint64_t> want(1024);
    for (uint64_t lba = 0; lba < 1024; ++lba) {
      uint64_t offset = (kBlockSize + rng() % (max - kBlockSize)) & ~(align - 1);
      uint32_t length = df::RecordFootprint(32 + rng() % (df::kMaxRecordBytes - 31), shift);
      if (lba == 0) offset = kBlockSize;
      if (lba == 1) offset = max - align, length = longest;  // the extremes
      if (lba == 2) length = df::kRecordHeaderBytes;
      want[lba] = lba == 3 ? df::kLostBlock : df::PackLoc(offset, length);
      ASSERT_TRUE(map.Holds(want[lba])) << offset << " " << length;
      map.Set(lba, want[lba]);
    }
    for (uint64_t lba = 0; lba < 1024; ++lba) ASSERT_EQ(map.Get(lba), want[lba]) << lba;
    EXPECT_FALSE(map.Holds(df::PackLoc(max, 48)));  // past the limit
    EXPECT_FALSE(map.Holds(df::PackLoc(0, 48)));    // the superblock
    if (shift > 0) {
      EXPECT_FALSE(map.Holds(df::PackLoc(kBlockSize + 8, 48)));  // unaligned offset
      EXPECT_FALSE(map.Holds(df::PackLoc(kBlockSize, 40)));      // unaligned footprint
    }
  }
}

// Runs of 16 entries exist only where an entry is set: an array's holes (a chunk of 16
// blocks in four left unwritten) cost nothing, and a freed run is reused. Against a model
// (std::map) under random sets and clears, with CopyPage and ForEachSet checked whole.
TEST(DriveMapTest, RunsExistOnlyWhereEntriesAreAndMatchAModel) {
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu\n", (unsigned long long)seed);
  std::mt19937_64 rng(seed);
  const uint64_t size = 40 * DriveMap::kPageEntries + 21;
  DriveMap map(size, df::kRecordAlignShift);
  // Three chunks of 16 in every four written, as RAID10 leaves slot-1.
  for (uint64_t lba = 0; lba < 8 * DriveMap::kPageEntries; ++lba) {
    if ((lba / 16) % 4 != 3) map.Set(lba, L(lba + 1));
  }
  EXPECT_EQ(map.resident_runs(), 8 * DriveMap::kPageEntries / 16 * 3 / 4);
  EXPECT_EQ(map.resident_pages(), 8u);
  const uint64_t runs = map.resident_runs();
  for (uint64_t lba = 0; lba < 16; ++lba) map.Set(lba, 0);  // a whole run goes
  EXPECT_EQ(map.resident_runs(), runs - 1);
  map.Set(size - 1, L(7));  // made again from the freed one
  EXPECT_EQ(map.resident_runs(), runs);
  std::map<uint64_t, uint64_t> model;
  map.Clear();
  EXPECT_EQ(map.resident_runs(), 0u);
  for (int op = 0; op < 200000; ++op) {
    const uint64_t lba = rng() % 4 ? rng() % (3 * DriveMap::kPageEntries) : rng() % size;
    const uint64_t v = rng() % 3 ? 0 : L(1 + rng() % 1000);  // clears outnumber sets
    map.Set(lba, v);
    if (v) {
      model[lba] = v;
    } else {
      model.erase(lba);
    }
    ASSERT_EQ(map.Get(lba), v);
    if (op % 5000 == 0) {
      std::set<uint64_t> runs_used, pages_used;
      for (const auto& kv : model) {
        runs_used.insert(kv.first / 16);
        pages_used.insert(kv.first / DriveMap::kPageEntries);
      }
      ASSERT_EQ(map.resident_runs(), runs_used.size()) << "op " << op;
      ASSERT_EQ(map.resident_pages(), pages_used.size()) << "op " << op;
      std::vector<std::pair<uint64_t, uint64_t>> set;
      map.ForEachSet([&](uint64_t l, uint64_t e) { set.emplace_back(l, e); });
      const std::vector<std::pair<uint64_t, uint64_t>> want(model.begin(), model.end());
      ASSERT_EQ(set, want);
      std::vector<uint64_t> page(DriveMap::kPageEntries);
      for (uint64_t k = 0; k < map.page_count(); ++k) {
        ASSERT_EQ(map.CopyPage(k, page.data()), pages_used.count(k) != 0) << "page " << k;
        if (!pages_used.count(k)) continue;
        for (uint64_t i = 0; i < DriveMap::kPageEntries; ++i) {
          const uint64_t l = k * DriveMap::kPageEntries + i;
          auto it = model.find(l);
          ASSERT_EQ(page[i], it == model.end() ? 0 : it->second) << "lba " << l;
        }
      }
    }
  }
}

// A drive over a large logical space with a few blocks written, and a model of them.
struct Rig {
  // ~63 MiB: at the default expansion, a logical space that ends in a partial map page
  MemBackend media{16100};
  FaultyBackend flash{media};  // for its read counts
  DriveOptions options;
  std::unique_ptr<CompressedDrive> drive;
  std::map<uint64_t, Block> model;
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng{seed};

  Rig() {
    std::printf("seed %llu (ERAID_SEED=%llu replays)\n", static_cast<unsigned long long>(seed),
                static_cast<unsigned long long>(seed));
    options.erase_unit_blocks = 16;
    drive = std::move(CompressedDrive::Format(flash, options)).value();
  }
  void Write(uint64_t lba) {
    Block b(kBlockSize);
    FillBlockWithCompressibility(b, 50, rng);
    ASSERT_TRUE(drive->Write(Lba(lba), b).ok());
    model[lba] = b;
  }
  void Reopen() {
    drive.reset();
    auto d = CompressedDrive::Open(flash, options);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    drive = std::move(d).value();
    ASSERT_TRUE(drive->CheckInvariants().ok());
  }
  void Verify(const char* when) {
    Block back(kBlockSize);
    for (const auto& [lba, want] : model) {
      ASSERT_TRUE(drive->Read(Lba(lba), back).ok()) << when << ": lba " << lba;
      ASSERT_EQ(back, want) << when << ": lba " << lba;
    }
  }
  df::Superblock Super() {
    Block b(kBlockSize);
    EXPECT_TRUE(flash.Read(Lba(0), b).ok());
    return df::DecodeSuperblock(b).value();
  }
  uint64_t SlotBlock(uint32_t slot) { return 1 + uint64_t{slot} * Super().ckpt_slot_blocks; }
  df::CheckpointHeader Header(uint32_t slot) {
    Block b(kBlockSize);
    EXPECT_TRUE(flash.Read(Lba(SlotBlock(slot)), b).ok());
    return df::DecodeCheckpointHeader(b).value();
  }
  uint32_t NewerSlot() { return Header(0).ckpt_count > Header(1).ckpt_count ? 0 : 1; }
  Block Payload(uint32_t slot) {
    const df::CheckpointHeader h = Header(slot);
    Block p(BlocksToBytes(BytesToBlocks(h.payload_bytes + kBlockSize - 1)));
    EXPECT_TRUE(flash.Read(Lba(SlotBlock(slot) + 1), p).ok());
    p.resize(h.payload_bytes);
    return p;
  }
  // Writes a checkpoint of `version` with this payload over the slot, CRCs made anew.
  void Forge(uint32_t slot, df::CheckpointHeader h, Block payload) {
    h.payload_bytes = payload.size();
    h.payload_crc = Crc32c(payload.data(), payload.size());
    payload.resize(BlocksToBytes(BytesToBlocks(payload.size() + kBlockSize - 1)));
    Block head(kBlockSize);
    df::EncodeCheckpointHeader(h, head);
    ASSERT_TRUE(flash.Write(Lba(SlotBlock(slot)), head).ok());
    ASSERT_TRUE(flash.Write(Lba(SlotBlock(slot) + 1), payload).ok());
  }
};

TEST(DriveCheckpointTest, ACheckpointWritesAndAnOpenReadsOnlyTheMapPagesInUse) {
  Rig r;
  const df::Superblock sb = r.Super();
  ASSERT_GE(sb.logical_blocks, 16 * df::kMapPageEntries);
  // Three map pages in use, far apart.
  for (uint64_t lba :
       {uint64_t{3}, uint64_t{4}, 5 * df::kMapPageEntries + 1, sb.logical_blocks - 1})
    r.Write(lba);
  const uint64_t meta_before = r.drive->stats().meta_write_bytes;
  ASSERT_TRUE(r.drive->Close().ok());
  const uint64_t written = r.drive->stats().meta_write_bytes - meta_before;
  const uint64_t payload = df::SparsePayloadBytes(sb.logical_blocks, 3, sb.num_eus);
  EXPECT_EQ(written, BlocksToBytes(1 + BytesToBlocks(payload + kBlockSize - 1)))
      << "the header block and the sparse payload's blocks, not the slot's "
      << BlocksToBytes(sb.ckpt_slot_blocks);
  const uint32_t newer = r.NewerSlot();
  EXPECT_EQ(r.Header(newer).version, df::kCheckpointVersionSparse);
  EXPECT_EQ(r.Header(newer).payload_bytes, payload);
  const uint64_t reads_before = r.flash.stats().reads;
  r.Reopen();
  EXPECT_EQ(r.flash.stats().reads - reads_before, 4u)
      << "superblock, two checkpoint headers, one payload";
  r.Verify("after a clean reopen");
  // Trimmed to nothing, a page goes from the next checkpoint.
  ASSERT_TRUE(r.drive->Trim(Lba(5 * df::kMapPageEntries), df::kMapPageEntries).ok());
  r.model.erase(5 * df::kMapPageEntries + 1);
  ASSERT_TRUE(r.drive->Close().ok());
  EXPECT_EQ(r.Header(r.NewerSlot()).payload_bytes,
            df::SparsePayloadBytes(sb.logical_blocks, 2, sb.num_eus));
  r.Reopen();
  r.Verify("after a trim emptied a page");
}

// An erase unit sealed before the checkpoint takes no more records (its entry says so):
// a crash recovery reads its header page, to see it was not erased and reused since, and
// nothing past its write pointer. Only units open at the checkpoint are scanned further.
TEST(DriveCheckpointTest, ACrashRecoveryReadsNothingPastUnitsSealedBeforeTheCheckpoint) {
  Rig r;
  const df::Superblock sb = r.Super();
  for (uint64_t lba = 0; lba < 12 * 16; ++lba) r.Write(lba);  // a dozen units' worth
  ASSERT_TRUE(r.drive->Close().ok());
  const uint64_t writes_before = r.flash.stats().writes;
  r.Reopen();
  EXPECT_FALSE(r.drive->opened_after_crash()) << "closed cleanly";
  EXPECT_EQ(r.flash.stats().writes, writes_before) << "a clean open writes nothing";
  r.drive.reset();  // nothing written since: the clean checkpoint still says all
  r.Reopen();
  EXPECT_FALSE(r.drive->opened_after_crash()) << "nothing was written after the clean open";
  // The first record writes a checkpoint, not clean, with those units sealed.
  r.Write(12 * 16);
  ASSERT_TRUE(r.drive->Flush().ok());  // durable, so the model holds it after the crash
  EXPECT_GT(r.flash.stats().writes, writes_before);
  const uint64_t used = sb.num_eus - r.drive->stats().free_eus;
  ASSERT_GE(used, 4u);
  r.drive.reset();  // no close: the next open is a crash recovery
  const uint64_t reads_before = r.flash.stats().reads;
  r.Reopen();
  const uint64_t reads = r.flash.stats().reads - reads_before;
  EXPECT_TRUE(r.drive->opened_after_crash());
  std::printf("%llu units in use, %llu reads\n", static_cast<unsigned long long>(used),
              static_cast<unsigned long long>(reads));
  // Superblock, two checkpoint headers, a payload; one header page per unit.
  EXPECT_LT(reads, 4 + sb.num_eus + used / 2) << "a read past the write pointer of sealed units";
  r.Verify("after the crash recovery");
}

TEST(DriveCheckpointTest, ADenseVersionOneCheckpointStillOpens) {
  Rig r;
  const df::Superblock sb = r.Super();
  for (int i = 0; i < 300; ++i) r.Write(r.rng() % sb.logical_blocks);
  ASSERT_TRUE(r.drive->Close().ok());
  r.drive.reset();
  // Rewrite the newer slot as a drive from before version 2 wrote it: the same map,
  // dense, then the same EU table.
  const uint32_t newer = r.NewerSlot();
  df::CheckpointHeader h = r.Header(newer);
  const Block sparse = r.Payload(newer);
  Block dense(df::DensePayloadBytes(sb.logical_blocks, sb.num_eus));
  const std::byte* page = sparse.data() + df::MapBitmapBytes(sb.logical_blocks);
  for (uint64_t k = 0; k < df::MapPages(sb.logical_blocks); ++k) {
    if ((std::to_integer<unsigned>(sparse[k / 8]) >> (k % 8) & 1) == 0) continue;
    const uint64_t n = std::min(df::kMapPageEntries, sb.logical_blocks - k * df::kMapPageEntries);
    std::copy(page, page + n * 8, dense.begin() + static_cast<ptrdiff_t>(k * df::kMapPageBytes));
    page += df::kMapPageBytes;
  }
  const size_t eu_table = size_t{sb.num_eus} * df::kCheckpointEuEntryBytes;
  std::copy(sparse.end() - static_cast<ptrdiff_t>(eu_table), sparse.end(),
            dense.end() - static_cast<ptrdiff_t>(eu_table));
  h.version = df::kCheckpointVersionDense;
  r.Forge(newer, h, dense);
  const uint64_t reads_before = r.flash.stats().reads;
  r.Reopen();
  EXPECT_EQ(r.flash.stats().reads - reads_before, 4u) << "still clean: no scan";
  r.Verify("opened from a version 1 checkpoint");
  // Its next checkpoint is sparse again.
  r.Write(7);
  ASSERT_TRUE(r.drive->Close().ok());
  EXPECT_EQ(r.Header(r.NewerSlot()).version, df::kCheckpointVersionSparse);
  r.Reopen();
  r.Verify("after the next checkpoint");
}

TEST(DriveCheckpointTest, ANewerCheckpointThatDoesNotAddUpIsPassedOverForTheOlder) {
  // Each way a sparse payload can be wrong with a good CRC (a bug, or a forged slot).
  enum Damage { kBitPastTheMap, kEntryPastTheMap, kSizeDisagrees, kBadCrc };
  for (Damage damage : {kBitPastTheMap, kEntryPastTheMap, kSizeDisagrees, kBadCrc}) {
    SCOPED_TRACE(damage);
    Rig r;
    const df::Superblock sb = r.Super();
    // Not in the last map page, which one case below makes present.
    for (int i = 0; i < 100; ++i) r.Write(r.rng() % (sb.logical_blocks - df::kMapPageEntries));
    ASSERT_TRUE(r.drive->Flush().ok());
    ASSERT_TRUE(r.drive->Close().ok());  // the newer: clean; the older: an earlier one
    r.drive.reset();
    const uint32_t newer = r.NewerSlot();
    df::CheckpointHeader h = r.Header(newer);
    Block p = r.Payload(newer);
    const uint64_t pages = df::MapPages(sb.logical_blocks);
    switch (damage) {
      case kBitPastTheMap:
        ASSERT_LT(pages, df::MapBitmapBytes(sb.logical_blocks) * 8) << "no spare bit to set";
        p[pages / 8] |= static_cast<std::byte>(1u << (pages % 8));
        break;
      case kEntryPastTheMap: {
        // Make the last page present with an entry past logical_blocks.
        ASSERT_NE(sb.logical_blocks % df::kMapPageEntries, 0u) << "the last page is whole";
        const uint64_t k = pages - 1;
        ASSERT_EQ(std::to_integer<unsigned>(p[k / 8]) >> (k % 8) & 1, 0u);
        p[k / 8] |= static_cast<std::byte>(1u << (k % 8));
        Block page(df::kMapPageBytes);
        PutLe64(page.data() + (df::kMapPageEntries - 1) * 8, 123 << 13);
        const size_t eu_table = size_t{sb.num_eus} * df::kCheckpointEuEntryBytes;
        p.insert(p.end() - static_cast<ptrdiff_t>(eu_table), page.begin(), page.end());
        break;
      }
      case kSizeDisagrees:
        p.insert(p.end(), df::kMapPageBytes, std::byte{0});
        break;
      case kBadCrc:
        break;
    }
    r.Forge(newer, h, p);
    if (damage == kBadCrc) {
      Block b(kBlockSize);
      ASSERT_TRUE(r.flash.Read(Lba(r.SlotBlock(newer) + 1), b).ok());
      b[100] ^= std::byte{1};
      ASSERT_TRUE(r.flash.Write(Lba(r.SlotBlock(newer) + 1), b).ok());
    }
    // The older checkpoint (not clean: so every erase unit's header is read), then the
    // scan, bring back every block.
    const uint64_t reads_before = r.flash.stats().reads;
    r.Reopen();
    EXPECT_GE(r.flash.stats().reads - reads_before, sb.num_eus) << "the older one was used";
    r.Verify("opened from the older checkpoint");
  }
}

}  // namespace
}  // namespace eraid
