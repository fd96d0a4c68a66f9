// Crash consistency of the emulated drive: power cuts at random points (inside writes,
// GC, checkpoints and flushes; seeded), with random subsets of unflushed blocks reaching
// the media. After every reopen, each LBA holds its last flushed value, or — if it was
// written or trimmed since the last completed flush — one of the values it had since.
//
// Seeds: ERAID_SEED=N replays one seed; ERAID_CRASH_SEEDS=K runs K seeds (default 24).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <optional>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/crc32c.h"
#include "common/data_gen.h"
#include "compress/compressed_drive.h"
#include "compress/faulty_backend.h"
#include "compress/mem_backend.h"
#include "tests/support/seed.h"

namespace eraid {
namespace {

// Value identity: CRC32C of the block plus its first 8 bytes; 0 stands for zeros.
uint64_t Fingerprint(std::span<const std::byte> block) {
  bool zero =
      std::all_of(block.begin(), block.end(), [](std::byte b) { return b == std::byte{0}; });
  if (zero) return 0;
  uint64_t head = 0;
  std::memcpy(&head, block.data(), 8);
  return (uint64_t{Crc32c(block)} << 32) ^ head ^ 1;
}

struct LbaState {
  uint64_t durable = 0;         // value as of the last completed flush
  std::vector<uint64_t> since;  // values it took after that flush
};

struct CrashStats {
  uint64_t crashes = 0, verified_blocks = 0, unflushed_lost = 0;
  uint64_t gc_erased_eus = 0, checkpoints = 0;  // work done before the power cuts
  uint64_t background_erased_eus = 0;           // of which by the eraser thread
};

void RunSeed(uint64_t seed, CrashStats* totals) {
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  MemBackend media(4096);
  FaultyBackend flash(media);
  DriveOptions o;
  o.erase_unit_blocks = 16;
  o.max_flashalloc_ranges = 4;
  o.expansion = 2.0;
  o.checkpoint_every = 4;  // checkpoints often, so crashes land in them too
  // Odd seeds run with the write cache: its background thread takes the power cut.
  o.write_cache_blocks = seed % 2 ? 32 : 0;
  // Every fourth seed (and its cached neighbour) writes an open EU only when it fills or
  // at a flush, as a served array's drives do.
  if (seed % 4 >= 2) o.write_batch_blocks = std::numeric_limits<uint32_t>::max();
  // Half the seeds run the drive's eraser thread, as a served array's drives do: the power
  // cut also lands inside its flushes and erases, which run without the drive's lock.
  if (seed % 8 >= 4) o.background_free_eus = 12;
  auto drive = std::move(CompressedDrive::Format(flash, o)).value();
  const uint64_t span = 2500;
  std::unordered_map<uint64_t, LbaState> model;
  std::vector<std::byte> buf(BlocksToBytes(8));

  auto recover = [&]() {
    drive.reset();  // power is gone: no Close()
    flash.Restart();
    auto reopened = CompressedDrive::Open(flash, o);
    ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
    drive = std::move(reopened).value();
    ++totals->crashes;
    Status inv = drive->CheckInvariants();  // what recovery rebuilt adds up
    ASSERT_TRUE(inv.ok()) << inv.ToString();
    std::vector<std::byte> block(kBlockSize);
    for (uint64_t lba = 0; lba < span; ++lba) {
      Status s = drive->Read(Lba(lba), block);
      ASSERT_TRUE(s.ok()) << "lba " << lba << ": " << s.ToString();
      uint64_t got = Fingerprint(block);
      LbaState& st = model[lba];
      bool allowed =
          got == st.durable || std::find(st.since.begin(), st.since.end(), got) != st.since.end();
      ASSERT_TRUE(allowed) << "lba " << lba << " holds a value it never had since its last flush"
                           << (st.since.empty() ? " (it was flushed and not touched since)" : "");
      if (got != (st.since.empty() ? st.durable : st.since.back())) ++totals->unflushed_lost;
      st = LbaState{got, {}};
      ++totals->verified_blocks;
    }
  };

  for (int crash = 0; crash < 3; ++crash) {
    // Arm a power cut somewhere in the next few thousand flash operations.
    std::optional<uint64_t> subset_seed;
    if (rng() % 2) subset_seed = rng();
    flash.CrashAfterOps(1 + rng() % 20000, subset_seed);
    for (int op = 0; op < 20000 && !flash.crashed(); ++op) {
      uint64_t lba = rng() % span;
      uint64_t r = rng() % 100;
      if (r < 80) {
        uint64_t n = std::min<uint64_t>(1 + rng() % 8, span - lba);
        uint32_t pct = static_cast<uint32_t>(rng() % 100);
        for (uint64_t b = 0; b < n; ++b) {
          FillBlockWithCompressibility(std::span(buf).subspan(BlocksToBytes(b), kBlockSize), pct,
                                       rng);
          model[lba + b].since.push_back(
              Fingerprint(std::span(buf).subspan(BlocksToBytes(b), kBlockSize)));
        }
        Status s = drive->Write(Lba(lba), std::span(buf).first(BlocksToBytes(n)));
        ASSERT_TRUE(s.ok() || s.code() == StatusCode::kAborted) << s.ToString();
      } else if (r < 90) {
        uint64_t n = std::min<uint64_t>(1 + rng() % 64, span - lba);
        for (uint64_t b = 0; b < n; ++b) model[lba + b].since.push_back(0);
        Status s = drive->Trim(Lba(lba), n);
        ASSERT_TRUE(s.ok() || s.code() == StatusCode::kAborted) << s.ToString();
      } else if (r < 93) {
        (void)drive->FlashAlloc(Lba(lba), std::min<uint64_t>(64, span - lba));
      } else if (r < 94) {
        // A clean close (a checkpoint that spares the next open its scan), then the same
        // drive goes on, or a clean reopen: the writes after it must not hide behind it.
        Status s = drive->Close();
        if (s.ok()) {
          for (auto& [l, st] : model) {
            if (!st.since.empty()) st = LbaState{st.since.back(), {}};
          }
          if (rng() % 2 && !flash.crashed()) {
            drive.reset();
            auto reopened = CompressedDrive::Open(flash, o);
            if (!reopened.ok()) {
              ASSERT_TRUE(flash.crashed()) << reopened.status().ToString();
              break;  // the power cut came during the open: recovered below
            }
            drive = std::move(reopened).value();
          }
        } else {
          ASSERT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
        }
      } else {
        Status s = drive->Flush();
        if (s.ok()) {
          for (auto& [l, st] : model) {
            if (!st.since.empty()) st = LbaState{st.since.back(), {}};
          }
        } else {
          ASSERT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
        }
      }
    }
    if (!flash.crashed()) flash.Crash(subset_seed);
    if (drive) {  // (none if the power cut came during a clean reopen)
      totals->gc_erased_eus += drive->stats().gc_erased_eus;
      totals->background_erased_eus += drive->stats().background_erased_eus;
      totals->checkpoints += drive->stats().checkpoints;
    }
    recover();
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// Invariant 2 (docs/compressed-drive.md): an erase unit is erased only once whatever
// superseded its records is durable. Its worst case is a power cut that keeps the
// eraser's erase marks (zeroed first pages) and loses every write not flushed: each
// block must then still hold its flushed value or the newer one, never what is left of
// an erased record. (The random cuts above rarely land in that order.)
TEST(DriveCrashTest, ErasesWaitForTheWritesThatSupersededTheirRecords) {
  const uint64_t seed = TestSeeds("ERAID_CRASH_SEEDS", 1).front();
  std::printf("seed=%llu\n", (unsigned long long)seed);
  std::mt19937_64 rng(seed);
  MemBackend media(4096);
  FaultyBackend flash(media);
  DriveOptions o;
  o.erase_unit_blocks = 16;
  o.expansion = 2.0;
  o.background_free_eus = 4096;  // the eraser runs at every erase unit opened
  auto drive = std::move(CompressedDrive::Format(flash, o)).value();
  const uint64_t span = 600;
  std::vector<uint64_t> flushed(span), newer(span);
  std::vector<std::byte> block(kBlockSize);
  auto write_all = [&](std::vector<uint64_t>* values) {
    for (uint64_t lba = 0; lba < span; ++lba) {
      FillBlockWithCompressibility(block, 50, rng);
      (*values)[lba] = Fingerprint(block);
      ASSERT_TRUE(drive->Write(Lba(lba), block).ok());
    }
  };
  write_all(&flushed);
  ASSERT_TRUE(drive->Flush().ok());
  // Every block again, not flushed: the first values' erase units become garbage, and
  // the eraser (woken as the new ones open) erases them.
  write_all(&newer);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (drive->stats().background_erased_eus == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  const uint64_t erased = drive->stats().background_erased_eus;
  ASSERT_GT(erased, 0u) << "the eraser erased nothing: the test tests nothing";
  flash.CrashKeeping([](Lba, std::span<const std::byte> data) {
    return !data.empty() &&
           std::all_of(data.begin(), data.end(), [](std::byte b) { return b == std::byte{0}; });
  });
  drive.reset();
  flash.Restart();
  auto reopened = CompressedDrive::Open(flash, o);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  drive = std::move(reopened).value();
  uint64_t kept_newer = 0;
  for (uint64_t lba = 0; lba < span; ++lba) {
    Status s = drive->Read(Lba(lba), block);
    ASSERT_TRUE(s.ok()) << "lba " << lba << ": " << s.ToString();
    const uint64_t got = Fingerprint(block);
    ASSERT_TRUE(got == flushed[lba] || got == newer[lba]) << "lba " << lba << " lost to an erase";
    kept_newer += got == newer[lba];
  }
  std::printf(
      "%llu erase units erased before the cut; %llu of %llu blocks kept their newer value\n",
      (unsigned long long)erased, (unsigned long long)kept_newer, (unsigned long long)span);
}

TEST(DriveCrashTest, FlushedWritesSurviveRandomPowerCuts) {
  const std::vector<uint64_t> seeds = TestSeeds("ERAID_CRASH_SEEDS", 24);
  CrashStats totals;
  for (uint64_t seed : seeds) {
    std::printf("seed=%llu\n", (unsigned long long)seed);
    std::fflush(stdout);  // shown even if the process aborts
    RunSeed(seed, &totals);
    if (HasFatalFailure()) {
      std::printf("FAILED at seed=%llu (replay: ERAID_SEED=%llu)\n", (unsigned long long)seed,
                  (unsigned long long)seed);
      return;
    }
  }
  std::printf(
      "crashes=%llu verified_blocks=%llu unflushed_values_lost=%llu gc_erased_eus=%llu "
      "(background %llu) checkpoints=%llu\n",
      (unsigned long long)totals.crashes, (unsigned long long)totals.verified_blocks,
      (unsigned long long)totals.unflushed_lost, (unsigned long long)totals.gc_erased_eus,
      (unsigned long long)totals.background_erased_eus, (unsigned long long)totals.checkpoints);
  EXPECT_EQ(totals.crashes, 3 * seeds.size());
  if (seeds.size() > 4) {
    EXPECT_GT(totals.gc_erased_eus, 0u) << "power cuts must also land after device GC has run";
    EXPECT_GT(totals.background_erased_eus, 0u) << "and after the eraser thread has run";
    EXPECT_GT(totals.unflushed_lost, 0u) << "the crash model must actually drop unflushed data";
  }
}

}  // namespace
}  // namespace eraid
