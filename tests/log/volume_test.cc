// The live volume against a model: random multi-block writes, trims and flushes with GC
// running, for each placement; power cuts at random device operations (all devices at
// once), after which the volume is reopened from the array's segments alone and every
// flushed block must read back; and a device failed under load.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cstring>
#include <map>
#include <random>
#include <thread>

#include "common/crc32c.h"
#include "common/data_gen.h"
#include "compress/compressed_drive.h"
#include "compress/faulty_backend.h"
#include "compress/mem_backend.h"
#include "log/log_volume.h"
#include "tests/support/seed.h"
#include "tests/support/volume_rig.h"

namespace eraid {
namespace {

class VolumeTest : public ::testing::TestWithParam<std::string> {};

TEST_P(VolumeTest, ModelWithGcAndReopen) {
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu placement=%s\n", (unsigned long long)seed, GetParam().c_str());
  std::mt19937_64 rng(seed);
  Rig rig(GetParam());
  const uint64_t cap = rig.volume->capacity_blocks();
  ASSERT_GT(cap, 1000u);
  Model model;
  Block buf(BlocksToBytes(8)), back(kBlockSize);
  // Skewed: most writes go to the first tenth of the volume.
  auto pick = [&] { return rng() % 4 ? rng() % (cap / 10) : rng() % cap; };
  for (int op = 0; op < 6000; ++op) {
    uint64_t lba = pick();
    uint64_t r = rng() % 100;
    if (r < 80) {
      uint64_t n = std::min<uint64_t>(1 + rng() % 8, cap - lba);
      for (uint64_t i = 0; i < n; ++i) {
        FillBlockWithCompressibility(std::span(buf).subspan(BlocksToBytes(i), kBlockSize), 50, rng);
        model.Wrote(lba + i,
                    Block(buf.begin() + BlocksToBytes(i), buf.begin() + BlocksToBytes(i + 1)));
      }
      Status ws = rig.volume->Write(lba, std::span(buf).first(BlocksToBytes(n)));
      ASSERT_TRUE(ws.ok()) << ws.ToString() << " after " << op << " ops";
    } else if (r < 85) {
      uint64_t n = std::min<uint64_t>(1 + rng() % 16, cap - lba);
      ASSERT_TRUE(rig.volume->Trim(lba, n).ok());
      for (uint64_t i = 0; i < n; ++i) model.Wrote(lba + i, Block(kBlockSize));
    } else if (r < 88) {
      ASSERT_TRUE(rig.volume->Flush().ok());
      model.Flushed();
    } else {
      ASSERT_TRUE(rig.volume->Read(lba, back).ok());
      ASSERT_EQ(back, model.Latest(lba)) << "lba " << lba;
    }
  }
  VolumeStats st = rig.volume->stats();
  std::printf("user %llu gc %llu WA %.3f\n", (unsigned long long)st.engine.user_blocks,
              (unsigned long long)st.engine.gc_blocks, st.engine.wa());
  EXPECT_GT(st.engine.segments_collected, 10u) << "GC must run";
  for (uint64_t lba = 0; lba < cap; ++lba) {
    ASSERT_TRUE(rig.volume->Read(lba, back).ok());
    ASSERT_EQ(back, model.Latest(lba)) << "lba " << lba;
  }
  // Clean restart: everything flushed is there, from the segments alone.
  ASSERT_TRUE(rig.volume->Flush().ok());
  model.Flushed();
  rig.PowerCutAndReopen(seed);
  for (uint64_t lba = 0; lba < cap; ++lba) {
    ASSERT_TRUE(rig.volume->Read(lba, back).ok());
    ASSERT_EQ(back, model.Latest(lba)) << "after reopen, lba " << lba;
  }
}

INSTANTIATE_TEST_SUITE_P(Placements, VolumeTest,
                         ::testing::Values("sepbit", "nosep", "sepgc", "dac", "hybrid"));

TEST(VolumeCrashTest, PowerCutsKeepFlushedBlocksAcrossGc) {
  const std::vector<uint64_t> seeds = TestSeeds("ERAID_VOLUME_CRASH_SEEDS", 6);
  for (const uint64_t seed : seeds) {
    std::printf("seed=%llu\n", (unsigned long long)seed);
    SCOPED_TRACE("seed=" + std::to_string(seed));
    std::mt19937_64 rng(seed);
    // GC victims freed one per flush of their copies, or several (as on a large array).
    Rig rig("sepbit", 4, GcTrigger::kFreeSpace, 4096, 4, 4,
            /*gc_frees_per_flush=*/1 + seed % 3);  // (of the seed: a replay runs the same)
    const uint64_t cap = rig.volume->capacity_blocks();
    Model model;
    Block buf(BlocksToBytes(4)), back(kBlockSize);
    for (int cut = 0; cut < 3; ++cut) {
      rig.power.CrashAfterOps(200 + rng() % 4000, rng());
      for (int op = 0; op < 3000 && !rig.power.cut(); ++op) {
        uint64_t lba = rng() % 3 ? rng() % (cap / 8) : rng() % cap;
        if (rng() % 10 == 0) {
          if (rig.volume->Flush().ok()) model.Flushed();
          continue;
        }
        uint64_t n = std::min<uint64_t>(1 + rng() % 4, cap - lba);
        if (rng() % 12 == 0) {  // trims, short and long, ordered with the writes around them
          n = std::min<uint64_t>(rng() % 2 ? n : 1 + rng() % 300, cap - lba);
          for (uint64_t i = 0; i < n; ++i) model.Wrote(lba + i, Block(kBlockSize));
          if (!rig.volume->Trim(lba, n).ok()) break;
          continue;
        }
        for (uint64_t i = 0; i < n; ++i) {
          FillBlockWithCompressibility(std::span(buf).subspan(BlocksToBytes(i), kBlockSize), 60,
                                       rng);
          model.Wrote(lba + i,
                      Block(buf.begin() + BlocksToBytes(i), buf.begin() + BlocksToBytes(i + 1)));
        }
        if (!rig.volume->Write(lba, std::span(buf).first(BlocksToBytes(n))).ok()) break;
      }
      rig.PowerCutAndReopen(rng());
      if (HasFatalFailure()) return;
      for (uint64_t lba = 0; lba < cap; ++lba) {
        Status s = rig.volume->Read(lba, back);
        ASSERT_TRUE(s.ok()) << "lba " << lba << ": " << s.ToString();
        ASSERT_TRUE(model.Allowed(lba, back))
            << "lba " << lba << " holds a value it never had since its last flush";
        model.Settle(lba, back);
      }
    }
  }
}

// Flushes from many threads at once share rounds of device flushes (group commit), and
// each still makes its own thread's writes durable: after a power cut, every block whose
// flush returned reads back.
TEST(VolumeTest, ConcurrentFlushesShareRoundsAndEachIsDurable) {
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu\n", (unsigned long long)seed);
  Rig rig("sepbit");
  for (auto& d : rig.faulty) d->SetLatency(2'000'000);  // 2 ms a device operation: rounds overlap
  constexpr int kThreads = 8, kBursts = 6;
  std::barrier sync(kThreads);
  std::vector<Block> last(kThreads);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(seed + t);
      Block b(kBlockSize);
      for (int burst = 0; burst < kBursts; ++burst) {
        FillBlockWithCompressibility(b, 50, rng);
        if (!rig.volume->Write(uint64_t(t), b).ok()) ++failures;
        sync.arrive_and_wait();  // every thread flushes at once
        if (rig.volume->Flush().ok()) {
          last[t] = b;
        } else {
          ++failures;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_EQ(failures.load(), 0);
  const VolumeStats st = rig.volume->stats();
  EXPECT_EQ(st.flush_requests, uint64_t{kThreads * kBursts});
  EXPECT_LT(st.flush_rounds, st.flush_requests) << "no flush shared a round";
  std::printf("%llu flushes answered by %llu rounds\n", (unsigned long long)st.flush_requests,
              (unsigned long long)st.flush_rounds);
  for (auto& d : rig.faulty) d->ClearFaults();
  rig.PowerCutAndReopen(seed);
  if (HasFatalFailure()) return;
  Block back(kBlockSize);
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_TRUE(rig.volume->Read(uint64_t(t), back).ok());
    EXPECT_EQ(back, last[t]) << "thread " << t << "'s flushed block";
  }
}

// Random 50%-compressible overwrites of the whole volume, `times` times over.
void OverwriteAll(Rig& rig, std::mt19937_64& rng, uint64_t times) {
  const uint64_t cap = rig.volume->capacity_blocks();
  Block b(kBlockSize);
  for (uint64_t i = 0; i < times * cap; ++i) {
    FillBlockWithCompressibility(b, 50, rng);
    ASSERT_TRUE(rig.volume->Write(rng() % cap, b).ok()) << "write " << i;
  }
}

// The freed but untrimmed segments once the volume's flusher has had its chance (its
// follow-up round runs in the background): polled up to a generous bound.
uint32_t UntrimmedAfterWaiting(Rig& rig) {
  uint32_t untrimmed = rig.array->stats().untrimmed_free_segments;
  for (int ms = 0; untrimmed > 0 && ms < 10'000; ms += 5) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    untrimmed = rig.array->stats().untrimmed_free_segments;
  }
  return untrimmed;
}

// A freed segment's space is trimmed after the flush that makes its free durable. GC's
// victims are freed after a flush (a user's, or the volume's flusher's); without a flush
// after that, the drives kept the victims' blocks for as long as nobody flushed — through
// a read-only phase, the scheduler then saw its budget taken by data nobody holds, and
// mirrored less (E2eHotTest failed so in CI). When no other round follows a round that
// freed victims within 100 ms, the flusher runs one.
TEST(VolumeTest, GcVictimsSpaceIsTrimmedWithoutAnotherUserFlush) {
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu\n", (unsigned long long)seed);
  // Victims wait for a flush (none is due by count): the user flush below frees them.
  Rig rig("sepbit", 4, GcTrigger::kFreeSpace, 4096, 4, 4, /*gc_frees_per_flush=*/1000);
  std::mt19937_64 rng(seed);
  OverwriteAll(rig, rng, 3);
  if (HasFatalFailure()) return;
  const uint64_t collected = rig.volume->stats().engine.segments_collected;
  ASSERT_GT(collected, 0u) << "the overwrites must make GC run";
  ASSERT_TRUE(rig.volume->Flush().ok());
  const uint32_t at_flush = rig.array->stats().untrimmed_free_segments;
  const uint32_t untrimmed = UntrimmedAfterWaiting(rig);
  std::printf(
      "%llu segments collected; %u freed but untrimmed after the user flush, %u at the end\n",
      (unsigned long long)collected, at_flush, untrimmed);
  EXPECT_EQ(untrimmed, 0u) << "freed segments' space is given back without another user flush";
}

// The same for victims a write frees itself: short of free segments, a write flushes and
// frees the collected victims on its own (no round of the volume's), and if writes then
// stop — a read-only phase — nothing else would flush (E2eHotTest saw one segment stay
// untrimmed in CI after the previous test's fix). No user flush at all here.
TEST(VolumeTest, VictimsAWriteFreesItselfAreTrimmedWithoutAFlush) {
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu\n", (unsigned long long)seed);
  Rig rig("sepbit", 4, GcTrigger::kFreeSpace, 4096, 4, 4, /*gc_frees_per_flush=*/1000);
  // Physical space over budget once, as the scheduler reports it near its budget: the
  // write that hears it frees the victims collected so far itself (FreeCollected).
  struct Pressure : VolumeListener {
    bool fire = false;
    void OnSegmentRead(SegmentId) override {}
    void OnBlockInvalidated(SegmentId) override {}
    SegmentScheme SchemeForNewSegment() override { return SegmentScheme::kRaid5; }
    bool SpacePressure() override { return std::exchange(fire, false); }
  } pressure;
  rig.volume->SetListener(&pressure);
  std::mt19937_64 rng(seed);
  // Overwrites until GC has collected victims that wait for a flush to be freed.
  OverwriteAll(rig, rng, 3);
  if (HasFatalFailure()) return;
  Block b(kBlockSize);
  ASSERT_GT(rig.volume->stats().engine.segments_collected, 0u) << "the overwrites must make GC run";
  const uint32_t before = rig.array->stats().untrimmed_free_segments;
  // The next write that asks about space frees them, and then nothing writes or flushes.
  // A write asks only once the log is not short of segments: one that is runs a GC step
  // and returns (LogEngine::Write), so it may take a few writes (seed 4210189260 under
  // ASan: the first did not ask).
  pressure.fire = true;
  int writes = 0;
  for (; pressure.fire && writes < 256; ++writes) {
    FillBlockWithCompressibility(b, 50, rng);
    ASSERT_TRUE(rig.volume->Write(0, b).ok());
  }
  ASSERT_FALSE(pressure.fire) << "no write asked about space in " << writes;
  const uint32_t freed = rig.array->stats().untrimmed_free_segments;
  ASSERT_GT(freed, before) << "the last write must have freed victims itself";
  ASSERT_EQ(rig.volume->stats().flush_requests, 0u) << "no flush was asked for";
  const uint32_t untrimmed = UntrimmedAfterWaiting(rig);
  std::printf(
      "write %d of the last freed %u segments (untrimmed %u before); %u untrimmed at the end\n",
      writes, freed - before, before, untrimmed);
  EXPECT_EQ(untrimmed, 0u) << "freed segments' space is given back though nobody flushes";
  rig.volume->SetListener(nullptr);
}

TEST(VolumeTest, DeviceFailsUnderLoad) {
  Rig rig("sepbit", 5);
  const uint64_t cap = rig.volume->capacity_blocks();
  std::mt19937_64 rng(3);
  Model model;
  Block b(kBlockSize), back(kBlockSize);
  for (int i = 0; i < 8000; ++i) {
    if (i == 3000) rig.faulty[2]->FailStop();
    uint64_t lba = rng() % (cap / 4);
    FillBlockWithCompressibility(b, 50, rng);
    ASSERT_TRUE(rig.volume->Write(lba, b).ok()) << "writes go on degraded";
    model.Wrote(lba, b);
  }
  EXPECT_TRUE(rig.array->stats().degraded);
  for (uint64_t lba = 0; lba < cap / 4; ++lba) {
    ASSERT_TRUE(rig.volume->Read(lba, back).ok());
    ASSERT_EQ(back, model.Latest(lba));
  }
  EXPECT_GT(rig.volume->stats().engine.segments_collected, 0u);
}

// The live volume collects only when free segments run low: rewriting a working set of a
// tenth of the capacity many times over copies nothing, while the paper's GP trigger
// starts copying as soon as garbage passes 15%. Filling the whole capacity over and over
// makes the free-space trigger collect too, and no write fails for space.
TEST(VolumeTest, FreeSpaceTriggerUsesFreeSpaceFirst) {
  for (GcTrigger when : {GcTrigger::kFreeSpace, GcTrigger::kGarbageProportion}) {
    Rig rig("sepbit", 4, when);
    const uint64_t cap = rig.volume->capacity_blocks();
    std::mt19937_64 rng(11);
    Block b(kBlockSize);
    for (uint64_t i = 0; i < cap / 2; ++i) {
      FillBlockWithCompressibility(b, 50, rng);
      ASSERT_TRUE(rig.volume->Write(rng() % (cap / 10), b).ok());
    }
    const EngineStats st = rig.volume->stats().engine;
    if (when == GcTrigger::kFreeSpace) {
      EXPECT_EQ(st.gc_blocks, 0u) << "free space is used before anything is copied";
      for (uint64_t i = 0; i < 3 * cap; ++i) {
        FillBlockWithCompressibility(b, 50, rng);
        ASSERT_TRUE(rig.volume->Write(rng() % cap, b).ok()) << "write " << i << " of 3x capacity";
      }
      EXPECT_GT(rig.volume->stats().engine.segments_collected, 0u);
    } else {
      EXPECT_GT(st.gc_blocks, 0u) << "the GP trigger copies as soon as garbage passes 15%";
    }
  }
}

// Everything the served volume does at once (what TSan runs): writers, readers, flushes,
// conversions both ways, scrubs and stats, over compressing drives with write caches.
// Every block carries its LBA and a CRC of its payload, so a reader can tell a torn or
// misplaced block from a current one without knowing which write won.
TEST(VolumeTest, ConcurrentReadsWritesConversionsAndScrubs) {
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu\n", (unsigned long long)seed);
  DriveOptions dopt;
  dopt.erase_unit_blocks = 16;
  dopt.write_cache_blocks = 64;
  CompressedDrives drives(4, 8192, dopt);
  auto array = MakeArray(drives.devs);
  ASSERT_NE(array, nullptr);
  auto volume = std::move(LogVolume::Create(*array, VolumeOptions{})).value();
  const uint64_t cap = volume->capacity_blocks();
  auto make = [](uint64_t lba, uint64_t salt, Block* b) {
    std::mt19937_64 rng(lba * 1000003 + salt);
    FillBlockWithCompressibility(*b, 50, rng);
    std::memcpy(b->data(), &lba, 8);
    const uint32_t crc = Crc32c(b->data() + 16, kBlockSize - 16);
    std::memcpy(b->data() + 8, &crc, 4);
  };
  auto check = [](uint64_t lba, const Block& b) {
    if (std::all_of(b.begin(), b.end(), [](std::byte x) { return x == std::byte{0}; })) return true;
    uint64_t got = 0;
    uint32_t crc = 0;
    std::memcpy(&got, b.data(), 8);
    std::memcpy(&crc, b.data() + 8, 4);
    return got == lba && crc == Crc32c(b.data() + 16, kBlockSize - 16);
  };
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> writes{0}, reads{0}, bad{0}, conversions{0}, scrubs{0};
  std::vector<std::thread> threads;
  // The writers go on past their 3000 writes until the readers have read 2000 blocks and a
  // conversion has happened, so all of it overlaps however the threads are scheduled (a
  // loaded CI machine once let the writers finish after 577 reads). The bound only keeps a
  // broken volume from looping forever; the expectations below then fail.
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937_64 rng(seed + w);
      Block b(kBlockSize);
      for (int i = 0; i < 3000 || ((reads < 2000 || conversions == 0) && i < 300000); ++i) {
        const uint64_t lba = rng() % cap;
        make(lba, rng(), &b);
        if (!volume->Write(lba, b).ok()) ++bad;
        if (i % 500 == 0 && !volume->Flush().ok()) ++bad;
        ++writes;
      }
    });
  }
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      std::mt19937_64 rng(seed + 100 + r);
      Block b(kBlockSize);
      while (!stop) {
        const uint64_t lba = rng() % cap;
        if (!volume->Read(lba, b).ok() || !check(lba, b)) ++bad;
        if (++reads % 64 == 0) std::this_thread::yield();
      }
    });
  }
  threads.emplace_back([&] {
    uint64_t last = 0;
    while (!stop) {
      // A pass per 300 writes: conversions and scrubs keep pace with the writers.
      if (writes < last + 300) {
        std::this_thread::yield();
        continue;
      }
      last = writes;
      const SegmentScheme to = conversions % 2 ? SegmentScheme::kRaid5 : SegmentScheme::kRaid10;
      for (uint32_t s = 0; s < array->geometry().segments && !stop; ++s) {
        if (array->segment_info(SegmentId(s)).sealed && array->Convert(SegmentId(s), to).ok())
          ++conversions;
      }
      auto rep = array->Scrub();
      if (!rep.ok() || rep->unrepairable > 0) ++bad;
      ++scrubs;
      (void)volume->stats();
      (void)array->stats();
    }
  });
  threads[0].join();
  threads[1].join();
  stop = true;
  for (size_t i = 2; i < threads.size(); ++i) threads[i].join();
  std::printf("writes=%llu reads=%llu conversions=%llu scrubs=%llu\n",
              (unsigned long long)writes.load(), (unsigned long long)reads.load(),
              (unsigned long long)conversions.load(), (unsigned long long)scrubs.load());
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_GT(conversions.load(), 0u);
  EXPECT_GE(reads.load(), 2000u);
  for (uint64_t lba = 0; lba < cap; ++lba) {
    Block b(kBlockSize);
    ASSERT_TRUE(volume->Read(lba, b).ok());
    ASSERT_TRUE(check(lba, b)) << "lba " << lba;
  }
}

