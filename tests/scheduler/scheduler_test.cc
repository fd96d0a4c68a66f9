// The conversion scheduler on a real stack (compressing drives over memory, the elastic
// array, the SepBIT volume), driven step by step with a manual clock:
//   - CLOCK hotness: a segment untouched for a whole pass of the hand is cold;
//   - data that compresses ~3:1 with poorly compressible parity (n = 3) ends fully
//     RAID10 by the autonomous rule;
//   - incompressible data: physical use ends under β, no write fails for space;
//   - a budget for ~25% RAID10 and 80/20 reads: the hot reads land on RAID10;
//   - the throttle's bytes per second hold within 10% over a measured interval;
//   - the raid5 and raid10 policies do what they say.
#include "scheduler/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "common/data_gen.h"
#include "compress/compressed_drive.h"
#include "compress/faulty_backend.h"
#include "compress/mem_backend.h"
#include "tests/test_seed.h"

namespace eraid {
namespace {

using Block = std::vector<std::byte>;

TEST(ClockHotnessTest, UntouchedForAFullPassIsCold) {
  ClockHotness h(8);
  for (uint32_t s = 0; s < 8; ++s) EXPECT_FALSE(h.IsCold(s)) << "everything starts hot";
  h.Advance(8);  // first pass: clears every bit
  for (uint32_t s = 0; s < 8; ++s) EXPECT_FALSE(h.IsCold(s));
  h.Touch(3);
  h.Advance(8);  // second pass: still clear -> cold, except 3 (second chance)
  for (uint32_t s = 0; s < 8; ++s) EXPECT_EQ(h.IsCold(s), s != 3) << s;
  h.Touch(5);
  EXPECT_FALSE(h.IsCold(5)) << "a touch makes it hot at once";
  h.Advance(8);
  EXPECT_FALSE(h.IsCold(5));
  EXPECT_TRUE(h.IsCold(3)) << "3 was not touched again";
  h.Reset(3);
  EXPECT_FALSE(h.IsCold(3));
}

// Text-like data: words from a small vocabulary. Compresses ~3:1, but the XOR of three
// such blocks (RAID5 parity) hardly compresses: the autonomous rule's case.
void FillText(std::span<std::byte> b, std::mt19937_64& rng) {
  static const char* kWords[] = {"the", "drive", "segment", "parity", "mirror", "log",
                                 "block", "write", "read", "flash", "erase", "of"};
  size_t at = 0;
  while (at < b.size()) {
    const char* w = kWords[rng() % (sizeof(kWords) / sizeof(kWords[0]))];
    for (const char* c = w; *c && at < b.size(); ++c) b[at++] = std::byte(*c);
    if (at < b.size()) b[at++] = std::byte(rng() % 7 == 0 ? '\n' : ' ');
  }
}

struct Stack {
  ManualClock clock{1};
  std::vector<std::unique_ptr<MemBackend>> flash;
  std::vector<std::unique_ptr<CompressedDrive>> drives;
  std::unique_ptr<ElasticArray> array;
  std::unique_ptr<Volume> volume;
  std::unique_ptr<Scheduler> scheduler;

