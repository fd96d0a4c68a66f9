// Bit rot (DESIGN.md, "Invariants"): random bits flipped in random stored blocks — data,
// parity, mirror copies, segment summaries, and the metadata area (superblocks, bitmap
// checkpoints, journal) — of a volume at rest after a clean shutdown. Every flip is
// caught by a CRC:
//   - flips confined to one device are all repaired (reads right, scrub repairs, a second
//     scrub finds nothing, a reopen reads right);
//   - flips spread over every device: each read returns the right data or an error, never
//     wrong data, and scrub reports what it could not repair; or, when a summary lost every
//     copy (so an older version of some LBA would surface), the volume refuses to open.
// Each run prints its seed and what the flips hit; ERAID_SEED=N replays one,
// ERAID_BIT_ROT_ROUNDS=K runs K rounds of each (default 6).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <random>

#include "common/data_gen.h"
#include "tests/support/seed.h"
#include "tests/support/volume_rig.h"

namespace eraid {
namespace {

int Rounds() {
  const char* env = std::getenv("ERAID_BIT_ROT_ROUNDS");
  return env ? std::atoi(env) : 6;
}

// What a device block is, by the array's geometry.
enum Area { kMeta, kSlot1, kSlot2, kAreas };
const char* AreaName(int a) {
  return a == kMeta    ? "metadata"
         : a == kSlot1 ? "slot-1 (data, parity, summaries)"
                       : "slot-2 (mirrors)";
}

struct Hits {
  uint64_t flips[kAreas] = {};
};

Area AreaOf(const ArrayGeometry& g, uint64_t lba) {
  if (lba < g.meta_blocks) return kMeta;
  const uint64_t within = (lba - g.meta_blocks) % g.segment_span_blocks();
  return within < uint64_t{g.rows_per_slot} * g.chunk_blocks ? kSlot1 : kSlot2;
}

// A volume written over (with GC), some segments converted to RAID10, flushed, closed.
void Populate(Rig& rig, Model& model, std::mt19937_64& rng, uint64_t span) {
  Block b(kBlockSize);
  for (uint64_t i = 0; i < span * 3; ++i) {
    const uint64_t lba = rng() % span;
    FillBlockWithCompressibility(b, 50, rng);
    ASSERT_TRUE(rig.volume->Write(lba, b).ok());
    model.Wrote(lba, b);
  }
  ASSERT_TRUE(rig.volume->Flush().ok());
  model.Flushed();
  bool odd = false;
  for (const auto& [s, gp] : rig.volume->SealedSegments()) {
    if ((odd = !odd)) {
      ASSERT_TRUE(rig.array->Convert(s, SegmentScheme::kRaid10).ok());
    }
  }
  ASSERT_TRUE(rig.volume->Flush().ok());
}

// Flips `n` random bits in random written blocks of the given devices.
void Flip(Rig& rig, std::mt19937_64& rng, const std::vector<uint32_t>& devices, int n, Hits* hits) {
  const ArrayGeometry g = rig.array->geometry();
  const uint64_t blocks = g.device_blocks_needed();
  Block stored(kBlockSize);
  const Block zeros(kBlockSize);
  for (int i = 0, tries = 0; i < n && tries < 1000 * n; ++tries) {
    const uint32_t d = devices[rng() % devices.size()];
    const uint64_t lba = rng() % blocks;
    ASSERT_TRUE(rig.media[d]->Read(Lba(lba), stored).ok());
    if (stored == zeros) continue;  // never written (or trimmed): a flip there rots nothing
    ASSERT_TRUE(
        rig.faulty[d]->FlipBit(Lba(lba), static_cast<uint32_t>(rng() % (kBlockSize * 8))).ok());
    ++hits->flips[AreaOf(g, lba)];
    ++i;
  }
}

void Report(const char* what, uint64_t seed, const Hits& h) {
  std::printf("%s seed=%llu: flips", what, (unsigned long long)seed);
  for (int a = 0; a < kAreas; ++a)
    std::printf(" %s %llu;", AreaName(a), (unsigned long long)h.flips[a]);
  std::printf("\n");
}

TEST(BitRotTest, FlipsOnOneDeviceAreAllRepaired) {
  const uint64_t base = TestSeed();
  Hits total;
  for (int round = 0; round < Rounds(); ++round) {
    const uint64_t seed = base + static_cast<uint64_t>(round);
    SCOPED_TRACE("seed=" + std::to_string(seed) + " (replay: ERAID_SEED=" + std::to_string(seed) +
                 ")");
    std::mt19937_64 rng(seed);
    Rig rig("sepbit");
    Model model;
    const uint64_t span = rig.volume->capacity_blocks() / 3;
    Populate(rig, model, rng, span);
    if (HasFatalFailure()) return;
    Hits hits;
    Flip(rig, rng, {static_cast<uint32_t>(rng() % 4)}, 40, &hits);
    Report("one device", seed, hits);
    for (int a = 0; a < kAreas; ++a) total.flips[a] += hits.flips[a];
    // Reopen first: recovery reads the metadata and every summary through the rot.
    rig.PowerCutAndReopen(seed);
    if (HasFatalFailure()) return;
    Block back(kBlockSize);
    for (uint64_t lba = 0; lba < span; ++lba) {
      ASSERT_TRUE(rig.volume->Read(lba, back).ok()) << lba;
      ASSERT_EQ(back, model.Latest(lba)) << "LBA " << lba;
    }
    auto scrub = rig.array->Scrub();
    ASSERT_TRUE(scrub.ok());
    EXPECT_EQ(scrub->unrepairable, 0u) << (scrub->findings.empty() ? "" : scrub->findings.front());
    auto again = rig.array->Scrub();
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->crc_mismatches + again->parity_mismatches + again->mirror_mismatches, 0u)
        << "everything was repaired";
    EXPECT_EQ(rig.array->stats().data_loss, 0u);
    rig.PowerCutAndReopen(seed + 1);
    if (HasFatalFailure()) return;
    for (uint64_t lba = 0; lba < span; ++lba) {
      ASSERT_TRUE(rig.volume->Read(lba, back).ok()) << lba;
      ASSERT_EQ(back, model.Latest(lba)) << "LBA " << lba << " after the repairs and a reopen";
    }
  }
  Report("one device, all rounds", base, total);
  EXPECT_GT(total.flips[kMeta] + total.flips[kSlot1] + total.flips[kSlot2], 0u);
}

TEST(BitRotTest, FlipsOnEveryDeviceNeverReturnWrongData) {
  const uint64_t base = TestSeed();
  uint64_t right = 0, errors = 0, unrepairable = 0, refused = 0;
  Hits total;
  for (int round = 0; round < Rounds(); ++round) {
    const uint64_t seed = base + 1000 + static_cast<uint64_t>(round);
    SCOPED_TRACE("seed=" + std::to_string(seed));
    std::mt19937_64 rng(seed);
    Rig rig("sepbit");
    Model model;
    const uint64_t span = rig.volume->capacity_blocks() / 3;
    Populate(rig, model, rng, span);
    if (HasFatalFailure()) return;
    // A clean shutdown (what `eraid stop` does), then the rot, then the open.
    ASSERT_TRUE(rig.array->RecordOpenFrontiers().ok());
    Hits hits;
    Flip(rig, rng, {0, 1, 2, 3}, 60, &hits);
    for (int a = 0; a < kAreas; ++a) total.flips[a] += hits.flips[a];
    // The metadata may be beyond repair on enough devices; then Open says so.
    rig.volume.reset();
    rig.array.reset();
    auto a = ElasticArray::Open(rig.devs);
    if (!a.ok()) {
      ++refused;
      std::printf("seed=%llu: the array refuses to open: %s\n", (unsigned long long)seed,
                  a.status().ToString().c_str());
      continue;
    }
    rig.array = std::move(a).value();
    auto v = LogVolume::Open(*rig.array, rig.options);
    if (!v.ok()) {
      // Two copies of a summary damaged: the volume says so rather than serve older
      // versions of what the summary described.
      EXPECT_EQ(v.status().code(), StatusCode::kDataLoss) << v.status().ToString();
      std::printf("seed=%llu: the volume refuses to open: %s\n", (unsigned long long)seed,
                  v.status().ToString().c_str());
      ++refused;
      continue;
    }
    rig.volume = std::move(v).value();
    Block back(kBlockSize);
    for (uint64_t lba = 0; lba < span; ++lba) {
      if (rig.volume->Read(lba, back).ok()) {
        ASSERT_EQ(back, model.Latest(lba)) << "LBA " << lba << ": a read that succeeds is right";
        ++right;
      } else {
        ++errors;
      }
    }
    auto scrub = rig.array->Scrub();
    ASSERT_TRUE(scrub.ok());
    unrepairable += scrub->unrepairable;
  }
  Report("every device, all rounds", base, total);
  std::printf(
      "opens refused: %llu of %d; reads: %llu right, %llu errors, 0 wrong; scrub: %llu "
      "unrepairable reported\n",
      (unsigned long long)refused, Rounds(), (unsigned long long)right, (unsigned long long)errors,
      (unsigned long long)unrepairable);
}

}  // namespace
}  // namespace eraid
