// The conversion scheduler on a real stack (compressing drives over memory, the elastic
// array, the SepBIT volume), driven step by step with a manual clock:
//   - hotness: decayed counts, rate-independent ranking, epochs, second chance, cooldown;
//   - data that compresses ~3:1 with poorly compressible parity (n = 3) ends fully
//     RAID10 by the autonomous rule;
//   - incompressible data: physical use ends under β, no write fails for space;
//   - a budget for ~25% RAID10 and 80/20 reads: the hot reads land on RAID10;
//   - the throttle's bytes per second hold within 10% over a measured interval;
//   - the raid5 and raid10 policies do what they say.
#include "scheduler/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "common/data_gen.h"
#include "compress/compressed_drive.h"
#include "compress/faulty_backend.h"
#include "compress/mem_backend.h"
#include "tests/support/seed.h"
#include "tests/support/stack.h"

namespace eraid {
namespace {

using Block = std::vector<std::byte>;

constexpr uint64_t kSecond = 1'000'000'000;

SegmentHotness::SegmentNow Unmirrored(uint32_t) { return {}; }

TEST(SegmentHotnessTest, ScoresDecayByHalfLifeAndRankTheSameAtAnyRate) {
  HotnessOptions o;
  o.half_life_ms = 2000;
  o.epoch_ms = 1000;
  o.min_epoch_accesses = 10;
  for (uint32_t rate : {1u, 100u, 10000u}) {  // reads per epoch of the coldest segment
    SegmentHotness h(4, o, 0);
    uint64_t now = 0;
    for (int epoch = 0; epoch < 20; ++epoch) {
      for (uint32_t s = 0; s < 4; ++s) {
        for (uint32_t i = 0; i < rate * (1u << (2 * s)); ++i) h.OnRead(s);  // 1, 4, 16, 64 x
      }
      now += kSecond;
      ASSERT_TRUE(h.MaybeCloseEpoch(now, Unmirrored));
    }
    // Steady state of score = score * 2^-0.5 + r: r / (1 - 2^-0.5).
    const double steady = double(rate) / (1 - std::exp2(-0.5));
    EXPECT_NEAR(h.score(0), steady, 0.01 * steady) << rate;
    for (uint32_t s = 1; s < 4; ++s) {
      EXPECT_NEAR(h.score(s) / h.score(s - 1), 4.0, 0.01)
          << "the ranking and its ratios do not depend on the rate";
    }
    // Nothing more read: two epochs (one half-life) halve every score.
    const float before = h.score(3);
    h.OnRead(0);
    for (int i = 0; i < 10; ++i) h.OnInvalidate(0);  // enough accesses to close the epochs
    now += kSecond;
    ASSERT_TRUE(h.MaybeCloseEpoch(now, Unmirrored));
    for (int i = 0; i < 11; ++i) h.OnInvalidate(0);
    now += kSecond;
    ASSERT_TRUE(h.MaybeCloseEpoch(now, Unmirrored));
    EXPECT_NEAR(h.score(3), before / 2, 0.01 * before);
  }
}

TEST(SegmentHotnessTest, AnEpochNeedsItsTimeAndItsAccessesAndAnIdleSpellDecaysLittle) {
  HotnessOptions o;
  o.half_life_ms = 1000;
  o.epoch_ms = 1000;
  o.min_epoch_accesses = 100;
  SegmentHotness h(2, o, 0);
  for (int i = 0; i < 100; ++i) h.OnRead(0);
  EXPECT_FALSE(h.MaybeCloseEpoch(kSecond / 2, Unmirrored)) << "too short";
  ASSERT_TRUE(h.MaybeCloseEpoch(kSecond, Unmirrored));
  EXPECT_FLOAT_EQ(h.score(0), 100);
  for (int i = 0; i < 99; ++i) h.OnRead(1);
  EXPECT_FALSE(h.MaybeCloseEpoch(3 * kSecond, Unmirrored)) << "too few accesses";
  EXPECT_EQ(h.epoch(), 1u);
  h.OnRead(1);
  // An hour later: decayed by four epochs at most (2^-4), not by an hour.
  ASSERT_TRUE(h.MaybeCloseEpoch(3600 * kSecond, Unmirrored));
  EXPECT_FLOAT_EQ(h.score(0), 100.0f / 16);
  EXPECT_FLOAT_EQ(h.score(1), 100);
}

TEST(SegmentHotnessTest, InvalidationsWeighAQuarterAndCoverageCountsMirroredReads) {
  HotnessOptions o;
  o.min_epoch_accesses = 1;
  SegmentHotness h(3, o, 0);
  for (int i = 0; i < 8; ++i) h.OnInvalidate(0);
  for (int i = 0; i < 30; ++i) h.OnRead(1);
  for (int i = 0; i < 10; ++i) h.OnRead(2);
  ASSERT_TRUE(h.MaybeCloseEpoch(kSecond, [](uint32_t s) {
    return SegmentHotness::SegmentNow{s == 1, 0};
  }));
  EXPECT_FLOAT_EQ(h.score(0), 2);
  EXPECT_DOUBLE_EQ(h.read_coverage(), 0.75) << "30 of 40 reads on the mirrored segment";
  EXPECT_EQ(h.last_epoch_reads(), 40u);
  // Segment 1 freed and allocated again: its score starts over.
  h.OnRead(2);
  ASSERT_TRUE(h.MaybeCloseEpoch(2 * kSecond, [](uint32_t s) {
    return SegmentHotness::SegmentNow{false, s == 1 ? 7u : 0u};
  }));
  EXPECT_FLOAT_EQ(h.score(1), 0);
  EXPECT_GT(h.score(2), 0);
}

TEST(SegmentHotnessTest, SecondChanceAndCooldown) {
  HotnessOptions o;
  o.min_epoch_accesses = 1;
  o.cooldown_epochs = 3;
  SegmentHotness h(2, o, 0);
  uint64_t now = 0;
  auto close = [&] {
    h.OnRead(1);
    now += kSecond;
    ASSERT_TRUE(h.MaybeCloseEpoch(now, Unmirrored));
  };
  using Offer = SegmentHotness::Offer;
  EXPECT_EQ(h.OfferDemotion(0), Offer::kMarked) << "the first offer only marks it";
  EXPECT_EQ(h.OfferDemotion(0), Offer::kWaiting) << "another in the same epoch waits";
  close();
  EXPECT_EQ(h.OfferDemotion(0), Offer::kDemote) << "still the victim an epoch later";
  h.Converted(0);
  for (uint32_t e = 0; e < 3; ++e) {
    EXPECT_TRUE(h.InCooldown(0)) << e;
    close();
  }
  EXPECT_FALSE(h.InCooldown(0));
  EXPECT_EQ(h.OfferDemotion(1), Offer::kMarked);
  close();
  close();
  close();
  EXPECT_EQ(h.OfferDemotion(1), Offer::kMarked) << "a mark three epochs old is stale: marked anew";
  close();
  EXPECT_EQ(h.OfferDemotion(1), Offer::kDemote);
  // Stamps survive the 16-bit epoch counter wrapping.
  for (int i = 0; i < 70000; ++i) close();
  EXPECT_FALSE(h.InCooldown(0));
  EXPECT_EQ(h.OfferDemotion(0), Offer::kMarked);
  close();
  EXPECT_EQ(h.OfferDemotion(0), Offer::kDemote);
}

// Text-like data: words from a small vocabulary. Compresses ~3:1, but the XOR of three
// such blocks (RAID5 parity) hardly compresses: the autonomous rule's case.
void FillText(std::span<std::byte> b, std::mt19937_64& rng) {
  static const char* kWords[] = {"the",   "drive", "segment", "parity", "mirror", "log",
                                 "block", "write", "read",    "flash",  "erase",  "of"};
  size_t at = 0;
  while (at < b.size()) {
    const char* w = kWords[rng() % (sizeof(kWords) / sizeof(kWords[0]))];
    for (const char* c = w; *c && at < b.size(); ++c) b[at++] = std::byte(*c);
    if (at < b.size()) b[at++] = std::byte(rng() % 7 == 0 ? '\n' : ' ');
  }
}

struct Stack {
  ManualClock clock{1};
  CompressedDrives drives;
  std::unique_ptr<ElasticArray> array;
  std::unique_ptr<LogVolume> volume;
  std::unique_ptr<Scheduler> scheduler;

