// The elastic array against a model (segment, position) -> bytes: every geometry in a
// sweep of devices 3..8 x chunk sizes x both schemes, with each device failed in turn
// (by command and by I/O errors), degraded writes, replace + rebuild, scrub, reopen,
// conversions both ways, and bit rot in data, parity, mirror copies and summaries.
#include "raid/array.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "common/crc32c.h"
#include "common/data_gen.h"
#include "common/encoding.h"
#include "compress/compressed_drive.h"
#include "compress/faulty_backend.h"
#include "compress/mem_backend.h"
#include "raid/metadata.h"
#include "tests/support/seed.h"
#include "tests/support/stack.h"

namespace eraid {
namespace {

using Block = std::vector<std::byte>;

// An array over fault-injecting devices, and what each (segment, position) holds.
struct Rig : FaultyDevices {
  std::unique_ptr<ElasticArray> array;
  std::map<std::pair<uint32_t, uint32_t>, Block> model;
  std::mt19937_64 rng;

  Rig(uint32_t devices, uint32_t chunk, uint32_t rows, uint64_t device_blocks, uint64_t seed)
      : FaultyDevices(devices, device_blocks), rng(seed) {
    array = MakeArray(devs, chunk, rows);
  }
  Block RandomBlock() {
    Block b(kBlockSize);
    FillBlockWithCompressibility(b, static_cast<uint32_t>(rng() % 80), rng);
    return b;
  }
  // Appends up to `n` blocks to `s` (stops when full); returns how many went in.
  uint32_t Fill(SegmentId s, uint32_t n, bool flush_sometimes = true) {
    uint32_t done = 0;
    for (; done < n && array->Remaining(s) > 0; ++done) {
      Block b = RandomBlock();
      auto pos = array->Append(s, b, s.value * 100000ull + done, done);
      EXPECT_TRUE(pos.ok()) << pos.status().ToString();
      if (!pos.ok()) return done;
      model[{s.value, *pos}] = b;
      if (flush_sometimes && rng() % 16 == 0) {
        EXPECT_TRUE(array->Flush().ok());
        Status inv = array->CheckInvariants();
        EXPECT_TRUE(inv.ok()) << inv.ToString();
      }
    }
    return done;
  }
  void VerifyAll(const std::string& when) {
    Status inv = array->CheckInvariants();
    ASSERT_TRUE(inv.ok()) << when << ": " << inv.ToString();
    Block back(kBlockSize);
    for (const auto& [key, data] : model) {
      Status s = array->Read(SegmentId(key.first), key.second, back);
      ASSERT_TRUE(s.ok()) << when << ": segment " << key.first << " pos " << key.second << ": "
                          << s.ToString();
      ASSERT_EQ(back, data) << when << ": segment " << key.first << " pos " << key.second;
    }
  }
  void Reopen() {
    array.reset();
    auto a = ElasticArray::Open(devs);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    array = std::move(a).value();
  }
};

struct Shape {
  uint32_t devices, chunk;
  SegmentScheme scheme;
};

class ArraySweep : public ::testing::TestWithParam<Shape> {};

TEST_P(ArraySweep, EveryDeviceFailsInTurn) {
  const Shape shape = GetParam();
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu (ERAID_SEED replays)\n", (unsigned long long)seed);
  // -1: healthy run; then each device in turn (even: I/O errors, odd: by command).
  for (int failed = -1; failed < static_cast<int>(shape.devices); ++failed) {
    SCOPED_TRACE("failed device " + std::to_string(failed));
    Rig rig(shape.devices, shape.chunk, 2, 4096, seed + failed);
    const uint32_t per_segment = static_cast<uint32_t>(rig.array->geometry().segment_positions());
    std::vector<SegmentId> segs;
    for (int i = 0; i < 3; ++i) segs.push_back(rig.array->AllocateSegment(shape.scheme).value());
    // Interleaved appends, so rows of different segments fill at different times.
    for (uint32_t b = 0; b < per_segment; b += 5) {
      for (SegmentId s : segs) rig.Fill(s, 5);
    }
    ASSERT_TRUE(rig.array->Seal(segs[0]).ok());
    ASSERT_TRUE(rig.array->Seal(segs[1]).ok());
    ASSERT_TRUE(rig.array->Flush().ok());
    rig.VerifyAll("healthy");
    if (failed < 0) {
      rig.Reopen();
      rig.VerifyAll("reopened");
      continue;
    }
    const auto f = static_cast<uint32_t>(failed);
    if (f % 2 == 0) {
      rig.faulty[f]->FailStop();  // the array finds out from the errors
    } else {
      ASSERT_TRUE(rig.array->FailDevice(DeviceIndex(f)).ok());
    }
    rig.VerifyAll("degraded");
    if (f % 2 == 1) {  // failed by command: at once
      EXPECT_TRUE(rig.array->stats().degraded);
      EXPECT_EQ(rig.array->stats().devices[f].state, DeviceState::kFailed);
    }
    // Degraded writes: the open segment goes on, and a new one is written and sealed.
    SegmentId extra = rig.array->AllocateSegment(shape.scheme).value();
    rig.Fill(extra, per_segment / 2);
    rig.Fill(segs[2], per_segment);
    ASSERT_TRUE(rig.array->Seal(extra).ok());
    ASSERT_TRUE(rig.array->Flush().ok());
    rig.VerifyAll("degraded writes");
    // A fail-stopped device is found out from the errors of the I/O that touches it. The
    // reads above need not touch it (with one-block chunks and many flushes, no sealed
    // block of the model may have its primary copy there: seed 3433917733 at 8 devices);
    // a new segment's writes and the flush do.
    EXPECT_TRUE(rig.array->stats().degraded);
    EXPECT_EQ(rig.array->stats().devices[f].state, DeviceState::kFailed);
    // Replace and rebuild online, with progress reported per segment.
    Backend* spare = rig.Add();
    uint32_t reports = 0;
    ASSERT_TRUE(
        rig.array->Replace(DeviceIndex(f), spare, 0, [&](const RebuildProgress&) { ++reports; })
            .ok());
    EXPECT_EQ(reports, rig.array->geometry().segments);
    EXPECT_FALSE(rig.array->stats().degraded);
    auto scrub = rig.array->Scrub();
    ASSERT_TRUE(scrub.ok());
    EXPECT_EQ(scrub->crc_mismatches, 0u);
    EXPECT_EQ(scrub->parity_mismatches + scrub->mirror_mismatches, 0u);
    EXPECT_EQ(scrub->unrepairable, 0u);
    // The rebuilt device really holds its share: lose another one and read everything.
    rig.devs[f] = spare;
    ASSERT_TRUE(rig.array->FailDevice(DeviceIndex((f + 1) % shape.devices)).ok());
    rig.VerifyAll("after rebuild, another device failed");
    rig.Reopen();
    rig.VerifyAll("reopened degraded");
  }
}

std::vector<Shape> Shapes() {
  std::vector<Shape> v;
  for (uint32_t d = 3; d <= 8; ++d) {
    for (uint32_t c : {1u, 4u, 16u}) {
      for (auto s : {SegmentScheme::kRaid5, SegmentScheme::kRaid10}) v.push_back({d, c, s});
    }
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Geometries, ArraySweep, ::testing::ValuesIn(Shapes()),
                         [](const auto& info) {
                           return std::to_string(info.param.devices) + "dev_chunk" +
                                  std::to_string(info.param.chunk) + "_" +
                                  raid_format::SchemeName(info.param.scheme);
                         });

TEST(ArrayTest, ConversionsBothWaysKeepDataAndRedundancy) {
  Rig rig(4, 4, 4, 4096, 77);
  std::vector<SegmentId> segs;
  for (int i = 0; i < 4; ++i) {
    segs.push_back(
        rig.array->AllocateSegment(i % 2 ? SegmentScheme::kRaid10 : SegmentScheme::kRaid5).value());
    rig.Fill(segs.back(), 1000);
    ASSERT_TRUE(rig.array->Seal(segs.back()).ok());
  }
  for (int round = 0; round < 3; ++round) {
    for (SegmentId s : segs) {
      SegmentScheme to = rig.array->segment_info(s).scheme == SegmentScheme::kRaid5
                             ? SegmentScheme::kRaid10
                             : SegmentScheme::kRaid5;
      ASSERT_TRUE(rig.array->Convert(s, to).ok());
      EXPECT_EQ(rig.array->segment_info(s).scheme, to);
    }
    rig.VerifyAll("after conversions");
    auto scrub = rig.array->Scrub();
    ASSERT_TRUE(scrub.ok());
    EXPECT_EQ(scrub->parity_mismatches + scrub->mirror_mismatches + scrub->crc_mismatches, 0u);
  }
  EXPECT_EQ(rig.array->stats().conversions_to_raid10, 6u);
  EXPECT_EQ(rig.array->stats().conversions_to_raid5, 6u);
  // Each scheme's redundancy is really there: every single device can go.
  for (uint32_t d = 0; d < 4; ++d) {
    rig.Reopen();
    rig.faulty[d]->FailStop();
    rig.VerifyAll("device " + std::to_string(d) + " down after conversions");
    rig.faulty[d]->ClearFaults();
    ASSERT_TRUE(rig.array->Replace(DeviceIndex(d), rig.faulty[d].get()).ok());
  }
  // An open segment is not converted.
  SegmentId open = rig.array->AllocateSegment(SegmentScheme::kRaid5).value();
  EXPECT_EQ(rig.array->Convert(open, SegmentScheme::kRaid10).code(), StatusCode::kBusy);
}

// A conversion reads a chunk's blocks per hold of the shared lock and stops at the first
// that fails its CRC: that one is read again through the repairing path, and the rest of
// the chunk is read after it. Rot in the first, a middle and the last block of a chunk,
// and in two blocks next to each other, is repaired and none of it is copied into the
// new redundancy.
TEST(ArrayTest, ConversionRepairsBitRotItMeetsAndCopiesNoneOfIt) {
  for (auto from : {SegmentScheme::kRaid5, SegmentScheme::kRaid10}) {
    Rig rig(4, 8, 4, 4096, 21);
    const ArrayGeometry& g = rig.array->geometry();
    SegmentId s = rig.array->AllocateSegment(from).value();
    rig.Fill(s, 10000, false);
    ASSERT_TRUE(rig.array->Seal(s).ok());
    // In the second row: its first chunk's first two blocks, a middle one and its last,
    // and two neighbours in the next chunk — those of them that hold data (a summary
    // block takes some positions). No two share a stripe (the same offset in their
    // chunks), so RAID5 can rebuild each from the others.
    const uint32_t rb = g.row_blocks();
    std::vector<uint32_t> rotten;
    for (uint32_t off : {0u, 1u, 4u, 7u, 10u, 11u}) {
      const uint32_t pos = rb + off;
      if (!rig.model.count({s.value, pos})) continue;
      rotten.push_back(pos);
      const Place p = g.Primary(s, pos);
      ASSERT_TRUE(rig.faulty[p.device]->FlipBit(Lba(p.lba), 8 * off + 1).ok());
    }
    ASSERT_GE(rotten.size(), 5u);
    const SegmentScheme to =
        from == SegmentScheme::kRaid5 ? SegmentScheme::kRaid10 : SegmentScheme::kRaid5;
    Status converted = rig.array->Convert(s, to);
    ASSERT_TRUE(converted.ok()) << converted.ToString();
    EXPECT_EQ(rig.array->segment_info(s).scheme, to);
    EXPECT_EQ(rig.array->stats().crc_mismatches, rotten.size()) << raid_format::SchemeName(from);
    EXPECT_EQ(rig.array->stats().repairs, rotten.size());
    auto scrub = rig.array->Scrub();
    ASSERT_TRUE(scrub.ok());
    EXPECT_EQ(scrub->crc_mismatches + scrub->parity_mismatches + scrub->mirror_mismatches, 0u)
        << "the new redundancy was built from repaired data";
    // Every device can go and each block is still there: the redundancy is whole.
    for (uint32_t d = 0; d < 4; ++d) {
      rig.Reopen();
      rig.faulty[d]->FailStop();
      rig.VerifyAll("device " + std::to_string(d) + " down after a conversion that met rot");
      rig.faulty[d]->ClearFaults();
      ASSERT_TRUE(rig.array->Replace(DeviceIndex(d), rig.faulty[d].get()).ok());
    }
  }
}

// A CRC cache of one segment's CRCs: sealed segments' CRCs leave RAM and are read back
// from their summaries when a read, a conversion or a rebuild needs them. Every block
// still reads right and is still verified (a flipped bit in an evicted segment's block
// is found and repaired), across conversions, a rebuild and a reopen.
TEST(ArrayTest, ACrcCacheOfOneSegmentStillVerifiesEveryBlock) {
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu\n", (unsigned long long)seed);
  Rig rig(4, 4, 2, 4096, seed);
  const ArrayGeometry& g = rig.array->geometry();
  const uint64_t one_segment = g.segment_positions() * sizeof(uint32_t);
  rig.array->set_crc_cache_bytes(one_segment);
  std::vector<SegmentId> segs;
  for (int i = 0; i < 6; ++i) {
    SegmentId s =
        rig.array->AllocateSegment(i % 2 ? SegmentScheme::kRaid10 : SegmentScheme::kRaid5).value();
    rig.Fill(s, static_cast<uint32_t>(g.segment_positions()));
    ASSERT_TRUE(rig.array->Seal(s).ok());
    segs.push_back(s);
  }
  ASSERT_TRUE(rig.array->Flush().ok());
  rig.VerifyAll("sealed");
  ArrayStats st = rig.array->stats();
  EXPECT_GT(st.crc_cache_loads, 0u);
  EXPECT_GT(st.crc_cache_evictions, 0u);
  EXPECT_LE(st.crc_cache_bytes, one_segment) << "the cache stays within its bound";

  // A bit flipped in a block of a segment whose CRCs are not in RAM (segs[0]: the reads
  // above ended in segs[5]) is caught, and the block repaired from its redundancy.
  // A data position: the first the model holds (summaries take positions of their own,
  // 0 and wherever a flush put one, so a fixed position such as 3 is not always data).
  const auto first = rig.model.lower_bound({segs[0].value, 0});
  ASSERT_TRUE(first != rig.model.end() && first->first.first == segs[0].value);
  const uint32_t pos = first->first.second;
  const Place p = g.Primary(segs[0], pos);
  ASSERT_TRUE(rig.faulty[p.device]->FlipBit(Lba(p.lba), 1234).ok());
  Block back(kBlockSize);
  ASSERT_TRUE(rig.array->Read(segs[0], pos, back).ok());
  EXPECT_EQ(back, rig.model.at({segs[0].value, pos}));
  EXPECT_EQ(rig.array->stats().crc_mismatches, st.crc_mismatches + 1);
  EXPECT_EQ(rig.array->stats().repairs, st.repairs + 1);
  EXPECT_EQ(rig.array->stats().crc_cache_loads, st.crc_cache_loads + 1) << "read back for it";

  // Conversions of segments whose CRCs left, both ways.
  for (SegmentId s : {segs[1], segs[2]}) {
    const SegmentScheme to = rig.array->segment_info(s).scheme == SegmentScheme::kRaid5
                                 ? SegmentScheme::kRaid10
                                 : SegmentScheme::kRaid5;
    ASSERT_TRUE(rig.array->Convert(s, to).ok());
    EXPECT_EQ(rig.array->segment_info(s).scheme, to);
  }
  rig.VerifyAll("converted");
  // A rebuild of a device, every segment's CRCs read back along the way.
  ASSERT_TRUE(rig.array->FailDevice(DeviceIndex(2)).ok());
  rig.VerifyAll("degraded");
  ASSERT_TRUE(rig.array->Replace(DeviceIndex(2), rig.faulty[2].get()).ok());
  rig.VerifyAll("rebuilt");
  EXPECT_LE(rig.array->stats().crc_cache_bytes, one_segment);
  rig.Reopen();
  rig.array->set_crc_cache_bytes(one_segment);
  rig.VerifyAll("reopened");
  EXPECT_LE(rig.array->stats().crc_cache_bytes, one_segment);
  // Unbounded: once read back, every segment keeps its CRCs.
  rig.array->set_crc_cache_bytes(0);
  rig.VerifyAll("unbounded");
  st = rig.array->stats();
  rig.VerifyAll("unbounded, again");
  EXPECT_EQ(rig.array->stats().crc_cache_loads, st.crc_cache_loads);
  uint64_t written = 0;  // positions: a segment read back holds exactly its frontier's CRCs
  for (SegmentId s : segs) written += rig.array->segment_info(s).frontier;
  EXPECT_GE(rig.array->stats().crc_cache_bytes, written * sizeof(uint32_t));
}

// ReadMany (GC's read-ahead) gives what Read gives, position by position: sealed
// segments of both schemes whose CRCs left the cache, an open one (blocks still in RAM),
// a rotten block (repaired by the block's own slow read), a device failed (degraded),
// positions in any order and repeated, and a position past the frontier refused alone.
TEST(ArrayTest, ReadManyReadsWhatReadReads) {
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu\n", (unsigned long long)seed);
  Rig rig(4, 4, 2, 4096, seed);
  const ArrayGeometry& g = rig.array->geometry();
  rig.array->set_crc_cache_bytes(g.segment_positions() * sizeof(uint32_t));
  std::vector<SegmentId> segs;
  for (int i = 0; i < 4; ++i) {
    SegmentId s =
        rig.array->AllocateSegment(i % 2 ? SegmentScheme::kRaid10 : SegmentScheme::kRaid5).value();
    const bool open = i == 3;
    rig.Fill(s, static_cast<uint32_t>(open ? g.segment_positions() / 3 : g.segment_positions()));
    if (!open) {
      ASSERT_TRUE(rig.array->Seal(s).ok());
    }
    segs.push_back(s);
  }
  ASSERT_TRUE(rig.array->Flush().ok());
  Block one(kBlockSize);
  ASSERT_TRUE(rig.array->Read(segs[2], 1, one).ok());  // segs[0]'s CRCs evicted
  // A position of segs[0] with bits flipped on its primary copy.
  const Place rotten = g.Primary(segs[0], 5);
  ASSERT_TRUE(rig.faulty[rotten.device]->FlipBit(Lba(rotten.lba), 77).ok());
  auto check = [&](const std::string& when) {
    for (SegmentId s : segs) {
      std::vector<uint32_t> positions;
      for (const auto& [key, data] : rig.model) {
        if (key.first == s.value) positions.push_back(key.second);
      }
      std::shuffle(positions.begin(), positions.end(), rig.rng);
      positions.push_back(positions.front());  // twice
      const uint32_t frontier = rig.array->segment_info(s).frontier;
      positions.push_back(frontier + 1);
      std::vector<std::byte> out(BlocksToBytes(positions.size()));
      std::vector<Status> results(positions.size());
      rig.array->ReadMany(s, positions, out, results);
      for (size_t i = 0; i + 1 < positions.size(); ++i) {
        ASSERT_TRUE(results[i].ok()) << when << ": segment " << s.value << " position "
                                     << positions[i] << ": " << results[i].ToString();
        const Block& want = rig.model.at({s.value, positions[i]});
        ASSERT_EQ(0, std::memcmp(out.data() + BlocksToBytes(i), want.data(), kBlockSize))
            << when << ": segment " << s.value << " position " << positions[i];
      }
      EXPECT_EQ(results.back().code(), StatusCode::kInvalidArgument) << when;
    }
  };
  const ArrayStats before = rig.array->stats();
  check("healthy");
  EXPECT_EQ(rig.array->stats().repairs, before.repairs + 1) << "the rotten block, repaired";
  EXPECT_GT(rig.array->stats().crc_cache_loads, before.crc_cache_loads);
  ASSERT_TRUE(rig.array->FailDevice(DeviceIndex(1)).ok());
  check("degraded");
  ASSERT_TRUE(rig.array->CheckInvariants().ok());
}

// ReadTags hands back every data block's tags in position order, from the summaries on
// the devices and the open batch in RAM: while the segment is open (batches closed by
// flushes and one still open), sealed, converted, with a summary rotten on its primary
// copy (answered from the redundancy), with a device failed, and after a reopen.
TEST(ArrayTest, ReadTagsReturnsEveryBlocksTagsFromTheSummaries) {
  for (auto scheme : {SegmentScheme::kRaid5, SegmentScheme::kRaid10}) {
    SCOPED_TRACE(raid_format::SchemeName(scheme));
    const uint64_t seed = TestSeed() + static_cast<uint64_t>(scheme);
    std::printf("seed=%llu\n", (unsigned long long)seed);
    Rig rig(4, 8, 4, 4096, seed);
    const ArrayGeometry& g = rig.array->geometry();
    SegmentId s = rig.array->AllocateSegment(scheme).value();
    std::map<uint32_t, std::pair<uint64_t, uint64_t>> want;  // position -> tags
    auto check = [&](const std::string& when) {
      std::vector<uint32_t> positions;
      Status st = rig.array->ReadTags(s, [&](uint32_t pos, uint64_t lba, uint64_t time) {
        positions.push_back(pos);
        auto it = want.find(pos);
        ASSERT_NE(it, want.end()) << when << ": position " << pos << " holds no block";
        EXPECT_EQ(lba, it->second.first) << when << ": position " << pos;
        EXPECT_EQ(time, it->second.second) << when << ": position " << pos;
      });
      ASSERT_TRUE(st.ok()) << when << ": " << st.ToString();
      std::vector<uint32_t> expected;
      for (const auto& kv : want) expected.push_back(kv.first);
      EXPECT_EQ(positions, expected) << when << ": every block, in position order";
    };
    const uint32_t total = static_cast<uint32_t>(g.segment_positions()) * 3 / 4;
    for (uint32_t i = 0; i < total && rig.array->Remaining(s) > 0; ++i) {
      const uint64_t lba = rig.rng() % 1000000, time = rig.rng();
      auto pos = rig.array->Append(s, rig.RandomBlock(), lba, time);
      ASSERT_TRUE(pos.ok());
      want[*pos] = {lba, time};
      if (rig.rng() % 40 == 0) {
        ASSERT_TRUE(rig.array->Flush().ok());
      }
      if (i == total / 2) check("open, half written");
    }
    check("open");
    ASSERT_TRUE(rig.array->Seal(s).ok());
    ASSERT_TRUE(rig.array->Flush().ok());
    check("sealed");
    const SegmentScheme other =
        scheme == SegmentScheme::kRaid5 ? SegmentScheme::kRaid10 : SegmentScheme::kRaid5;
    ASSERT_TRUE(rig.array->Convert(s, other).ok());
    check("converted");
    // Rot in the first summary's primary copy: read from the redundancy and repaired.
    const Place p = g.Primary(s, 0);
    ASSERT_TRUE(rig.faulty[p.device]->FlipBit(Lba(p.lba), 77).ok());
    check("summary rotten");
    EXPECT_EQ(rig.array->stats().repairs, 1u);
    ASSERT_TRUE(rig.array->FailDevice(DeviceIndex(p.device)).ok());
    check("degraded");
    rig.Reopen();
    check("reopened");
  }
}

TEST(ArrayTest, DegradedReadAmplification) {
  // RAID5 reconstructs from n other blocks; RAID10 from 1.
  for (auto scheme : {SegmentScheme::kRaid5, SegmentScheme::kRaid10}) {
    Rig rig(4, 4, 4, 4096, 3);
    SegmentId s = rig.array->AllocateSegment(scheme).value();
    rig.Fill(s, 10000, false);
    ASSERT_TRUE(rig.array->Seal(s).ok());
    ASSERT_TRUE(rig.array->FailDevice(DeviceIndex(1)).ok());
    uint64_t before = 0, lost_reads = 0;
    for (const auto& d : rig.array->stats().devices) before += d.reads;
    Block back(kBlockSize);
    for (const auto& [key, data] : rig.model) {
      if (rig.array->geometry().Primary(s, key.second).device != 1) continue;
      ASSERT_TRUE(rig.array->Read(s, key.second, back).ok());
      ++lost_reads;
    }
    uint64_t after = 0;
    for (const auto& d : rig.array->stats().devices) after += d.reads;
    double amplification = double(after - before) / lost_reads;
    std::printf("%s: %.2f device reads per read of a lost block\n", raid_format::SchemeName(scheme),
                amplification);
    EXPECT_DOUBLE_EQ(amplification, scheme == SegmentScheme::kRaid5 ? 3.0 : 1.0);
  }
}

// Degraded reads from several threads at once: each rebuilt from its row under the shared
// lock (side by side, the n reads of each in flight together), every block right, each
// counted once as a reconstruction. Run under TSan too.
TEST(ArrayTest, ConcurrentThreadsReadDegradedSideBySide) {
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu\n", (unsigned long long)seed);
  Rig rig(4, 4, 4, 4096, seed);
  std::vector<SegmentId> segs;
  for (auto scheme : {SegmentScheme::kRaid5, SegmentScheme::kRaid10, SegmentScheme::kRaid5}) {
    SegmentId s = rig.array->AllocateSegment(scheme).value();
    rig.Fill(s, 10000, false);
    ASSERT_TRUE(rig.array->Seal(s).ok());
    segs.push_back(s);
  }
  ASSERT_TRUE(rig.array->Flush().ok());
  ASSERT_TRUE(rig.array->FailDevice(DeviceIndex(2)).ok());
  const ArrayGeometry& g = rig.array->geometry();
  uint32_t lost_primary = 0;
  for (const auto& [key, data] : rig.model)
    lost_primary += g.Primary(SegmentId(key.first), key.second).device == 2;
  const uint64_t before = rig.array->stats().reconstructions;
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      Block back(kBlockSize);
      for (const auto& [key, data] : rig.model) {
        if (!rig.array->Read(SegmentId(key.first), key.second, back).ok() || back != data) ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(rig.array->stats().reconstructions - before, 4ull * lost_primary);
  EXPECT_EQ(rig.array->stats().data_loss, 0u);
  rig.VerifyAll("after the threads");
}

// Bit rot in every kind of stored block is detected by CRC and repaired, never returned.
// The XOR of three valid summaries at the same offset of a RAID5 row (what reconstructing
// a partial row, parity never written, yields) must not pass for a summary. With a plain
// CRC32C (version 1) it does — the position even comes out as the missing block's
// (71 ^ 87 ^ 119 = 103): that forgery made recovery serve XORed blocks as data (seed
// 3200146779 of EveryDeviceFailsInTurn, 5 devices, chunk 16, RAID5).
TEST(ArrayTest, AnXorOfSummariesIsNoSummary) {
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  std::vector<Block> blocks;
  for (uint32_t pos : {71u, 87u, 119u}) {
    raid_format::Summary sum{2, 9, pos, {}};
    const auto k = static_cast<uint32_t>(1 + rng() % 20);
    for (uint32_t i = 0; i < k; ++i)
      sum.entries.push_back({rng(), rng(), static_cast<uint32_t>(rng())});
    Block b(kBlockSize);
    raid_format::EncodeSummary(sum, b);
    ASSERT_TRUE(raid_format::DecodeSummary(b).ok());
    blocks.push_back(std::move(b));
  }
  auto xor_of = [&] {
    Block x(kBlockSize);
    for (const Block& b : blocks) {
      for (size_t i = 0; i < kBlockSize; ++i) x[i] ^= b[i];
    }
    return x;
  };
  EXPECT_FALSE(raid_format::DecodeSummary(xor_of()).ok());
  // The same blocks with version 1's plain CRC: the XOR decodes, at position 103.
  for (Block& b : blocks) {
    PutLe32(b.data() + 4, 1);
    PutLe32(b.data() + 28, 0);
    PutLe32(b.data() + 28, Crc32c(b.data(), kBlockSize));
    ASSERT_TRUE(raid_format::DecodeSummary(b).ok());
  }
  auto forged = raid_format::DecodeSummary(xor_of());
  ASSERT_TRUE(forged.ok()) << "the premise: a CRC is affine over XOR";
  EXPECT_EQ(forged->position, 103u);
}

TEST(ArrayTest, BitFlipsInDataParityMirrorAndSummaryAreRepaired) {
  for (auto scheme : {SegmentScheme::kRaid5, SegmentScheme::kRaid10}) {
    Rig rig(5, 4, 4, 4096, 9);
    const ArrayGeometry& g = rig.array->geometry();
    SegmentId s = rig.array->AllocateSegment(scheme).value();
    rig.Fill(s, 10000, false);
    ASSERT_TRUE(rig.array->Seal(s).ok());
    auto pos_of_data = rig.model.begin()->first.second;  // first data block (position 1)
    // Data primary copy.
    Place p = g.Primary(s, pos_of_data);
    ASSERT_TRUE(rig.faulty[p.device]->FlipBit(Lba(p.lba), 100).ok());
    Block back(kBlockSize);
    ASSERT_TRUE(rig.array->Read(s, pos_of_data, back).ok());
    EXPECT_EQ(back, rig.model.begin()->second);
    EXPECT_EQ(rig.array->stats().crc_mismatches, 1u);
    EXPECT_EQ(rig.array->stats().repairs, 1u);
    // Redundancy: parity (RAID5) or a mirror copy (RAID10), found by scrub.
    Place r = scheme == SegmentScheme::kRaid5 ? g.Parity(s, 1, 2) : g.Mirror(s, 7);
    ASSERT_TRUE(rig.faulty[r.device]->FlipBit(Lba(r.lba), 5).ok());
    // A summary block (position 0) and another data block's primary.
    Place sum = g.Primary(s, 0);
    ASSERT_TRUE(rig.faulty[sum.device]->FlipBit(Lba(sum.lba), 4000).ok());
    Place q = g.Primary(s, 20);
    ASSERT_TRUE(rig.faulty[q.device]->FlipBit(Lba(q.lba), 7).ok());
    auto scrub = rig.array->Scrub();
    ASSERT_TRUE(scrub.ok());
    EXPECT_EQ(scrub->crc_mismatches, 2u) << raid_format::SchemeName(scheme);
    EXPECT_EQ(scrub->parity_mismatches + scrub->mirror_mismatches, 1u);
    EXPECT_EQ(scrub->unrepairable, 0u);
    auto again = rig.array->Scrub();
    EXPECT_EQ(again->crc_mismatches + again->parity_mismatches + again->mirror_mismatches, 0u);
    rig.VerifyAll("after repairs");
    rig.Reopen();  // the repaired summary is read at open
    rig.VerifyAll("reopened after repairs");
  }
}

// Bit rot in both superblock copies of one device: the device is as good as gone (its
// identity cannot be checked), and the array opens degraded without it, every block read
// from the others' redundancy, until a rebuild; two such devices are one too many. A
// device with no eraid superblock at all (zeros: a foreign or blank disk) is still refused.
TEST(ArrayTest, RotInBothSuperblockCopiesOfOneDeviceFailsItAtOpen) {
  Rig rig(4, 4, 4, 4096, 31);
  for (int i = 0; i < 3; ++i) {
    SegmentId s =
        rig.array->AllocateSegment(i % 2 ? SegmentScheme::kRaid10 : SegmentScheme::kRaid5).value();
    rig.Fill(s, 500);
    ASSERT_TRUE(rig.array->Seal(s).ok());
  }
  ASSERT_TRUE(rig.array->Flush().ok());
  rig.array.reset();
  for (uint64_t slot : {0, 1})
    ASSERT_TRUE(rig.faulty[2]->FlipBit(Lba(slot), 700 + static_cast<uint32_t>(slot)).ok());
  auto a = ElasticArray::Open(rig.devs);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  rig.array = std::move(a).value();
  EXPECT_EQ(rig.array->stats().devices[2].state, DeviceState::kFailed);
  for (uint32_t d : {0u, 1u, 3u}) EXPECT_EQ(rig.array->stats().devices[d].state, DeviceState::kOk);
  rig.VerifyAll("opened with device 2's superblocks rotten");
  ASSERT_TRUE(rig.array->Replace(DeviceIndex(2), rig.faulty[2].get()).ok());  // rebuilt in place
  rig.Reopen();
  EXPECT_EQ(rig.array->stats().devices[2].state, DeviceState::kOk);
  rig.VerifyAll("after the rebuild");
  // Two devices rotten: refused.
  rig.array.reset();
  for (uint32_t d : {0u, 3u}) {
    for (uint64_t slot : {0, 1}) ASSERT_TRUE(rig.faulty[d]->FlipBit(Lba(slot), 900).ok());
  }
  EXPECT_FALSE(ElasticArray::Open(rig.devs).ok());
  for (uint32_t d : {0u, 3u}) {
    for (uint64_t slot : {0, 1})
      ASSERT_TRUE(rig.faulty[d]->FlipBit(Lba(slot), 900).ok());  // flipped back
  }
  rig.Reopen();
  rig.VerifyAll("the flips undone");
  // A device that holds no eraid superblock: not rot, refused.
  rig.array.reset();
  const std::vector<std::byte> zeros(kBlockSize);
  std::vector<std::byte> saved(2 * kBlockSize);
  ASSERT_TRUE(rig.media[1]->Read(Lba(0), saved).ok());
  ASSERT_TRUE(rig.media[1]->Write(Lba(0), zeros).ok());
  ASSERT_TRUE(rig.media[1]->Write(Lba(1), zeros).ok());
  auto refused = ElasticArray::Open(rig.devs);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().ToString().find("device 1 has no valid superblock"), std::string::npos)
      << refused.status().ToString();
  ASSERT_TRUE(rig.media[1]->Write(Lba(0), saved).ok());
  rig.Reopen();
  rig.VerifyAll("device 1's superblocks put back");
}

TEST(ArrayTest, ReopenRestoresBitmapFromJournalAndTags) {
  Rig rig(4, 4, 2, 8192, 12);
  std::vector<SegmentId> segs;
  for (int i = 0; i < 40; ++i) {  // more changes than the journal ring holds
    SegmentId s = rig.array->AllocateSegment(SegmentScheme::kRaid5).value();
    rig.Fill(s, 3, false);
    ASSERT_TRUE(rig.array->Seal(s).ok());
    if (i % 3 == 0) {
      ASSERT_TRUE(rig.array->Convert(s, SegmentScheme::kRaid10).ok());
    }
    segs.push_back(s);
  }
  for (int i = 0; i < 40; i += 4) {
    ASSERT_TRUE(rig.array->Free(segs[static_cast<size_t>(i)]).ok());
    std::erase_if(rig.model, [&](const auto& kv) {
      return kv.first.first == segs[static_cast<size_t>(i)].value;
    });
  }
  std::map<uint32_t, SegmentScheme> schemes;
  for (uint32_t i = 0; i < rig.array->geometry().segments; ++i)
    schemes[i] = rig.array->segment_info(SegmentId(i)).scheme;
  rig.Reopen();
  for (auto [i, scheme] : schemes)
    EXPECT_EQ(rig.array->segment_info(SegmentId(i)).scheme, scheme) << "segment " << i;
  rig.VerifyAll("reopened");
  size_t blocks = 0;
  rig.array->TakeRecoveredBlocks([&](SegmentId s, uint32_t pos, uint64_t lba, uint64_t) {
    ++blocks;
    EXPECT_TRUE(rig.model.count({s.value, pos}));
    EXPECT_EQ(lba / 100000, s.value) << "tags come back";
  });
  EXPECT_EQ(blocks, rig.model.size());
  blocks = 0;
  rig.array->TakeRecoveredBlocks([&](SegmentId, uint32_t, uint64_t, uint64_t) { ++blocks; });
  EXPECT_EQ(blocks, 0u) << "handed over once, then forgotten";
  EXPECT_TRUE(rig.array->CheckInvariants().ok());
}

namespace {
// Forwards to a memory device, and logs each read alone (synchronous or submitted) and each
// batch.
struct Recorder final : Backend {
  MemBackend inner;
  bool on = false;
  std::set<uint64_t> batched;  // blocks read in a batch
  uint64_t calls = 0;          // batches
  uint64_t single_reads = 0;   // reads of segment blocks alone
  uint64_t segment_start = 0;  // reads below are superblocks, bitmap and journal
  explicit Recorder(uint64_t blocks) : inner(blocks) {}
  uint64_t capacity_blocks() const override { return inner.capacity_blocks(); }
  uint32_t queue_depth() const override { return inner.queue_depth(); }
  std::string name() const override { return "recorder"; }
  void SubmitRead(Lba lba, std::span<std::byte> buf, IoCallback done) override {
    Note(lba);
    inner.SubmitRead(lba, buf, std::move(done));
  }
  void SubmitWrite(Lba lba, std::span<const std::byte> buf, IoCallback done) override {
    inner.SubmitWrite(lba, buf, std::move(done));
  }
  void SubmitTrim(Lba lba, uint64_t n, IoCallback done) override {
    inner.SubmitTrim(lba, n, std::move(done));
  }
  void SubmitFlush(IoCallback done) override { inner.SubmitFlush(std::move(done)); }
  size_t Poll(bool wait) override { return inner.Poll(wait); }
  size_t in_flight() const override { return inner.in_flight(); }
  Status Read(Lba lba, std::span<std::byte> buf) override {
    Note(lba);
    return inner.Read(lba, buf);
  }
  void SubmitReadMany(std::span<const Lba> blocks, std::span<std::byte> out,
                      std::span<Status> results, IoCallback done) override {
    if (on && !blocks.empty()) ++calls;
    for (Lba b : blocks) {
      if (on) batched.insert(b.value);
    }
    inner.SubmitReadMany(blocks, out, results, std::move(done));
  }
  void Note(Lba lba) {
    if (on && lba.value >= segment_start) ++single_reads;
  }
};
// An array over `n` recorders (4-block chunks, 4 rows per slot).
struct RecordedArray {
  explicit RecordedArray(uint32_t n) {
    for (uint32_t d = 0; d < n; ++d) {
      recorders.push_back(std::make_unique<Recorder>(8192));
      devs.push_back(recorders.back().get());
    }
    array = MakeArray(devs, 4, 4);
  }
  std::vector<std::unique_ptr<Recorder>> recorders;
  std::vector<Backend*> devs;
  std::unique_ptr<ElasticArray> array;
};
}  // namespace

// Open walks every segment's chain of summaries at once, a wave at a time, and reads each
// wave's summaries together, one batch per device (Backend::ReadMany): a cold open then
// waits on the media once per wave, not once per summary.
TEST(ArrayTest, OpenReadsEachWaveOfSummariesInOneBatchPerDevice) {
  constexpr uint32_t kDevices = 4;
  RecordedArray rig(kDevices);
  auto& [recorders, devs, array] = rig;
  ASSERT_NE(array, nullptr);
  // Segment k holds 2k+1 batches of one block each (a flush closes a batch): chains of
  // 1, 3, ..., 11 summaries, 36 in all.
  std::map<std::pair<uint32_t, uint32_t>, Block> model;
  std::mt19937_64 rng(7);
  constexpr uint32_t kSegments = 6, kLongest = 2 * kSegments - 1;
  for (uint32_t k = 0; k < kSegments; ++k) {
    const SegmentId s = array->AllocateSegment(SegmentScheme::kRaid5).value();
    for (uint32_t b = 0; b < 2 * k + 1; ++b) {
      Block block(kBlockSize);
      FillBlockWithCompressibility(block, 50, rng);
      auto pos = array->Append(s, block, s.value * 1000ull + b, b);
      ASSERT_TRUE(pos.ok()) << pos.status().ToString();
      model[{s.value, *pos}] = block;
      ASSERT_TRUE(array->Flush().ok());
    }
    ASSERT_TRUE(array->Seal(s).ok());
  }
  ASSERT_TRUE(array->Flush().ok());
  const uint64_t segment_start = array->geometry().SegmentStart(SegmentId(0));
  array.reset();
  for (auto& r : recorders) {
    r->on = true;
    r->segment_start = segment_start;
  }
  auto opened = ElasticArray::Open(devs);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  array = std::move(opened).value();
  for (auto& r : recorders) r->on = false;
  uint64_t batched = 0;
  for (uint32_t d = 0; d < kDevices; ++d) {
    const Recorder& r = *recorders[d];
    EXPECT_EQ(r.single_reads, 0u) << "device " << d << " read summaries one by one";
    EXPECT_LE(r.calls, kLongest) << "device " << d << ": one batch per wave at most";
    batched += r.batched.size();
  }
  EXPECT_EQ(batched, 36u) << "every summary of every chain, in a batch";
  ASSERT_TRUE(array->CheckInvariants().ok());
  Block back(kBlockSize);
  for (const auto& [key, data] : model) {
    ASSERT_TRUE(array->Read(SegmentId(key.first), key.second, back).ok());
    EXPECT_EQ(back, data) << "segment " << key.first << " position " << key.second;
  }
}

// A scrub reads a segment at a time, as a rebuild does: every device's share of the rows'
// data in one batch, then the redundancy of every row in one batch — not one block (or one
// row) at a time, which over remote drives is a round trip each (7.7 s against 0.4 s for
// 45k blocks over four NBD drives, docs/raid.md). It still finds a rotten parity block.
TEST(ArrayTest, ScrubReadsEachSegmentInBatchesAndStillFindsBadRedundancy) {
  constexpr uint32_t kDevices = 4;
  RecordedArray rig(kDevices);
  auto& [recorders, devs, array] = rig;
  ASSERT_NE(array, nullptr);
  std::mt19937_64 rng(11);
  constexpr uint32_t kSegments = 4;
  for (uint32_t k = 0; k < kSegments; ++k) {
    const SegmentId s =
        array->AllocateSegment(k % 2 ? SegmentScheme::kRaid10 : SegmentScheme::kRaid5).value();
    Block block(kBlockSize);
    while (array->Remaining(s) > 0) {
      FillBlockWithCompressibility(block, 50, rng);
      ASSERT_TRUE(array->Append(s, block, 0, 0).ok());
    }
    ASSERT_TRUE(array->Seal(s).ok());
  }
  ASSERT_TRUE(array->Flush().ok());
  for (auto& r : recorders) {
    r->on = true;
    r->segment_start = array->geometry().SegmentStart(SegmentId(0));
  }
  auto scrub = array->Scrub();
  ASSERT_TRUE(scrub.ok()) << scrub.status().ToString();
  EXPECT_EQ(scrub->segments, kSegments);
  EXPECT_EQ(scrub->crc_mismatches + scrub->parity_mismatches + scrub->mirror_mismatches, 0u);
  for (uint32_t d = 0; d < kDevices; ++d) {
    const Recorder& r = *recorders[d];
    EXPECT_EQ(r.single_reads, 0u) << "device " << d << " was read block by block";
    EXPECT_LE(r.calls, 2 * kSegments) << "device " << d << ": two batches a segment at most";
  }
  for (auto& r : recorders) r->on = false;
  // A parity block that disagrees with its row is still found, and rewritten.
  const Place p = array->geometry().Parity(SegmentId(0), 1, 0);
  Block junk(kBlockSize, std::byte{0x5a});
  ASSERT_TRUE(devs[p.device]->Write(Lba(p.lba), junk).ok());
  scrub = array->Scrub();
  ASSERT_TRUE(scrub.ok());
  EXPECT_EQ(scrub->parity_mismatches, 1u);
  EXPECT_EQ(scrub->repaired, 1u);
  scrub = array->Scrub();
  ASSERT_TRUE(scrub.ok());
  EXPECT_EQ(scrub->parity_mismatches + scrub->mirror_mismatches, 0u);
}

TEST(ArrayTest, CompressionRatiosFromTheDrives) {
  DriveOptions o;
  o.erase_unit_blocks = 16;
  o.max_flashalloc_ranges = 4;
  CompressedDrives drives(4, 8192, o);
  auto array = MakeArray(drives.devs);
  ASSERT_NE(array, nullptr);
  SegmentId s = array->AllocateSegment(SegmentScheme::kRaid5).value();
  std::mt19937_64 rng(1);
  Block b(kBlockSize);
  Block tmp(kBlockSize);
  while (array->Remaining(s) > 0) {
    // Redundancy at a different offset in every block, as in real files: XOR of such
    // blocks loses most of it (the paper's observation, section 3.3).
    FillBlockWithCompressibility(tmp, 75, rng);
    size_t shift = rng() % kBlockSize;
    std::rotate_copy(tmp.begin(), tmp.begin() + static_cast<long>(shift), tmp.end(), b.begin());
    ASSERT_TRUE(array->Append(s, b, 0, 0).ok());
  }
  ASSERT_TRUE(array->Seal(s).ok());
  SegmentInfo info = array->segment_info(s);
  std::printf("alpha_usr %.2f alpha_pty %.2f\n", info.alpha_usr, info.alpha_pty);
  EXPECT_GT(info.alpha_usr, 2.5) << "75% compressible data";
  EXPECT_LT(info.alpha_pty, info.alpha_usr / 2)
      << "parity of independent random data compresses worse";
  EXPECT_GT(info.physical_bytes, 0u);
}

// Four compressing drives, whose stats count every compression they do.
struct CompressedRig : CompressedDrives {
  std::unique_ptr<ElasticArray> array;

  static DriveOptions Options(uint32_t write_cache_blocks) {
    DriveOptions o;
    o.erase_unit_blocks = 16;
    o.max_flashalloc_ranges = 8;
    o.write_cache_blocks = write_cache_blocks;
    return o;
  }
  explicit CompressedRig(uint32_t write_cache_blocks)
      : CompressedDrives(4, 8192, Options(write_cache_blocks)) {
    array = MakeArray(devs, 4, 8);
  }
  uint64_t compressions() const { return Sum(&DriveStats::compressed_blocks); }
  uint64_t given_records() const { return Sum(&DriveStats::given_records); }
  uint64_t Sum(uint64_t DriveStats::*field) const {
    uint64_t n = 0;
    for (const auto& d : drives) n += d->stats().*field;
    return n;
  }
};

// With the drives' codec given (set_row_codec), a full row's blocks are compressed once,
// by the array — each data position of a segment exactly once — and both drives of a
// RAID10 pair store those records as given. The drives compress only what comes without
// records: RAID5 parity and the array's metadata blocks. Every block reads back, also
// with a drive failed.
TEST(ArrayTest, RowsArePackedOnceForBothCopies) {
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu\n", (unsigned long long)seed);
  for (uint32_t cache : {0u, 32u}) {
    SCOPED_TRACE("write cache " + std::to_string(cache));
    CompressedRig rig(cache);
    rig.array->set_row_codec(CodecConfig{});
    std::mt19937_64 rng(seed);
    std::map<std::pair<uint32_t, uint32_t>, Block> model;  // (segment, position)
    const auto& g = rig.array->geometry();
    for (SegmentScheme scheme : {SegmentScheme::kRaid10, SegmentScheme::kRaid5}) {
      const uint64_t packed0 = rig.array->stats().packed_blocks, given0 = rig.given_records(),
                     compressed0 = rig.compressions();
      SegmentId s = rig.array->AllocateSegment(scheme).value();
      while (rig.array->Remaining(s) > 0) {
        Block b(kBlockSize);
        FillBlockWithCompressibility(b, static_cast<uint32_t>(rng() % 101), rng);
        auto pos = rig.array->Append(s, b, 0, 0);
        ASSERT_TRUE(pos.ok());
        model[{s.value, *pos}] = b;
      }
      ASSERT_TRUE(rig.array->Seal(s).ok());
      ASSERT_TRUE(rig.array->Flush().ok());
      const uint64_t packed = rig.array->stats().packed_blocks - packed0;
      const uint64_t given = rig.given_records() - given0,
                     compressed = rig.compressions() - compressed0;
      // Every data position of the segment's rows (summaries and the padding included).
      EXPECT_EQ(packed, g.segment_positions());
      const uint64_t copies = scheme == SegmentScheme::kRaid10 ? 2 : 1;
      EXPECT_EQ(given, copies * packed) << "every copy stored as the array compressed it";
      const uint64_t parity =
          scheme == SegmentScheme::kRaid5 ? uint64_t{g.rows_per_slot} * g.chunk_blocks : 0;
      EXPECT_GE(compressed, parity);
      EXPECT_LT(compressed, parity + packed / 4) << "beyond the parity, only metadata blocks";
    }
    Block back(kBlockSize);
    const uint32_t failed = static_cast<uint32_t>(rng() % 4);
    ASSERT_TRUE(rig.array->FailDevice(DeviceIndex(failed)).ok());
    for (const auto& [at, data] : model) {
      ASSERT_TRUE(rig.array->Read(SegmentId(at.first), at.second, back).ok()) << at.second;
      ASSERT_EQ(back, data) << "segment " << at.first << " position " << at.second << ", device "
                            << failed << " failed";
    }
  }
}

// A batch given to Append takes the rows the appends fill: nothing reaches the devices
// until the batch is written, the blocks read back from the row buffers meanwhile, and a
// flush on its own writes them (no row waits on a batch that is never written); without a
// batch, Append writes the row itself.
TEST(ArrayTest, RowBatchHoldsFilledRowsUntilWritten) {
  for (SegmentScheme scheme : {SegmentScheme::kRaid5, SegmentScheme::kRaid10}) {
    SCOPED_TRACE(raid_format::SchemeName(scheme));
    Rig rig(4, 4, 8, 4096, 7);  // rows of 12 blocks, 8 of them a segment
    auto device_writes = [&] {
      uint64_t n = 0;
      for (const auto& f : rig.faulty) n += f->stats().writes;
      return n;
    };
    const uint32_t row = rig.array->geometry().row_blocks();
    SegmentId s = rig.array->AllocateSegment(scheme).value();
    ASSERT_TRUE(rig.array->Flush().ok());
    std::vector<std::pair<uint32_t, Block>> blocks;  // position, data
    {
      RowBatch rows(*rig.array);
      const uint64_t before = device_writes();
      for (uint32_t i = 0; i < 2 * row; ++i) {
        Block b = rig.RandomBlock();
        auto pos = rig.array->Append(s, b, i, i, &rows);
        ASSERT_TRUE(pos.ok()) << pos.status().ToString();
        blocks.emplace_back(*pos, std::move(b));
      }
      EXPECT_GE(rows.rows(), 1u);
      EXPECT_EQ(device_writes(), before) << "a batched row was written before the batch";
      Block back(kBlockSize);
      for (const auto& [pos, data] : blocks) {
        ASSERT_TRUE(rig.array->Read(s, pos, back).ok());
        ASSERT_EQ(back, data) << "position " << pos;
      }
      rows.Write();
      EXPECT_EQ(rows.rows(), 0u);
      EXPECT_GT(device_writes(), before);
      // Filled again, and a flush from the array's side writes the rows the batch holds.
      const uint64_t held = device_writes();
      for (uint32_t i = 0; i < row; ++i) {
        Block b = rig.RandomBlock();
        auto pos = rig.array->Append(s, b, i, i, &rows);
        ASSERT_TRUE(pos.ok()) << pos.status().ToString();
        blocks.emplace_back(*pos, std::move(b));
      }
      EXPECT_EQ(device_writes(), held);
      ASSERT_TRUE(rig.array->Flush().ok());
      const uint64_t flushed = device_writes();
      rows.Write();
      EXPECT_EQ(device_writes(), flushed) << "the flush left the batch's rows unwritten";
    }
    const uint64_t unbatched = device_writes();
    for (uint32_t i = 0; i < row; ++i) {
      Block b = rig.RandomBlock();
      auto pos = rig.array->Append(s, b, i, i);
      ASSERT_TRUE(pos.ok()) << pos.status().ToString();
      blocks.emplace_back(*pos, std::move(b));
    }
    EXPECT_GT(device_writes(), unbatched) << "Append without a batch left its row unwritten";
    ASSERT_TRUE(rig.array->Seal(s).ok());
    ASSERT_TRUE(rig.array->Flush().ok());
    Block back(kBlockSize);
    for (const auto& [pos, data] : blocks) {
      ASSERT_TRUE(rig.array->Read(s, pos, back).ok());
      ASSERT_EQ(back, data) << "position " << pos;
    }
  }
}

// The row writer (StartRowWriter), as served: writers append into a RowBatch of their own
// and write it after each append, as the volume does after its lock; the array's thread
// writes the rows. Each writer reads back what it appended at once (from the row
// buffer, a row in flight, or the drives), flushes and seals; afterwards every block
// reads back, with a drive failed too, and after the array is closed and reopened.
TEST(ArrayTest, RowWriterWritesRowsBesideWriters) {
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu\n", (unsigned long long)seed);
  for (SegmentScheme scheme : {SegmentScheme::kRaid5, SegmentScheme::kRaid10}) {
    SCOPED_TRACE(scheme == SegmentScheme::kRaid5 ? "RAID5" : "RAID10");
    CompressedRig rig(0);
    rig.array->set_row_codec(CodecConfig{});
    rig.array->StartRowWriter();
    constexpr int kWriters = 3;
    std::vector<std::map<std::pair<uint32_t, uint32_t>, Block>> models(kWriters);
    std::atomic<uint64_t> bad{0};
    std::vector<std::thread> writers;
    for (int t = 0; t < kWriters; ++t) {
      writers.emplace_back([&, t] {
        std::mt19937_64 r(seed + static_cast<uint64_t>(t));
        Block block(kBlockSize), back(kBlockSize);
        RowBatch rows(*rig.array);
        for (int segments = 0; segments < 6; ++segments) {
          auto s = rig.array->AllocateSegment(scheme);
          if (!s.ok()) {
            ++bad;
            return;
          }
          while (rig.array->Remaining(*s) > 0) {
            FillBlockWithCompressibility(block, static_cast<uint32_t>(r() % 101), r);
            auto pos = rig.array->Append(*s, block, 0, 0, &rows);
            rows.Write();
            if (!pos.ok() || !rig.array->Read(*s, *pos, back).ok() || back != block) {
              ++bad;
              continue;
            }
            models[t][{s->value, *pos}] = block;
            if (r() % 64 == 0 && !rig.array->Flush().ok()) ++bad;
          }
          if (!rig.array->Seal(*s, &rows).ok()) ++bad;
        }
      });
    }
    for (auto& w : writers) w.join();
    ASSERT_EQ(bad.load(), 0u);
    ASSERT_TRUE(rig.array->Flush().ok());
    EXPECT_GT(rig.array->stats().row_writer_rows, 0u) << "the row writer wrote none of the rows";
    auto verify = [&](const std::string& when) {
      Block back(kBlockSize);
      for (const auto& model : models) {
        for (const auto& [at, data] : model) {
          ASSERT_TRUE(rig.array->Read(SegmentId(at.first), at.second, back).ok()) << when;
          ASSERT_EQ(back, data) << when << ": segment " << at.first << " position " << at.second;
        }
      }
    };
    verify("after the writers");
    auto scrub = rig.array->Scrub();
    ASSERT_TRUE(scrub.ok());
    EXPECT_EQ(scrub->crc_mismatches + scrub->parity_mismatches + scrub->mirror_mismatches, 0u);
    rig.array.reset();  // stops the row writer
    rig.array = std::move(ElasticArray::Open(rig.devs)).value();
    verify("reopened");
    const auto failed = static_cast<uint32_t>(seed % 4);
    ASSERT_TRUE(rig.array->FailDevice(DeviceIndex(failed)).ok());
    verify("device " + std::to_string(failed) + " failed");
  }
}

// RAID5 -> RAID10 copies each data block's record from its drive to the mirror's, as a
// drive's copy offload would, without compressing it again; only the zero padding of a
// last partial row is compressed. RAID10 -> RAID5 computes parity, which is compressed.
// Either way the new redundancy is the data's (scrub, and reads with a drive failed).
TEST(ArrayTest, ConversionToRaid10CopiesRecordsWithoutCompressing) {
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu\n", (unsigned long long)seed);
  for (uint32_t cache : {0u, 32u}) {
    SCOPED_TRACE("write cache " + std::to_string(cache));
    CompressedRig rig(cache);
    std::mt19937_64 rng(seed);
    std::map<uint32_t, Block> model;
    SegmentId s = rig.array->AllocateSegment(SegmentScheme::kRaid5).value();
    while (rig.array->Remaining(s) > 0) {
      Block b(kBlockSize);
      FillBlockWithCompressibility(b, 50, rng);
      auto pos = rig.array->Append(s, b, 0, 0);
      ASSERT_TRUE(pos.ok());
      model[*pos] = b;
    }
    ASSERT_TRUE(rig.array->Seal(s).ok());
    ASSERT_TRUE(rig.array->Flush().ok());
    const uint32_t row_blocks = rig.array->geometry().row_blocks();
    uint64_t before = rig.compressions();
    ASSERT_TRUE(rig.array->Convert(s, SegmentScheme::kRaid10).ok());
    const uint64_t to_raid10 = rig.compressions() - before;
    EXPECT_LT(to_raid10, row_blocks) << model.size() << " blocks mirrored";
    before = rig.compressions();
    ASSERT_TRUE(rig.array->Convert(s, SegmentScheme::kRaid5).ok());
    EXPECT_GE(rig.compressions() - before, model.size() / (row_blocks / 4))
        << "parity is compressed";
    ASSERT_TRUE(rig.array->Convert(s, SegmentScheme::kRaid10).ok());
    auto scrub = rig.array->Scrub();
    ASSERT_TRUE(scrub.ok());
    EXPECT_EQ(scrub->crc_mismatches + scrub->mirror_mismatches + scrub->unrepairable, 0u)
        << (scrub->findings.empty() ? std::string() : scrub->findings[0]);
    Block back(kBlockSize);
    ASSERT_TRUE(rig.array->FailDevice(DeviceIndex(1)).ok());
    for (const auto& [pos, data] : model) {
      ASSERT_TRUE(rig.array->Read(s, pos, back).ok()) << pos;
      ASSERT_EQ(back, data) << "position " << pos << " with device 1 failed";
    }
  }
}

// A loop of conversions with no user flush between them journals a flip per conversion:
// the flushes the conversions make themselves must make the ring's checkpoints durable,
// or the ring fills and each further record waits for a flush and a checkpoint under the
// exclusive lock, stalling every writer. Every block still reads back after a reopen.
TEST(ArrayTest, ConversionLoopDoesNotFillTheJournalRing) {
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu\n", (unsigned long long)seed);
  Rig rig(4, 4, 2, 4096, seed);
  std::vector<SegmentId> sealed;
  for (int i = 0; i < 3; ++i) {
    SegmentId s = rig.array->AllocateSegment(SegmentScheme::kRaid5).value();
    rig.Fill(s, 1 << 20, false);
    ASSERT_TRUE(rig.array->Seal(s).ok());
    sealed.push_back(s);
  }
  ASSERT_TRUE(rig.array->Flush().ok());
  const uint64_t stalls = rig.array->stats().journal_ring_stalls;
  for (uint32_t round = 0; round < 3 * raid_format::kJournalBlocks; ++round) {
    const SegmentId s = sealed[round % sealed.size()];
    const SegmentScheme to =
        (round / sealed.size()) % 2 == 0 ? SegmentScheme::kRaid10 : SegmentScheme::kRaid5;
    ASSERT_TRUE(rig.array->Convert(s, to).ok()) << "round " << round;
  }
  EXPECT_EQ(rig.array->stats().journal_ring_stalls, stalls)
      << 3 * raid_format::kJournalBlocks << " conversions";
  rig.Reopen();
  rig.VerifyAll("after the conversion loop and a reopen");
}

// Conversions run beside user reads and writes (a block or a chunk at a time under the
// array lock shared): while one thread converts sealed segments back and forth, another
// reads them and a third appends to open segments and flushes; every read returns the
// model's bytes. The rows go down packed (set_row_codec), so the drives' caches hold
// records shared between threads. (Run under TSan in the sanitizer suite.)
TEST(ArrayTest, ConversionsRunBesideReadsAndWrites) {
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu\n", (unsigned long long)seed);
  CompressedRig rig(32);
  rig.array->set_row_codec(CodecConfig{});  // rows handed down as records, as served
  std::mt19937_64 rng(seed);
  std::vector<std::pair<uint32_t, Block>> sealed;  // (position, data) of segment 0 and 1
  std::vector<SegmentId> segs;
  for (int i = 0; i < 2; ++i) {
    segs.push_back(rig.array->AllocateSegment(SegmentScheme::kRaid5).value());
    for (int b = 0; b < 150 && rig.array->Remaining(segs.back()) > 0; ++b) {
      Block block(kBlockSize);
      FillBlockWithCompressibility(block, 50, rng);
      auto pos = rig.array->Append(segs.back(), block, 0, 0);
      ASSERT_TRUE(pos.ok());
      if (i == 0) sealed.emplace_back(*pos, block);
    }
    ASSERT_TRUE(rig.array->Seal(segs.back()).ok());
  }
  ASSERT_TRUE(rig.array->Flush().ok());
  std::atomic<bool> done{false};
  std::atomic<uint64_t> reads{0}, bad{0};
  std::thread reader([&] {
    std::mt19937_64 r(seed + 1);
    Block back(kBlockSize);
    while (!done.load()) {
      const auto& [pos, data] = sealed[r() % sealed.size()];
      if (!rig.array->Read(segs[0], pos, back).ok() || back != data) ++bad;
      ++reads;
    }
  });
  std::thread writer([&] {
    std::mt19937_64 r(seed + 2);
    Block block(kBlockSize);
    while (!done.load()) {
      auto open = rig.array->AllocateSegment(SegmentScheme::kRaid5);
      if (!open.ok()) break;
      for (int b = 0; b < 40 && rig.array->Remaining(*open) > 0; ++b) {
        FillBlockWithCompressibility(block, 50, r);
        auto pos = rig.array->Append(*open, block, 0, 0);
        Block back(kBlockSize);
        if (!pos.ok() || !rig.array->Read(*open, *pos, back).ok() || back != block) ++bad;
      }
      if (!rig.array->Flush().ok() || !rig.array->Seal(*open).ok() || !rig.array->Free(*open).ok())
        ++bad;
    }
  });
  for (int round = 0; round < 6; ++round) {
    for (SegmentId s : segs) {
      const SegmentScheme to = round % 2 ? SegmentScheme::kRaid5 : SegmentScheme::kRaid10;
      Status st = rig.array->Convert(s, to);
      EXPECT_TRUE(st.ok()) << st.ToString();
    }
  }
  done = true;
  reader.join();
  writer.join();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_GT(reads.load(), 0u);
  auto scrub = rig.array->Scrub();
  ASSERT_TRUE(scrub.ok());
  EXPECT_EQ(scrub->crc_mismatches + scrub->parity_mismatches + scrub->mirror_mismatches, 0u);
}

TEST(ArrayTest, BadInputAndForeignDevices) {
  Rig rig(4, 4, 2, 4096, 1);
  Block b(kBlockSize);
  EXPECT_EQ(rig.array->Append(SegmentId(0), b, 0, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(rig.array->Read(SegmentId(0), 0, b).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(rig.array->AllocateSegment(SegmentScheme::kFree).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(rig.array->FailDevice(DeviceIndex(9)).code(), StatusCode::kInvalidArgument);
  // Devices in the wrong order, too few, or from another array.
  rig.array.reset();
  std::vector<Backend*> swapped = rig.devs;
  std::swap(swapped[0], swapped[1]);
  EXPECT_EQ(ElasticArray::Open(swapped).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ElasticArray::Open({rig.devs[0], rig.devs[1], rig.devs[2]}).status().code(),
            StatusCode::kInvalidArgument);
  Rig other(4, 4, 2, 4096, 2);
  std::vector<Backend*> mixed = rig.devs;
  mixed[2] = other.devs[2];
  auto r = ElasticArray::Open(mixed);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("another array"), std::string::npos) << r.status().ToString();
  FaultyDevices blank(4);
  EXPECT_EQ(ElasticArray::Open(blank.devs).status().code(), StatusCode::kCorruption);
}

// Re-add after an outage: a device loses power with writes in its cache (a random part
// of them reaches its media), misses what the array does meanwhile — a segment written,
// one freed, one converted — and comes back. Only what it may lack is rebuilt; afterwards
// scrub finds nothing, every block reads back, and so it does with another device lost,
// so the re-added one really holds its share. Then the refusals: a healthy device, a
// drive of another array or in another place, an image older than the last rebuild, and a
// device that was failed when the array was opened.
TEST(ArrayTest, ReAddAfterAnOutageRebuildsOnlyWhatChanged) {
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu (ERAID_SEED replays)\n", (unsigned long long)seed);
  for (auto scheme : {SegmentScheme::kRaid5, SegmentScheme::kRaid10}) {
    SCOPED_TRACE(raid_format::SchemeName(scheme));
    Rig rig(4, 4, 2, 8192, seed);
    const uint32_t per_segment = static_cast<uint32_t>(rig.array->geometry().segment_positions());
    std::vector<SegmentId> segs;
    for (int i = 0; i < 12; ++i) {
      segs.push_back(rig.array->AllocateSegment(scheme).value());
      rig.Fill(segs.back(), per_segment, /*flush_sometimes=*/false);
      ASSERT_TRUE(rig.array->Seal(segs.back()).ok());
    }
    ASSERT_TRUE(rig.array->Flush().ok());
    // Writes the device takes into its cache and loses: a half-filled open segment.
    SegmentId open = rig.array->AllocateSegment(scheme).value();
    rig.Fill(open, per_segment / 2, /*flush_sometimes=*/false);
    const uint32_t f = 2;
    rig.faulty[f]->Crash(seed);  // refuses I/O until Restart(): the array fails it
    rig.Fill(open, per_segment / 4, false);
    ASSERT_TRUE(rig.array->Flush().ok());
    EXPECT_EQ(rig.array->stats().devices[f].state, DeviceState::kFailed);
    // While it is away: a new segment, a free, a conversion.
    SegmentId fresh = rig.array->AllocateSegment(scheme).value();
    rig.Fill(fresh, per_segment, false);
    ASSERT_TRUE(rig.array->Seal(fresh).ok());
    ASSERT_TRUE(rig.array->Free(segs[3]).ok());
    for (auto it = rig.model.begin(); it != rig.model.end();) {
      it = it->first.first == segs[3].value ? rig.model.erase(it) : std::next(it);
    }
    const SegmentScheme other =
        scheme == SegmentScheme::kRaid5 ? SegmentScheme::kRaid10 : SegmentScheme::kRaid5;
    ASSERT_TRUE(rig.array->Convert(segs[5], other).ok());
    ASSERT_TRUE(rig.array->Flush().ok());
    rig.VerifyAll("degraded");

    EXPECT_EQ(rig.array->ReAdd(DeviceIndex(0), rig.devs[0]).status().code(),
              StatusCode::kInvalidArgument)
        << "healthy";
    EXPECT_EQ(rig.array->ReAdd(DeviceIndex(f), rig.devs[1]).status().code(),
              StatusCode::kInvalidArgument)
        << "another place";
    Rig stranger(4, 4, 2, 8192, seed + 1);
    EXPECT_EQ(rig.array->ReAdd(DeviceIndex(f), stranger.devs[f]).status().code(),
              StatusCode::kInvalidArgument)
        << "another array";
    rig.faulty[f]->Restart();  // the host is back
    uint32_t reports = 0;
    auto r = rig.array->ReAdd(DeviceIndex(f), rig.devs[f], 0,
                              [&](const RebuildProgress&) { ++reports; });
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_FALSE(rig.array->stats().degraded);
    // Owed: the open segment, the new one, the freed one, the converted one (and any
    // segment a metadata flush touched): far from all 15 in use.
    EXPECT_GE(r->segments_resynced, 3u);
    EXPECT_LE(r->segments_resynced, 6u);
    EXPECT_EQ(r->segments_total,
              13u);  // in use: 11 sealed (one converted), the open one, the new one
    EXPECT_LT(r->resynced_bytes, r->total_bytes / 2);
    EXPECT_GT(reports, 0u);
    std::printf("%s: re-add resynced %llu of %llu bytes (%u of %u segments)\n",
                raid_format::SchemeName(scheme), (unsigned long long)r->resynced_bytes,
                (unsigned long long)r->total_bytes, r->segments_resynced, r->segments_total);
    auto scrub = rig.array->Scrub();
    ASSERT_TRUE(scrub.ok());
    EXPECT_EQ(scrub->crc_mismatches + scrub->parity_mismatches + scrub->mirror_mismatches, 0u);
    rig.VerifyAll("re-added");
    rig.Fill(open, per_segment, false);
    ASSERT_TRUE(rig.array->Flush().ok());
    ASSERT_TRUE(rig.array->FailDevice(DeviceIndex((f + 1) % 4)).ok());
    rig.VerifyAll("re-added, another device failed");

    // An image older than the drive that last joined in its place: device 1 is replaced,
    // fails again, and the pre-replacement drive is offered.
    MemBackend spare(8192);
    ASSERT_TRUE(rig.array->Replace(DeviceIndex((f + 1) % 4), &spare).ok());
    ASSERT_TRUE(rig.array->FailDevice(DeviceIndex((f + 1) % 4)).ok());
    auto old = rig.array->ReAdd(DeviceIndex((f + 1) % 4), rig.devs[(f + 1) % 4]);
    EXPECT_EQ(old.status().code(), StatusCode::kInvalidArgument) << old.status().ToString();
    EXPECT_NE(old.status().message().find("generation"), std::string::npos)
        << old.status().ToString();
    ASSERT_TRUE(rig.array->ReAdd(DeviceIndex((f + 1) % 4), &spare).ok());
    rig.devs[(f + 1) % 4] = &spare;

    // Failed when the array opens: what it lacks is unknown, only replace brings it back.
    ASSERT_TRUE(rig.array->FailDevice(DeviceIndex(0)).ok());
    rig.Reopen();
    auto unknown = rig.array->ReAdd(DeviceIndex(0), rig.devs[0]);
    EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(unknown.status().message().find("replace"), std::string::npos)
        << unknown.status().ToString();
    rig.VerifyAll("reopened degraded");
  }
}

}  // namespace
}  // namespace eraid