// A trim unmaps: the volume's valid blocks fall at once, the trimmed range reads as zeros
// before and after a restart, and GC gives the room back — the segments in use fall
// (writing zeros instead, as before, left the volume full and GC copying zeros).
TEST(VolumeTest, TrimFreesSpaceAndSurvivesRestart) {
  Rig rig("sepbit");
  const uint64_t cap = rig.volume->capacity_blocks();
  std::mt19937_64 rng(5);
  Block b(BlocksToBytes(64)), back(kBlockSize);
  for (uint64_t lba = 0; lba < cap; lba += 64) {
    const uint64_t n = std::min<uint64_t>(64, cap - lba);
    for (uint64_t i = 0; i < n; ++i)
      FillBlockWithCompressibility(std::span(b).subspan(BlocksToBytes(i), kBlockSize), 50, rng);
    ASSERT_TRUE(rig.volume->Write(lba, std::span(b).first(BlocksToBytes(n))).ok());
  }
  const uint64_t full = rig.volume->stats().engine.valid_blocks;
  ASSERT_TRUE(rig.volume->Trim(0, cap - cap / 10).ok());  // all but the last tenth
  const VolumeStats st = rig.volume->stats();
  EXPECT_LT(st.engine.valid_blocks, full / 5);
  EXPECT_GT(st.engine.trim_records, 0u);
  EXPECT_LE(st.engine.trim_records, cap / LogEngine::kMaxTrimRecordBlocks + 2)
      << "one record per range";
  EXPECT_EQ(rig.volume->Locate(7), std::nullopt);
  ASSERT_TRUE(rig.volume->Read(7, back).ok());
  EXPECT_EQ(back, Block(kBlockSize));
  const auto runs = rig.volume->Allocation(0, cap);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_FALSE(runs[0].written);
  EXPECT_EQ(runs[0].blocks, cap - cap / 10);
  EXPECT_TRUE(runs[1].written);
  // Writes to the last tenth make GC run: it reclaims the trimmed segments.
  for (int i = 0; i < 20000; ++i) {
    FillBlockWithCompressibility(std::span(b).first(kBlockSize), 50, rng);
    ASSERT_TRUE(
        rig.volume->Write(cap - 1 - rng() % (cap / 10), std::span(b).first(kBlockSize)).ok());
  }
  ASSERT_TRUE(rig.volume->Flush().ok());
  const EngineStats after = rig.volume->stats().engine;
  std::printf(
      "GC: %llu segments collected, %llu blocks copied for 20000 written; trim records %llu "
      "written, "
      "%llu rewritten, %llu live\n",
      (unsigned long long)(after.segments_collected - st.engine.segments_collected),
      (unsigned long long)(after.gc_blocks - st.engine.gc_blocks),
      (unsigned long long)after.trim_records, (unsigned long long)after.gc_trim_records,
      (unsigned long long)after.live_trim_records);
  EXPECT_GT(after.segments_collected - st.engine.segments_collected, 20u)
      << "the rewrites must make GC run";
  EXPECT_LT(after.gc_blocks - st.engine.gc_blocks, 20000u / 10)
      << "trimmed blocks are garbage, not copied";
  rig.PowerCutAndReopen(9);
  if (HasFatalFailure()) return;
  for (uint64_t lba = 0; lba < cap - cap / 10; lba += 97) {
    ASSERT_TRUE(rig.volume->Read(lba, back).ok());
    ASSERT_EQ(back, Block(kBlockSize)) << "trimmed lba " << lba << " after restart";
  }
  EXPECT_LT(rig.volume->stats().engine.valid_blocks, full / 5);
}