  static DriveOptions Options(double expansion) {
    DriveOptions d;
    d.erase_unit_blocks = 16;
    d.expansion = expansion;
    return d;
  }
  explicit Stack(uint64_t flash_blocks = 6144, double expansion = 2.0)
      : drives(4, flash_blocks, Options(expansion)) {
    array = MakeArray(drives.devs, 4, 4, clock);
    volume = std::move(LogVolume::Create(*array, VolumeOptions{})).value();
  }
  PhysicalUse Physical() const { return DrivesPhysicalUse(drives.drives); }
  // Writes LBAs [0, blocks) once, `percent` compressible, and flushes.
  void Fill(uint64_t blocks, int percent, std::mt19937_64& rng) {
    Block b(kBlockSize);
    for (uint64_t lba = 0; lba < blocks; ++lba) {
      FillBlockWithCompressibility(b, percent, rng);
      ASSERT_TRUE(volume->Write(lba, b).ok()) << lba;
    }
    ASSERT_TRUE(volume->Flush().ok());
  }
  // Half the volume written incompressible, then every sealed segment mirrored, and a
  // budget (*beta) halfway between the two uses: it holds the data as RAID5 with room to
  // spare, not all of it mirrored.
  void FillAndMirrorPastABudget(PhysicalUse* before, PhysicalUse* mirrored, double* beta) {
    std::mt19937_64 rng(3);
    Fill(volume->capacity_blocks() / 2, 0, rng);
    *before = Physical();
    for (const auto& [seg, gp] : volume->SealedSegments())
      ASSERT_TRUE(array->Convert(seg, SegmentScheme::kRaid10).ok());
    *mirrored = Physical();
    ASSERT_GT(mirrored->used_bytes, before->used_bytes * 13 / 10);  // 2 copies against 1 + 1/3
    *beta = (double(before->used_bytes) + double(mirrored->used_bytes)) / 2 /
            double(mirrored->flash_bytes);
  }
  void StartScheduler(SchedulerOptions o) {
    scheduler = std::make_unique<Scheduler>(
        *array, *volume, [this] { return Physical(); }, o, clock);
  }
  // Steps until a step converts nothing (the scheduler is idle).
  void RunToIdle(int max_steps = 10000) {
    for (int i = 0; i < max_steps; ++i) {
      auto r = scheduler->Step();
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      if (*r == 0) return;
    }
    FAIL() << "the scheduler never went idle";
  }
  double SealedCoverage() const {
    uint64_t all = 0, r10 = 0;
    for (const auto& [s, gp] : volume->SealedSegments()) {
      const SegmentInfo i = array->segment_info(s);
      all += i.frontier;
      if (i.scheme == SegmentScheme::kRaid10) r10 += i.frontier;
    }
    return all ? double(r10) / double(all) : 0;
  }
};

TEST(SchedulerTest, CompressibleDataEndsFullyRaid10ByTheAutonomousRule) {
  Stack st;
  std::mt19937_64 rng(1);
  const uint64_t cap = st.volume->capacity_blocks();
  Block b(kBlockSize);
  for (uint64_t lba = 0; lba < cap * 6 / 10; ++lba) {  // written before the scheduler: RAID5
    FillText(b, rng);
    ASSERT_TRUE(st.volume->Write(lba, b).ok());
  }
  ASSERT_TRUE(st.volume->Flush().ok());
  const auto sealed = st.volume->SealedSegments();
  ASSERT_FALSE(sealed.empty());
  const SegmentInfo some = st.array->segment_info(sealed.front().first);
  std::printf("alpha_usr=%.2f alpha_pty=%.2f\n", some.alpha_usr, some.alpha_pty);
  EXPECT_GE(some.alpha_usr, 2.5) << "the test data should compress about 3:1";
  SchedulerOptions o;
  o.beta = 0.01;  // no budget at all: only the autonomous rule may mirror
  st.StartScheduler(o);
  st.RunToIdle();
  const SchedulerStats s = st.scheduler->stats();
  std::printf("coverage=%.3f autonomous=%llu to_raid10=%llu\n", st.SealedCoverage(),
              (unsigned long long)s.autonomous, (unsigned long long)s.to_raid10);
  EXPECT_GE(st.SealedCoverage(), 0.95);
  EXPECT_EQ(s.autonomous, s.to_raid10) << "every conversion was free";
  // Nothing was lost on the way.
  std::mt19937_64 again(1);
  Block back(kBlockSize);
  for (uint64_t lba = 0; lba < cap * 6 / 10; ++lba) {
    FillText(b, again);
    ASSERT_TRUE(st.volume->Read(lba, back).ok());
    ASSERT_EQ(back, b) << lba;
  }
}

TEST(SchedulerTest, IncompressibleDataStaysUnderBetaAndNoWriteFails) {
  Stack st;
  SchedulerOptions o;
  o.beta = 0.8;
  st.StartScheduler(o);
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu\n", (unsigned long long)seed);
  std::mt19937_64 rng(seed);
  const uint64_t cap = st.volume->capacity_blocks();
  Block b(kBlockSize);
  for (uint64_t i = 0; i < 2 * cap; ++i) {
    FillBlockWithCompressibility(b, 0, rng);
    const uint64_t lba = i < cap ? i : rng() % cap;
    Status s = st.volume->Write(lba, b);
    ASSERT_TRUE(s.ok()) << "write " << i << " of " << 2 * cap << ": " << s.ToString();
    if (i % 256 == 0) {
      ASSERT_TRUE(st.scheduler->Step().ok());
    }
  }
  st.RunToIdle();
  const PhysicalUse u = st.Physical();
  std::printf("physical=%.3f of flash, beta=%.2f, coverage=%.3f to_raid5=%llu born_raid10=%llu\n",
              double(u.used_bytes) / double(u.flash_bytes), o.beta, st.SealedCoverage(),
              (unsigned long long)st.scheduler->stats().to_raid5,
              (unsigned long long)st.scheduler->stats().born_raid10);
  EXPECT_LE(double(u.used_bytes), o.beta * double(u.flash_bytes));
}

// Issue 53: under writes near the budget, an elastic array is no worse than a RAID5 one.
// Births are RAID5 once the traffic is measured to be writes (a mirror writes every block
// twice), nothing is promoted that is only overwritten, and what conversions there are
// stay within their share of the bytes written.
TEST(SchedulerTest, UnderWriteChurnBirthsAreRaid5AndConversionsStayWithinTheirShare) {
  Stack st;
  SchedulerOptions o;
  o.beta = 0.8;
  st.StartScheduler(o);
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu\n", (unsigned long long)seed);
  std::mt19937_64 rng(seed);
  const uint64_t cap = st.volume->capacity_blocks();
  Block b(kBlockSize);
  uint64_t born10_when_known = 0, written = 0;
  for (uint64_t i = 0; i < 2 * cap; ++i) {
    FillBlockWithCompressibility(b, 0, rng);
    const uint64_t lba = i < cap ? i : rng() % cap;  // a fill, then random overwrites
    ASSERT_TRUE(st.volume->Write(lba, b).ok()) << i;
    ++written;
    if (i % 256 == 0) {
      st.clock.AdvanceNanos(kSecond / 4);  // ~1k writes a second
      ASSERT_TRUE(st.scheduler->Step().ok());
      if (born10_when_known == 0 && st.scheduler->stats().write_share >= 0)
        born10_when_known = st.scheduler->stats().born_raid10 + 1;  // (+1: taken)
    }
  }
  const SchedulerStats s = st.scheduler->stats();
  std::printf("write_share=%.2f born10=%llu born5=%llu to10=%llu to5=%llu moved=%llu of %llu\n",
              s.write_share, (unsigned long long)s.born_raid10, (unsigned long long)s.born_raid5,
              (unsigned long long)s.to_raid10, (unsigned long long)s.to_raid5,
              (unsigned long long)s.bytes_moved, (unsigned long long)BlocksToBytes(written));
  ASSERT_GT(born10_when_known, 0u) << "the traffic was measured";
  EXPECT_GT(s.write_share, 0.8);
  EXPECT_EQ(s.born_raid10, born10_when_known - 1) << "no mirrored birth under writes";
  EXPECT_EQ(s.to_raid10, 0u) << "nothing read: nothing worth a mirror";
  // Within 10% of the bytes written, plus the allowance's cap (2 segments) it may save up.
  const double segment = double(BlocksToBytes(st.array->geometry().segment_positions()));
  EXPECT_LE(double(s.bytes_moved), 0.10 * double(BlocksToBytes(written)) + 2 * segment);
  EXPECT_LE(double(st.Physical().used_bytes), o.beta * double(st.Physical().flash_bytes) * 1.02);
}

// The same write churn on an array with a device failed: births are mirrored while the
// budget holds them (a RAID5 block of the lost device costs n reads, GC's too), where
// healthy they were RAID5; and still nothing is converted.
TEST(SchedulerTest, UnderWriteChurnADegradedArrayBirthsMirrorsWhileTheyFit) {
  Stack st;
  SchedulerOptions o;
  o.beta = 0.8;
  // Births look a half-life of the log's growth ahead; this short one keeps the fill's
  // growth (the log takes free segments until GC starts) from filling the budget.
  o.hotness.half_life_ms = 2000;
  st.StartScheduler(o);
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu\n", (unsigned long long)seed);
  std::mt19937_64 rng(seed);
  const uint64_t region = st.volume->capacity_blocks() / 3;
  Block b(kBlockSize);
  auto churn = [&](uint64_t writes, uint64_t first) {
    for (uint64_t i = first; i < first + writes; ++i) {
      FillBlockWithCompressibility(b, 50, rng);              // room in the budget for mirrors
      const uint64_t lba = i < region ? i : rng() % region;  // a fill, then random overwrites
      ASSERT_TRUE(st.volume->Write(lba, b).ok()) << i;
      if (i % 256 == 0) {
        st.clock.AdvanceNanos(kSecond / 4);
        ASSERT_TRUE(st.scheduler->Step().ok());
      }
    }
  };
  churn(2 * region, 0);
  const SchedulerStats healthy = st.scheduler->stats();
  ASSERT_GE(healthy.write_share, 0.8) << "the traffic was measured as writes";
  churn(region, 2 * region);  // births now decided by that window
  const SchedulerStats before = st.scheduler->stats();
  EXPECT_EQ(before.born_raid10, healthy.born_raid10) << "healthy, writes are born RAID5";
  ASSERT_TRUE(st.array->FailDevice(DeviceIndex(2)).ok());
  churn(region, 3 * region);
  const SchedulerStats after = st.scheduler->stats();
  std::printf("born10 %llu -> %llu, born5 %llu -> %llu; physical %.3f of flash\n",
              (unsigned long long)before.born_raid10, (unsigned long long)after.born_raid10,
              (unsigned long long)before.born_raid5, (unsigned long long)after.born_raid5,
              double(st.Physical().used_bytes) / double(st.Physical().flash_bytes));
  EXPECT_GT(after.born_raid10, before.born_raid10) << "degraded, births are mirrored";
  EXPECT_EQ(after.to_raid10 + after.to_raid5, before.to_raid10 + before.to_raid5)
      << "no conversions while degraded";
  EXPECT_LE(double(st.Physical().used_bytes), o.beta * double(st.Physical().flash_bytes) * 1.02);
}

// Over the budget with mirrored segments, the scheduler demotes them and the log is not
// made to collect (it would move live blocks of segments with little garbage to make room
// for mirrors); with none left to demote, the log collects as before.
TEST(SchedulerTest, OverTheBudgetMirrorsAreDemotedBeforeTheLogCollects) {
  Stack st;
  PhysicalUse before, mirrored;
  SchedulerOptions o;
  ASSERT_NO_FATAL_FAILURE(st.FillAndMirrorPastABudget(&before, &mirrored, &o.beta));
  o.max_conversions_per_step = 1;
  st.StartScheduler(o);
  EXPECT_TRUE(st.scheduler->SpacePressure()) << "before a pass, nothing is known demotable";
  auto r = st.scheduler->Step();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 1u);
  EXPECT_FALSE(st.scheduler->SpacePressure()) << "mirrors to demote: the log need not collect";
  EXPECT_EQ(st.scheduler->stats().gc_spared, 1u);
  st.RunToIdle();
  const SchedulerStats s = st.scheduler->stats();
  EXPECT_GE(s.demotions_for_space, 1u);
  EXPECT_EQ(s.demotions_for_space, s.to_raid5);
  EXPECT_LE(double(st.Physical().used_bytes), o.beta * double(mirrored.flash_bytes));
  EXPECT_GT(st.SealedCoverage(), 0.0) << "only as many demoted as the budget needed";
  // The same array with nothing left to demote and over its budget: the log collects.
  st.scheduler.reset();
  o.beta = 0.5 * double(before.used_bytes) / double(before.flash_bytes);
  o.policy = Policy::kManual;
  st.StartScheduler(o);
  EXPECT_TRUE(st.scheduler->SpacePressure()) << "manual: no demotions, the log collects";
  // Elastic again, over the budget with mirrors, but degraded: the scheduler converts
  // nothing, so the log must collect.
  st.scheduler.reset();
  o.policy = Policy::kElastic;
  st.StartScheduler(o);
  for (const auto& [seg, gp] : st.volume->SealedSegments()) {
    if (st.array->segment_info(seg, false).scheme == SegmentScheme::kRaid5) {
      ASSERT_TRUE(st.array->Convert(seg, SegmentScheme::kRaid10).ok());
    }
  }
  ASSERT_TRUE(st.scheduler->Step().ok());
  EXPECT_FALSE(st.scheduler->SpacePressure()) << "healthy: mirrors to demote";
  ASSERT_TRUE(st.array->FailDevice(DeviceIndex(3)).ok());
  ASSERT_TRUE(st.scheduler->Step().ok());
  EXPECT_TRUE(st.scheduler->SpacePressure()) << "degraded: no demotions, the log collects";
}

// A device that fails while a step is demoting for space stops the step: no conversion
// begins degraded (each would read the failed drive's blocks through reconstruction, under
// the array's exclusive lock, while user reads wait).
TEST(SchedulerTest, ADeviceFailingDuringAStepStopsItsConversions) {
  Stack st;
  PhysicalUse before, mirrored;
  SchedulerOptions o;
  ASSERT_NO_FATAL_FAILURE(st.FillAndMirrorPastABudget(&before, &mirrored, &o.beta));
  o.max_conversions_per_step = 8;
  // The physical-use reading the step takes before each conversion fails device 3 at the
  // third: after the first conversion of the step, before the second.
  int calls = 0;
  st.scheduler = std::make_unique<Scheduler>(
      *st.array, *st.volume,
      [&] {
        if (++calls == 3) {
          EXPECT_TRUE(st.array->FailDevice(DeviceIndex(3)).ok());
        }
        return st.Physical();
      },
      o, st.clock);
  auto r = st.scheduler->Step();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, 1u) << "one demotion before the failure, none after it";
  EXPECT_EQ(st.scheduler->stats().to_raid5, 1u);
  EXPECT_TRUE(st.scheduler->SpacePressure()) << "degraded: no demotions, the log collects";
  ASSERT_TRUE(st.scheduler->Step().ok());
  EXPECT_EQ(st.scheduler->stats().to_raid5, 1u);
  EXPECT_GE(st.scheduler->stats().degraded_steps, 1u);
}

