// Device faults under load (DESIGN.md, "Invariants"): the live volume keeps serving the
// right data through a failed device (each in turn), EIO on one device's reads or writes,
// a slow device, and a torn write; a second device failing during a rebuild is reported
// as data at risk, and then every read returns the right data or an error — never wrong
// data. Every test prints its seed; ERAID_SEED=N replays one.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <random>

#include "common/data_gen.h"
#include "tests/support/seed.h"
#include "tests/support/volume_rig.h"

namespace eraid {
namespace {

uint64_t Seed() {
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu (replay: ERAID_SEED=%llu)\n", (unsigned long long)seed,
              (unsigned long long)seed);
  return seed;
}

// Random writes over the first `span` LBAs, flushes now and then; `at(i)` runs before
// write i (to inject a fault). Every write must succeed.
void Load(Rig& rig, Model& model, std::mt19937_64& rng, uint64_t span, int writes,
          const std::function<void(int)>& at = nullptr) {
  Block b(kBlockSize);
  for (int i = 0; i < writes; ++i) {
    if (at) at(i);
    const uint64_t lba = rng() % span;
    FillBlockWithCompressibility(b, 50, rng);
    Status s = rig.volume->Write(lba, b);
    ASSERT_TRUE(s.ok()) << "write " << i << " (LBA " << lba << "): " << s.ToString();
    model.Wrote(lba, b);
    if (rng() % 64 == 0) {
      ASSERT_TRUE(rig.volume->Flush().ok());
      model.Flushed();
    }
  }
}

void VerifyAll(Rig& rig, const Model& model, uint64_t span, const char* when) {
  Block back(kBlockSize);
  for (uint64_t lba = 0; lba < span; ++lba) {
    Status s = rig.volume->Read(lba, back);
    ASSERT_TRUE(s.ok()) << when << ": LBA " << lba << ": " << s.ToString();
    ASSERT_EQ(back, model.Latest(lba)) << when << ": LBA " << lba;
  }
}

// Rebuilds device d onto a fresh memory device (kept alive by the rig).
Status Rebuild(Rig& rig, uint32_t d) {
  rig.devs[d] = rig.Add();
  return rig.array->Replace(DeviceIndex(d), rig.devs[d]);
}

TEST(DeviceFaultsTest, EachDeviceFailsInTurnUnderLoadThenRebuilds) {
  const uint64_t seed = Seed();
  for (uint32_t victim = 0; victim < 4; ++victim) {
    SCOPED_TRACE("device " + std::to_string(victim));
    Rig rig("sepbit");
    std::mt19937_64 rng(seed + victim);
    Model model;
    const uint64_t span = rig.volume->capacity_blocks() / 3;
    const int fail_at = 500 + static_cast<int>(rng() % 3000);
    Load(rig, model, rng, span, 5000, [&](int i) {
      if (i == fail_at) rig.faulty[victim]->FailStop();
    });
    EXPECT_TRUE(rig.array->stats().degraded);
    EXPECT_EQ(rig.array->stats().devices[victim].state, DeviceState::kFailed);
    VerifyAll(rig, model, span, "degraded");
    ASSERT_TRUE(Rebuild(rig, victim).ok());
    EXPECT_FALSE(rig.array->stats().degraded);
    VerifyAll(rig, model, span, "rebuilt");
    auto scrub = rig.array->Scrub();
    ASSERT_TRUE(scrub.ok());
    EXPECT_EQ(scrub->parity_mismatches + scrub->mirror_mismatches + scrub->unrepairable, 0u);
    EXPECT_EQ(rig.array->stats().data_loss, 0u);
  }
}

TEST(DeviceFaultsTest, ReadAndWriteErrorsOnOneDevice) {
  const uint64_t seed = Seed();
  for (const FaultyBackend::OpMask ops : {FaultyBackend::kReads, FaultyBackend::kWrites}) {
    const bool reads = ops == FaultyBackend::kReads;
    SCOPED_TRACE(reads ? "EIO on reads" : "EIO on writes");
    Rig rig("sepbit");
    std::mt19937_64 rng(seed);
    Model model;
    const uint64_t span = rig.volume->capacity_blocks() / 3;
    Load(rig, model, rng, span, 3000);
    // EIO on the whole of device 1 for one kind of operation, from now on.
    rig.faulty[1]->FailRange(Lba(0), 4096, ops);
    if (reads) {
      VerifyAll(rig, model, span, "reads failing on device 1");
    } else {
      Load(rig, model, rng, span, 2000);
      VerifyAll(rig, model, span, "writes failing on device 1");
    }
    const ArrayStats st = rig.array->stats();
    EXPECT_GT(st.devices[1].errors, 0u) << "the errors were seen";
    EXPECT_EQ(st.devices[1].state, DeviceState::kFailed) << "a device that returns EIO is failed";
    EXPECT_EQ(st.data_loss, 0u);
    Load(rig, model, rng, span, 1000);  // and the volume goes on
    VerifyAll(rig, model, span, "after");
  }
}

TEST(DeviceFaultsTest, ASlowDeviceSlowsButLosesNothing) {
  const uint64_t seed = Seed();
  Rig rig("sepbit");
  std::mt19937_64 rng(seed);
  Model model;
  const uint64_t span = rig.volume->capacity_blocks() / 4;
  rig.faulty[2]->SetLatency(200'000);  // 0.2 ms per operation on one device
  Load(rig, model, rng, span, 1500);
  VerifyAll(rig, model, span, "slow device");
  const ArrayStats st = rig.array->stats();
  EXPECT_FALSE(st.degraded) << "slow is not failed";
  EXPECT_EQ(st.devices[2].errors, 0u);
}

TEST(DeviceFaultsTest, ATornWriteFailsTheDeviceAndAPowerCutLosesNothingFlushed) {
  const uint64_t seed = Seed();
  Rig rig("sepbit");
  std::mt19937_64 rng(seed);
  Model model;
  const uint64_t span = rig.volume->capacity_blocks() / 4;
  const int tear_at = 200 + static_cast<int>(rng() % 1500);
  const auto victim = static_cast<uint32_t>(rng() % 4);
  Load(rig, model, rng, span, 2000, [&](int i) {
    if (i == tear_at) rig.faulty[victim]->TearNextWrite(static_cast<uint32_t>(rng() % 4));
  });
  EXPECT_EQ(rig.array->stats().devices[victim].state, DeviceState::kFailed)
      << "a torn write fails its device";
  VerifyAll(rig, model, span, "after the torn write");
  // Power cut (unflushed cache contents survive at random), reopen: flushed blocks intact.
  rig.faulty[victim]->ClearFaults();
  rig.PowerCutAndReopen(seed);
  Block back(kBlockSize);
  for (uint64_t lba = 0; lba < span; ++lba) {
    ASSERT_TRUE(rig.volume->Read(lba, back).ok()) << lba;
    ASSERT_TRUE(model.Allowed(lba, back)) << "LBA " << lba << " after the power cut";
  }
}

TEST(DeviceFaultsTest, ASecondFailureDuringRebuildIsDataAtRiskNeverWrongData) {
  const uint64_t seed = Seed();
  Rig rig("sepbit");
  std::mt19937_64 rng(seed);
  Model model;
  const uint64_t span = rig.volume->capacity_blocks() / 2;
  Load(rig, model, rng, span, 6000);
  ASSERT_TRUE(rig.volume->Flush().ok());
  model.Flushed();
  rig.faulty[0]->FailStop();
  ASSERT_TRUE(rig.array->FailDevice(DeviceIndex(0)).ok());
  ASSERT_TRUE(rig.array->stats().degraded);
  Block back(kBlockSize);
  // Device 2 dies part-way through the rebuild of device 0.
  rig.faulty[2]->CrashAfterOps(10 + rng() % 60);  // from its n-th operation on, nothing works
  Status rebuilt = Rebuild(rig, 0);
  EXPECT_FALSE(rebuilt.ok()) << "the rebuild cannot complete";
  const ArrayStats st = rig.array->stats();
  EXPECT_TRUE(st.data_at_risk) << "two devices down in a one-redundancy array is reported";
  uint64_t right = 0, errors = 0;
  for (uint64_t lba = 0; lba < span; ++lba) {
    Status s = rig.volume->Read(lba, back);
    if (s.ok()) {
      ASSERT_EQ(back, model.Latest(lba)) << "LBA " << lba << ": a read that succeeds is right";
      ++right;
    } else {
      ++errors;
    }
  }
  std::printf("after the second failure: %llu LBAs read right, %llu errors, 0 wrong\n",
              (unsigned long long)right, (unsigned long long)errors);
  EXPECT_GT(errors, 0u) << "with two devices gone some data cannot be read";
  EXPECT_GT(right, 0u) << "what the rebuilt part and the survivors hold still reads";
}

}  // namespace
}  // namespace eraid