TEST(VolumeTest, BadRequests) {
  Rig rig("sepbit");
  Block b(kBlockSize);
  const uint64_t cap = rig.volume->capacity_blocks();
  EXPECT_EQ(rig.volume->Write(cap, b).code(), StatusCode::kInvalidArgument);
  Block two(2 * kBlockSize);
  EXPECT_EQ(rig.volume->Read(cap - 1, two).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(rig.volume->Write(0, Block(100)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(rig.volume->Trim(0, 0).code(), StatusCode::kInvalidArgument);
  VolumeOptions fk;
  fk.placement = "fk";
  EXPECT_EQ(LogVolume::Create(*rig.array, fk).status().code(), StatusCode::kInvalidArgument);
  fk.placement = "oracle";
  EXPECT_EQ(LogVolume::Create(*rig.array, fk).status().code(), StatusCode::kInvalidArgument)
      << "the future: replay only";
  EXPECT_EQ(LogVolume::Create(*rig.array, rig.options).status().code(),
            StatusCode::kInvalidArgument)
      << "an array with data is opened, not created over";
}

}  // namespace
}  // namespace eraid

namespace eraid {
namespace {

// Every restart seals the segments that were open, part-filled. Many restarts in a row,
// a few hundred writes each, over three quarters of the capacity: GC must compact those
// segments, and no write may fail for space (the served array met exactly this).
TEST(VolumeTest, ManyRestartsNeverRunOutOfSpace) {
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu\n", (unsigned long long)seed);
  std::mt19937_64 rng(seed);
  // The served array's shape at its smallest: 31 segments of 768 positions.
  Rig rig("sepbit", 4, GcTrigger::kFreeSpace, 16384, 16, 16);
  std::printf("segments %u\n", rig.array->geometry().segments);
  const uint64_t span = rig.volume->capacity_blocks() * 3 / 4;
  Block b(kBlockSize);
  for (int restart = 0; restart < 40; ++restart) {
    const int writes = 20 + static_cast<int>(rng() % 800);
    for (int i = 0; i < writes; ++i) {
      FillBlockWithCompressibility(b, 50, rng);
      if (rng() % 8 == 0) {
        ASSERT_TRUE(rig.volume->Flush().ok());
      }
      if (rng() % 50 == 0) {
        ASSERT_TRUE(rig.volume->Trim(rng() % span, 1).ok());
      }
      Status s = rig.volume->Write(rng() % span, b);
      ASSERT_TRUE(s.ok()) << "restart " << restart << " write " << i << ": " << s.ToString()
                          << "; free segments " << rig.array->stats().free_segments << " of "
                          << rig.array->stats().segments;
    }
    ASSERT_TRUE(rig.volume->Flush().ok());
    rig.PowerCutAndReopen(rng());
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace eraid

namespace eraid {
namespace {

// Named volumes on one array: each reads back only its own blocks; a volume open by a
// connection cannot be deleted; a deleted volume's extents come back to the next volume
// as zeros, also after a power cut (the table is saved only after the trims are durable);
// shrinking trims what is past the new end; sizes may add up to kOvercommit times the
// capacity and no more; each volume counts its own writes.
TEST(VolumesTest, IsolatedThinVolumesCreateResizeDelete) {
  Rig rig("sepbit", 4, GcTrigger::kFreeSpace, 16384, 4, 4, 0, /*named_volumes=*/true);
  const uint64_t cap = rig.volume->capacity_blocks();
  std::vector<VolumeRecord> saved;
  int saves = 0;
  auto save = [&](const std::vector<VolumeRecord>& t) {
    saved = t;
    ++saves;
    return Status::Ok();
  };
  auto vols = std::make_unique<NamedVolumes>(*rig.volume, std::vector<VolumeRecord>{}, save);
  ASSERT_EQ(vols->List().size(), 1u);
  EXPECT_EQ(vols->List()[0].name, "default");
  EXPECT_EQ(vols->List()[0].size_blocks, cap);
  EXPECT_EQ(vols->Create("bad name", 10).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(vols->Create("a", 0).code(), StatusCode::kInvalidArgument);
  const uint64_t a_size = NamedVolumes::kExtentBlocks + 100, b_size = 300;
  ASSERT_TRUE(vols->Create("a", a_size).ok());
  ASSERT_TRUE(vols->Create("b", b_size).ok());
  EXPECT_EQ(vols->Create("b", 5).code(), StatusCode::kInvalidArgument) << "names are unique";
  EXPECT_EQ(vols->Create("huge", cap * NamedVolumes::kOvercommit).code(), StatusCode::kNoSpace)
      << "overcommit limit";
  EXPECT_EQ(saves, 2);
  auto def = std::move(vols->Open("")).value();
  auto a = std::move(vols->Open("a")).value();
  auto b = std::move(vols->Open("b")).value();
  // A block in each, at the same volume LBAs, with its volume's mark.
  auto block = [](char v, uint64_t lba) {
    Block x(kBlockSize, std::byte(v));
    std::memcpy(x.data(), &lba, sizeof lba);
    return x;
  };
  Block back(kBlockSize);
  for (uint64_t lba : {uint64_t{0}, uint64_t{299}}) {
    ASSERT_TRUE(vols->Write(*def, lba, block('d', lba)).ok());
    ASSERT_TRUE(vols->Write(*a, lba, block('a', lba)).ok());
    ASSERT_TRUE(vols->Write(*b, lba, block('b', lba)).ok());
  }
  ASSERT_TRUE(vols->Write(*a, a_size - 1, block('a', a_size - 1)).ok()) << "a's second extent";
  EXPECT_EQ(vols->Write(*b, b_size, block('b', 0)).code(), StatusCode::kInvalidArgument)
      << "past b's end";
  for (uint64_t lba : {uint64_t{0}, uint64_t{299}}) {
    ASSERT_TRUE(vols->Read(*def, lba, back).ok());
    EXPECT_EQ(back, block('d', lba));
    ASSERT_TRUE(vols->Read(*a, lba, back).ok());
    EXPECT_EQ(back, block('a', lba));
    ASSERT_TRUE(vols->Read(*b, lba, back).ok());
    EXPECT_EQ(back, block('b', lba));
  }
  for (const VolumeReport& r : vols->List()) {
    const uint64_t want = r.name == "a" ? 3 : 2;
    EXPECT_EQ(r.counters.user_blocks, want) << r.name;
    EXPECT_EQ(r.counters.valid_blocks, want) << r.name;
    EXPECT_EQ(r.writes, want) << r.name;
  }
  // Open: not deleted.
  EXPECT_EQ(vols->Delete("a").code(), StatusCode::kBusy);
  EXPECT_EQ(vols->Delete("default").code(), StatusCode::kInvalidArgument);
  a.reset();
  ASSERT_TRUE(vols->Delete("a").ok());
  EXPECT_EQ(vols->Open("a").status().code(), StatusCode::kNotFound);
  // Shrink b below its block at 299, then grow it back: the block is gone.
  ASSERT_TRUE(vols->Resize("b", 200).ok());
  EXPECT_EQ(vols->Read(*b, 299, back).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(vols->Resize("b", b_size).ok());
  ASSERT_TRUE(vols->Read(*b, 299, back).ok());
  EXPECT_EQ(back, Block(kBlockSize)) << "shrinking trimmed the tail";
  // Power cut; the table as last saved; a new volume takes a's extents: zeros.
  b.reset();
  def.reset();
  vols.reset();
  rig.PowerCutAndReopen(7);
  if (HasFatalFailure()) return;
  vols = std::make_unique<NamedVolumes>(*rig.volume, saved, save);
  ASSERT_EQ(vols->List().size(), 2u);
  ASSERT_TRUE(vols->Create("c", a_size).ok());
  auto c = std::move(vols->Open("c")).value();
  for (uint64_t lba : {uint64_t{0}, uint64_t{299}, a_size - 1}) {
    ASSERT_TRUE(vols->Read(*c, lba, back).ok());
    EXPECT_EQ(back, Block(kBlockSize)) << "a deleted volume's block " << lba << " came back";
  }
  b = std::move(vols->Open("b")).value();
  ASSERT_TRUE(vols->Read(*b, 0, back).ok());
  EXPECT_EQ(back, block('b', 0));
  for (const VolumeReport& r : vols->List()) {
    if (r.name == "c") {
      EXPECT_EQ(r.counters.valid_blocks, 0u);
    }
  }
}

// Thin volumes whose sizes add up to more than the array holds: writing new blocks past
// the capacity fails with NoSpace (never anything else), everything acknowledged before
// stays readable, and a trim makes room again.
TEST(VolumesTest, OvercommittedVolumesRunOutWithNoSpaceAndTrimsMakeRoom) {
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu\n", (unsigned long long)seed);
  std::mt19937_64 rng(seed);
  Rig rig("sepbit", 4, GcTrigger::kFreeSpace, 4096, 4, 4, 0, /*named_volumes=*/true);
  const uint64_t cap = rig.volume->capacity_blocks();
  NamedVolumes vols(*rig.volume, {}, nullptr);
  ASSERT_TRUE(vols.Create("t1", cap).ok());
  ASSERT_TRUE(vols.Create("t2", cap).ok());
  auto d = std::move(vols.Open("")).value();
  auto t1 = std::move(vols.Open("t1")).value();
  auto t2 = std::move(vols.Open("t2")).value();
  Block b(BlocksToBytes(16)), back(kBlockSize);
  uint64_t written = 0;
  Status s;
  std::map<std::pair<int, uint64_t>, uint8_t> model;
  NamedVolumes::Handle* hs[] = {d.get(), t1.get(), t2.get()};
  for (uint64_t lba = 0; lba + 16 <= cap; lba += 16) {
    for (int v = 0; v < 3 && s.ok(); ++v) {
      const auto mark = static_cast<uint8_t>(1 + rng() % 250);
      std::fill(b.begin(), b.end(), std::byte{mark});
      s = vols.Write(*hs[v], lba, b);
      if (s.ok()) {
        for (uint64_t i = 0; i < 16; ++i) model[{v, lba + i}] = mark;
        written += 16;
      }
    }
    if (!s.ok()) break;
  }
  ASSERT_EQ(s.code(), StatusCode::kNoSpace) << s.ToString();
  std::printf("NoSpace after %llu blocks over a capacity of %llu\n", (unsigned long long)written,
              (unsigned long long)cap);
  EXPECT_LE(rig.volume->stats().engine.valid_blocks, cap);
  EXPECT_GT(written, cap - 64);
  for (const auto& [key, mark] : model) {
    if (rng() % 8) continue;
    ASSERT_TRUE(vols.Read(*hs[key.first], key.second, back).ok());
    ASSERT_EQ(back[0], std::byte{mark});
  }
  // Overwrites of written blocks still work; new blocks do not, until a trim makes room.
  ASSERT_TRUE(vols.Write(*d, 0, std::span(b).first(kBlockSize)).ok());
  ASSERT_EQ(model.count({2, cap - 1}), 0u) << "t2's last blocks were never written";
  EXPECT_EQ(vols.Write(*t2, cap - 16, b).code(), StatusCode::kNoSpace);
  ASSERT_TRUE(vols.Trim(*d, 0, 512).ok());
  for (uint64_t i = 16; i <= 256; i += 16) ASSERT_TRUE(vols.Write(*t2, cap - i, b).ok()) << i;
  ASSERT_TRUE(vols.Read(*d, 5, back).ok());
  EXPECT_EQ(back, Block(kBlockSize));
  EXPECT_LE(rig.volume->stats().engine.valid_blocks, cap);
}

// Writers and readers on their own volumes while another thread creates, resizes and
// deletes others (the TSan pass runs it): each writer reads back its own blocks.
TEST(VolumeTest, ConcurrentNamedVolumesIoBesideCreateResizeDelete) {
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu\n", (unsigned long long)seed);
  Rig rig("sepbit", 4, GcTrigger::kFreeSpace, 8192, 4, 4, 0, /*named_volumes=*/true);
  NamedVolumes vols(*rig.volume, {}, nullptr);
  constexpr int kWriters = 3;
  for (int t = 0; t < kWriters; ++t) ASSERT_TRUE(vols.Create("w" + std::to_string(t), 600).ok());
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::thread admin([&] {
    std::mt19937_64 rng(seed);
    for (int i = 0; !stop; ++i) {
      const std::string name = "x" + std::to_string(i % 4);
      Status s = vols.Create(name, 1 + rng() % 5000);
      if (s.ok()) {
        auto h = vols.Open(name);
        Block b(kBlockSize, std::byte{7});
        if (!h.ok() || !vols.Write(**h, 0, b).ok()) ++failures;
        h = Status::NotFound("closed");
        if (!vols.Resize(name, 1 + rng() % 20000).ok()) ++failures;
        if (!vols.Delete(name).ok()) ++failures;
      }
    }
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < kWriters; ++t) {
    writers.emplace_back([&, t] {
      std::mt19937_64 rng(seed + 1 + t);
      auto h = std::move(vols.Open("w" + std::to_string(t))).value();
      std::vector<uint8_t> model(600, 0);
      Block b(kBlockSize), back(kBlockSize);
      for (int i = 0; i < 3000; ++i) {
        const uint64_t lba = rng() % 600;
        if (rng() % 3) {
          const auto v = static_cast<uint8_t>(1 + rng() % 250);
          std::fill(b.begin(), b.end(), std::byte{v});
          if (!vols.Write(*h, lba, b).ok()) ++failures;
          model[lba] = v;
        } else if (!vols.Read(*h, lba, back).ok() || back[0] != std::byte{model[lba]}) {
          ++failures;
        }
      }
    });
  }
  for (auto& w : writers) w.join();
  stop = true;
  admin.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(vols.List().size(), size_t{1 + kWriters});
}

}  // namespace
}  // namespace eraid