  explicit Stack(uint64_t flash_blocks = 6144, double expansion = 2.0) {
    std::vector<Backend*> devs;
    DriveOptions d;
    d.erase_unit_blocks = 16;
    d.expansion = expansion;
    for (int i = 0; i < 4; ++i) {
      flash.push_back(std::make_unique<MemBackend>(flash_blocks));
      drives.push_back(std::move(CompressedDrive::Format(*flash.back(), d)).value());
      devs.push_back(drives.back().get());
    }
    ArrayOptions ao;
    ao.chunk_blocks = 4;
    ao.rows_per_slot = 4;
    array = std::move(ElasticArray::Create(devs, ao, clock)).value();
    volume = std::move(Volume::Create(*array, VolumeOptions{})).value();
  }
  PhysicalUse Physical() const { return DrivesPhysicalUse(drives); }
  void StartScheduler(SchedulerOptions o) {
    scheduler = std::make_unique<Scheduler>(*array, *volume, [this] { return Physical(); }, o, clock);
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

TEST(SchedulerTest, HotReadsLandOnRaid10UnderATightBudget) {
  Stack st;
  const uint64_t cap = st.volume->capacity_blocks();
  std::mt19937_64 rng(7);
  Block b(kBlockSize);
  for (uint64_t lba = 0; lba < cap; ++lba) {  // everything, incompressible, born RAID5
    FillBlockWithCompressibility(b, 0, rng);
    ASSERT_TRUE(st.volume->Write(lba, b).ok());
  }
  ASSERT_TRUE(st.volume->Flush().ok());
  // A budget with room for about a quarter of the data mirrored.
  const PhysicalUse u0 = st.Physical();
  const double data_bytes = double(BlocksToBytes(cap));
  SchedulerOptions o;
  o.beta = (double(u0.used_bytes) + 0.25 * data_bytes * 2.0 / 3.0) / double(u0.flash_bytes);
  st.StartScheduler(o);
  const uint64_t hot = cap / 5;
  uint64_t hot_reads = 0, hot_on_raid10 = 0;
  for (int round = 0; round < 60; ++round) {
    for (int i = 0; i < 2000; ++i) {
      const bool pick_hot = rng() % 10 < 8;
      const uint64_t lba = pick_hot ? rng() % hot : hot + rng() % (cap - hot);
      ASSERT_TRUE(st.volume->Read(lba, b).ok());
      if (round >= 40 && pick_hot) {
        ++hot_reads;
        auto s = st.volume->Locate(lba);
        if (s && st.array->segment_info(*s).scheme == SegmentScheme::kRaid10) ++hot_on_raid10;
      }
    }
    ASSERT_TRUE(st.scheduler->Step().ok());
  }
  const double share = double(hot_on_raid10) / double(hot_reads);
  std::printf("hot reads on RAID10: %.3f; coverage %.3f; beta %.3f; to_raid10=%llu to_raid5=%llu\n", share,
              st.SealedCoverage(), o.beta, (unsigned long long)st.scheduler->stats().to_raid10,
              (unsigned long long)st.scheduler->stats().to_raid5);
  EXPECT_GE(share, 0.8);
  EXPECT_LE(st.SealedCoverage(), 0.45) << "the budget must bind";
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
  std::printf("moved %llu bytes in 20 s at %llu B/s: %.3f of the rate\n", (unsigned long long)s.bytes_moved,
              (unsigned long long)o.rate_bytes_per_sec, double(s.bytes_moved) / expected);
  ASSERT_GT(s.to_raid10, 10u) << "enough work to measure";
  EXPECT_NEAR(double(s.bytes_moved), expected, 0.1 * expected);
}

TEST(SchedulerTest, PoliciesRaid5Raid10AndManual) {
  Stack st;
  const uint64_t cap = st.volume->capacity_blocks();
  std::mt19937_64 rng(5);
  Block b(kBlockSize);
  for (uint64_t lba = 0; lba < cap / 2; ++lba) {
    FillBlockWithCompressibility(b, 50, rng);
    ASSERT_TRUE(st.volume->Write(lba, b).ok());
  }
  ASSERT_TRUE(st.volume->Flush().ok());
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
  st.scheduler = std::make_unique<Scheduler>(*st.array, *st.volume, [&st] { return st.Physical(); }, o);
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
  const char* env = std::getenv("ERAID_SCHEDULER_CRASH_SEEDS");
  const int seeds = env ? std::atoi(env) : 8;
  const uint64_t base = std::random_device{}();
  uint64_t cuts = 0, conversions = 0, cuts_in_steps = 0;
  for (int k = 0; k < seeds; ++k) {
    const uint64_t seed = base + static_cast<uint64_t>(k);
    std::printf("seed=%llu\n", (unsigned long long)seed);
    SCOPED_TRACE("seed=" + std::to_string(seed));
    std::mt19937_64 rng(seed);
    PowerDomain power;
    std::vector<std::unique_ptr<MemBackend>> media;
    std::vector<std::unique_ptr<FaultyBackend>> devs;
    std::vector<Backend*> ptrs;
    for (int d = 0; d < 4; ++d) {
      media.push_back(std::make_unique<MemBackend>(4096));
      devs.push_back(std::make_unique<FaultyBackend>(*media.back()));
      devs.back()->JoinPowerDomain(&power);
      ptrs.push_back(devs.back().get());
    }
    ArrayOptions ao;
    ao.chunk_blocks = 4;
    ao.rows_per_slot = 4;
    auto array = std::move(ElasticArray::Create(ptrs, ao)).value();
    auto volume = std::move(Volume::Create(*array, VolumeOptions{})).value();
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
      so.policy = (cut + k) % 2 ? Policy::kRaid5 : Policy::kRaid10;  // conversions both ways
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
      for (auto& d : devs) {
        if (!d->crashed()) d->Crash(rng());
      }
      power.Disarm();
      for (auto& d : devs) d->Restart();
      ++cuts;
      auto a = ElasticArray::Open(ptrs);
      ASSERT_TRUE(a.ok()) << a.status().ToString();
      array = std::move(a).value();
      auto v = Volume::Open(*array, VolumeOptions{});
      ASSERT_TRUE(v.ok()) << v.status().ToString();
      volume = std::move(v).value();
      Block back(kBlockSize);
      for (uint64_t lba = 0; lba < span; ++lba) {
        ASSERT_TRUE(volume->Read(lba, back).ok()) << lba;
        auto d = durable.find(lba);
        const Block want = d == durable.end() ? Block(kBlockSize) : d->second;
        bool ok = back == want;
        auto s = since.find(lba);
        if (!ok && s != since.end()) ok = std::find(s->second.begin(), s->second.end(), back) != s->second.end();
        ASSERT_TRUE(ok) << "lba " << lba << " holds a value it never had since its last flush";
        durable[lba] = back;
      }
      since.clear();
    }
  }
  std::printf("power_cuts=%llu of_them_inside_scheduler_steps=%llu conversions=%llu\n", (unsigned long long)cuts,
              (unsigned long long)cuts_in_steps, (unsigned long long)conversions);
  EXPECT_GT(conversions, 0u);
}

}  // namespace
}  // namespace eraid