// Births follow the traffic: mirrored while reads are known to dominate and the budget
// has room, RAID5 as soon as writes do.
TEST(SchedulerTest, BirthsAreMirroredOnlyWhileReadsDominate) {
  Stack st;
  const uint64_t cap = st.volume->capacity_blocks();
  std::mt19937_64 rng(4);
  st.Fill(cap / 4, 0, rng);
  Block b(kBlockSize);
  SchedulerOptions o;
  o.beta = 0.9;
  st.StartScheduler(o);
  EXPECT_EQ(st.scheduler->SchemeForNewSegment(), SegmentScheme::kRaid5)
      << "nothing measured yet: a birth is a write";
  ASSERT_TRUE(st.scheduler->Step().ok());  // opens the first window
  for (int second = 0; second < 3; ++second) {
    for (int i = 0; i < 4000; ++i) ASSERT_TRUE(st.volume->Read(rng() % (cap / 4), b).ok());
    st.clock.AdvanceNanos(kSecond);
    ASSERT_TRUE(st.scheduler->Step().ok());
  }
  EXPECT_LT(st.scheduler->stats().write_share, 0.2);
  EXPECT_EQ(st.scheduler->SchemeForNewSegment(), SegmentScheme::kRaid10) << "reads dominate";
  for (int second = 0; second < 3; ++second) {
    for (uint64_t i = 0; i < cap / 8; ++i) {
      FillBlockWithCompressibility(b, 0, rng);
      ASSERT_TRUE(st.volume->Write(cap / 4 + rng() % (cap / 4), b).ok());
    }
    st.clock.AdvanceNanos(kSecond);
    ASSERT_TRUE(st.scheduler->Step().ok());
  }
  EXPECT_GT(st.scheduler->stats().write_share, 0.8);
  EXPECT_EQ(st.scheduler->SchemeForNewSegment(), SegmentScheme::kRaid5) << "writes dominate";
}

// A stack written full of incompressible data (born RAID5), with a scheduler whose budget
// mirrors about `share` of it; reads are driven in rounds of one simulated second.
struct HotRig {
  Stack st;
  uint64_t cap = 0;
  std::mt19937_64 rng;
  Block b = Block(kBlockSize);

  explicit HotRig(uint64_t seed, double share = 0.25) : rng(seed) {
    cap = st.volume->capacity_blocks();
    for (uint64_t lba = 0; lba < cap; ++lba) {
      FillBlockWithCompressibility(b, 0, rng);
      EXPECT_TRUE(st.volume->Write(lba, b).ok());
    }
    EXPECT_TRUE(st.volume->Flush().ok());
    const PhysicalUse u0 = st.Physical();
    SchedulerOptions o;
    o.beta = (double(u0.used_bytes) + share * double(BlocksToBytes(cap)) * 2.0 / 3.0) /
             double(u0.flash_bytes);
    o.hotness.half_life_ms = 5000;
    o.hotness.cooldown_epochs = 5;
    st.StartScheduler(o);
  }
  // One second: `reads` reads, 80% of them uniform over [hot, hot + cap/5), the rest over
  // the other LBAs; then a scheduler step. Returns the share of the hot reads that found
  // their block in a RAID10 segment.
  double Round(uint64_t hot, int reads = 4000) {
    const uint64_t zone = cap / 5;
    uint64_t hot_reads = 0, hot_on_raid10 = 0;
    for (int i = 0; i < reads; ++i) {
      const bool pick_hot = rng() % 10 < 8;
      const uint64_t lba =
          pick_hot ? hot + rng() % zone : (hot + zone + rng() % (cap - zone)) % cap;
      EXPECT_TRUE(st.volume->Read(lba, b).ok());
      if (pick_hot) {
        ++hot_reads;
        auto s = st.volume->Locate(lba);
        if (s && st.array->segment_info(*s, false).scheme == SegmentScheme::kRaid10)
          ++hot_on_raid10;
      }
    }
    st.clock.AdvanceNanos(kSecond);
    auto r = st.scheduler->Step();
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return double(hot_on_raid10) / double(hot_reads);
  }
  uint64_t Conversions() const {
    const SchedulerStats s = st.scheduler->stats();
    return s.to_raid10 + s.to_raid5;
  }
};

TEST(SchedulerTest, HotReadsLandOnRaid10UnderATightBudget) {
  const uint64_t seed = TestSeed();
  std::printf("seed %llu (ERAID_SEED replays)\n", (unsigned long long)seed);
  HotRig rig(seed);
  for (int round = 0; round < 40; ++round) rig.Round(0);
  double share = 0;
  for (int round = 0; round < 20; ++round) share += rig.Round(0) / 20;
  const SchedulerStats ss = rig.st.scheduler->stats();
  std::printf(
      "hot reads on RAID10: %.3f; coverage %.3f; hot-read coverage %.3f; to_raid10=%llu "
      "to_raid5=%llu\n",
      share, rig.st.SealedCoverage(), ss.hot_read_coverage, (unsigned long long)ss.to_raid10,
      (unsigned long long)ss.to_raid5);
  EXPECT_GE(share, 0.9);
  EXPECT_LE(rig.st.SealedCoverage(), 0.45) << "the budget must bind";
  EXPECT_GT(ss.hot_read_coverage, 0.7) << "80% of reads are hot, and they are mirrored";
}

// The hot fifth moves to the middle of the volume: the new one is mirrored and the old one
// demoted within a bounded time, and a workload that stays put makes (almost) no
// conversions once converged.
TEST(SchedulerTest, AMovingHotZoneIsFollowedAndAStableOneConverges) {
  const uint64_t seed = TestSeed();
  std::printf("seed %llu (ERAID_SEED replays)\n", (unsigned long long)seed);
  HotRig rig(seed);
  for (int round = 0; round < 40; ++round) rig.Round(0);
  const uint64_t before = rig.Conversions();
  double share = 0;
  for (int round = 0; round < 60; ++round) share += rig.Round(0) / 60;
  const uint64_t stable = rig.Conversions() - before;
  std::printf("converged: hot share %.3f; %llu conversions in the next 60 s\n", share,
              (unsigned long long)stable);
  EXPECT_GE(share, 0.9);
  EXPECT_LE(stable, 4u) << "a stable workload must not churn";
  const uint64_t middle = 2 * (rig.cap / 5);
  int rounds = 0;
  double moved = 0;
  for (; rounds < 90; ++rounds) {
    moved = rig.Round(middle);
    if (rounds >= 10 && moved >= 0.9) break;
  }
  std::printf(
      "the hot zone moved: %.3f of its reads on RAID10 after %d s; to_raid10=%llu to_raid5=%llu "
      "swaps=%llu\n",
      moved, rounds, (unsigned long long)rig.st.scheduler->stats().to_raid10,
      (unsigned long long)rig.st.scheduler->stats().to_raid5,
      (unsigned long long)rig.st.scheduler->stats().swaps);
  EXPECT_GE(moved, 0.9) << "the new hot zone is mirrored within 90 s";
  double old_share = 0;  // the old zone, read now as a cold zone is
  {
    uint64_t on = 0, all = 0;
    for (uint64_t lba = 0; lba < rig.cap / 5; ++lba) {
      auto s = rig.st.volume->Locate(lba);
      if (!s) continue;
      ++all;
      if (rig.st.array->segment_info(*s, false).scheme == SegmentScheme::kRaid10) ++on;
    }
    old_share = double(on) / double(all);
  }
  std::printf("the old hot zone: %.3f of it still RAID10\n", old_share);
  EXPECT_LE(old_share, 0.5) << "the old hot zone gave its room to the new one";
}

// While a device is missing nothing is converted (each conversion would read through
// reconstruction and write a layout without redundancy); hotness keeps counting, and the
// scheduler resumes once the device is rebuilt.
TEST(SchedulerTest, ADegradedArrayConvertsNothingAndResumesAfterTheRebuild) {
  const uint64_t seed = TestSeed();
  std::printf("seed %llu (ERAID_SEED replays)\n", (unsigned long long)seed);
  HotRig rig(seed);
  ASSERT_TRUE(rig.st.array->FailDevice(DeviceIndex(2)).ok());
  for (int round = 0; round < 20; ++round) rig.Round(0);
  SchedulerStats ss = rig.st.scheduler->stats();
  EXPECT_EQ(ss.to_raid10 + ss.to_raid5, 0u) << "no conversions while degraded";
  EXPECT_GE(ss.degraded_steps, 20u);
  EXPECT_GE(ss.epochs, 15u) << "hotness keeps counting";
  DriveOptions d;
  d.erase_unit_blocks = 16;
  d.expansion = 2.0;
  MemBackend flash(6144);
  auto fresh = CompressedDrive::Format(flash, d);
  ASSERT_TRUE(fresh.ok());
  ASSERT_TRUE(rig.st.array->Replace(DeviceIndex(2), fresh->get()).ok());
  double share = 0;
  for (int round = 0; round < 20; ++round) share = rig.Round(0);
  ss = rig.st.scheduler->stats();
  std::printf("after the rebuild: %.3f of hot reads on RAID10; to_raid10=%llu\n", share,
              (unsigned long long)ss.to_raid10);
  EXPECT_GT(ss.to_raid10, 0u);
  EXPECT_GE(share, 0.9) << "what was learnt while degraded is used at once";
  ASSERT_TRUE(
      rig.st.array->FailDevice(DeviceIndex(2)).ok());  // the fresh drive dies before the rig
}

TEST(SchedulerTest, ThrottleHoldsWithinTenPercent) {
  Stack st(16384, 2.0);
  const uint64_t cap = st.volume->capacity_blocks();
  std::mt19937_64 rng(3);
  Block b(kBlockSize);
  for (uint64_t lba = 0; lba < cap * 9 / 10; ++lba) {
    FillBlockWithCompressibility(b, 50, rng);
    ASSERT_TRUE(st.volume->Write(lba, b).ok());
  }
  ASSERT_TRUE(st.volume->Flush().ok());
  SchedulerOptions o;
  o.policy = Policy::kRaid10;
  o.beta = 1.0;
  const uint64_t segment_bytes = BlocksToBytes(st.array->geometry().segment_positions());
  o.rate_bytes_per_sec = segment_bytes * 2;  // two segments' worth per second
  st.StartScheduler(o);
  // 20 simulated seconds in 100 ms ticks: the scheduler may convert only what the rate allows.
  for (int tick = 0; tick < 200; ++tick) {
    st.clock.AdvanceNanos(100'000'000);
    ASSERT_TRUE(st.scheduler->Step().ok());
  }
  const SchedulerStats s = st.scheduler->stats();
  const double expected = 20.0 * double(o.rate_bytes_per_sec);
  std::printf("moved %llu bytes in 20 s at %llu B/s: %.3f of the rate\n",
              (unsigned long long)s.bytes_moved, (unsigned long long)o.rate_bytes_per_sec,
              double(s.bytes_moved) / expected);
  ASSERT_GT(s.to_raid10, 10u) << "enough work to measure";
  EXPECT_NEAR(double(s.bytes_moved), expected, 0.1 * expected);
}

TEST(SchedulerTest, PoliciesRaid5Raid10AndManual) {
  Stack st;
  const uint64_t cap = st.volume->capacity_blocks();
  std::mt19937_64 rng(5);
  st.Fill(cap / 2, 50, rng);
  SchedulerOptions o;
  o.policy = Policy::kRaid10;
  o.beta = 1.0;
  st.StartScheduler(o);
  st.RunToIdle();
  EXPECT_GE(st.SealedCoverage(), 0.95) << "raid10: everything that fits";
  st.scheduler.reset();
  o.policy = Policy::kRaid5;
  st.StartScheduler(o);
  st.RunToIdle();
  EXPECT_EQ(st.SealedCoverage(), 0.0) << "raid5: nothing mirrored";
  EXPECT_EQ(st.scheduler->SchemeForNewSegment(), SegmentScheme::kRaid5);
  // manual: what `eraid convert` did by hand stays as it is, either way.
  st.scheduler.reset();
  bool odd = false;
  for (const auto& [s, gp] : st.volume->SealedSegments()) {
    if ((odd = !odd)) {
      ASSERT_TRUE(st.array->Convert(s, SegmentScheme::kRaid10).ok());
    }
  }
  const double by_hand = st.SealedCoverage();
  ASSERT_GT(by_hand, 0.3);
  ASSERT_LT(by_hand, 0.7);
  o.policy = Policy::kManual;
  st.StartScheduler(o);
  st.RunToIdle();
  EXPECT_EQ(st.scheduler->stats().to_raid10 + st.scheduler->stats().to_raid5, 0u);
  EXPECT_EQ(st.SealedCoverage(), by_hand);
  EXPECT_EQ(st.scheduler->SchemeForNewSegment(), SegmentScheme::kRaid5);
  EXPECT_EQ(ParsePolicy("manual").value(), Policy::kManual);
  EXPECT_EQ(ParsePolicy("elastic").value(), Policy::kElastic);
  EXPECT_EQ(ParsePolicy("raid6").status().code(), StatusCode::kInvalidArgument);
}

TEST(SchedulerTest, BackgroundWorkersConvertWhileWritesGoOn) {
  Stack st;
  SchedulerOptions o;
  o.policy = Policy::kRaid10;
  o.beta = 1.0;
  o.workers = 2;
  o.idle_sleep_ms = 1;
  st.scheduler = std::make_unique<Scheduler>(
      *st.array, *st.volume, [&st] { return st.Physical(); }, o);
  st.scheduler->Start();
  const uint64_t cap = st.volume->capacity_blocks();
  std::mt19937_64 rng(11);
  Block b(kBlockSize);
  // Writes go on until the workers have converted a segment, however late they are
  // scheduled; the bound only keeps a scheduler that never converts from looping forever.
  for (uint64_t i = 0; i < cap || (st.scheduler->stats().to_raid10 == 0 && i < 100 * cap); ++i) {
    FillBlockWithCompressibility(b, 50, rng);
    ASSERT_TRUE(st.volume->Write(rng() % cap, b).ok());
  }
  st.scheduler->Stop();
  ASSERT_TRUE(st.volume->Flush().ok());
  EXPECT_GT(st.scheduler->stats().to_raid10, 0u);
  auto rep = st.array->Scrub();
  ASSERT_TRUE(rep.ok());
  EXPECT_EQ(rep->unrepairable, 0u);
  EXPECT_EQ(rep->crc_mismatches + rep->parity_mismatches + rep->mirror_mismatches, 0u);
}

}  // namespace
}  // namespace eraid

namespace eraid {
namespace {

// Power cuts (all devices at once, at a random device operation) while the scheduler
// converts segments between writes: after each cut the array and the volume reopen from
// the devices alone, and every block holds its value at the last completed flush or one
// written after it.
TEST(SchedulerCrashTest, PowerCutsDuringConversionsLoseNothingFlushed) {
  const std::vector<uint64_t> seeds = TestSeeds("ERAID_SCHEDULER_CRASH_SEEDS", 8);
  uint64_t cuts = 0, conversions = 0, cuts_in_steps = 0;
  for (const uint64_t seed : seeds) {
    std::printf("seed=%llu\n", (unsigned long long)seed);
    SCOPED_TRACE("seed=" + std::to_string(seed));
    std::mt19937_64 rng(seed);
    FaultyDevices rig(4, 4096, /*in_one_power_domain=*/true);
    PowerDomain& power = rig.power;
    auto array = MakeArray(rig.devs);
    ASSERT_NE(array, nullptr);
    auto volume = std::move(LogVolume::Create(*array, VolumeOptions{})).value();
    const uint64_t span = volume->capacity_blocks() / 2;
    std::map<uint64_t, Block> durable;
    std::map<uint64_t, std::vector<Block>> since;
    SchedulerOptions so;
    so.beta = 1.0;
    // The budget is measured in device blocks: memory devices store blocks uncompressed.
    auto physical = [&] {
      PhysicalUse u;
      u.flash_bytes = BlocksToBytes(4 * 4096);
      const ArrayStats st = array->stats();
      u.used_bytes = BlocksToBytes(st.user_blocks) * 2;
      return u;
    };
    for (int cut = 0; cut < 3; ++cut) {
      // Conversions both ways, and the elastic policy's own choices (its budget here is
      // the whole flash, so it mirrors what it may and demotes what pressure asks).
      constexpr Policy kPolicies[] = {Policy::kRaid10, Policy::kRaid5, Policy::kElastic};
      so.policy = kPolicies[(cut + seed) % 3];  // (of the seed: a replay runs the same)
      auto sched = std::make_unique<Scheduler>(*array, *volume, physical, so);
      power.CrashAfterOps(500 + rng() % 6000, rng());
      Block b(kBlockSize);
      for (int op = 0; op < 4000 && !power.cut(); ++op) {
        if (op % 20 == 0) {
          auto r = sched->Step();
          if (r.ok()) conversions += *r;
          if (power.cut()) ++cuts_in_steps;
          continue;
        }
        if (op % 50 == 0) {
          if (volume->Flush().ok()) {
            for (auto& [lba, vals] : since) durable[lba] = vals.back();
            since.clear();
          }
          continue;
        }
        const uint64_t lba = rng() % span;
        FillBlockWithCompressibility(b, 50, rng);
        since[lba].push_back(b);
        if (!volume->Write(lba, b).ok()) break;
      }
      sched.reset();
      volume.reset();
      array.reset();
      rig.CrashAndRestartWith(rng);
      ++cuts;
      auto a = ElasticArray::Open(rig.devs);
      ASSERT_TRUE(a.ok()) << a.status().ToString();
      array = std::move(a).value();
      auto v = LogVolume::Open(*array, VolumeOptions{});
      ASSERT_TRUE(v.ok()) << v.status().ToString();
      volume = std::move(v).value();
      Block back(kBlockSize);
      for (uint64_t lba = 0; lba < span; ++lba) {
        ASSERT_TRUE(volume->Read(lba, back).ok()) << lba;
        auto d = durable.find(lba);
        const Block want = d == durable.end() ? Block(kBlockSize) : d->second;
        bool ok = back == want;
        auto s = since.find(lba);
        if (!ok && s != since.end())
          ok = std::find(s->second.begin(), s->second.end(), back) != s->second.end();
        ASSERT_TRUE(ok) << "lba " << lba << " holds a value it never had since its last flush";
        durable[lba] = back;
      }
      since.clear();
    }
  }
  std::printf("power_cuts=%llu of_them_inside_scheduler_steps=%llu conversions=%llu\n",
              (unsigned long long)cuts, (unsigned long long)cuts_in_steps,
              (unsigned long long)conversions);
  EXPECT_GT(conversions, 0u);
}

}  // namespace
}  // namespace eraid
