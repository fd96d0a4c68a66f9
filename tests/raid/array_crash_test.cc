// Crash consistency of the elastic array. All devices share one power domain that cuts
// after a random number of device operations (seeded), landing inside conversions both
// ways, flushes, seals, frees and bitmap journal writes; each device's volatile cache
// loses or keeps (seeded) what was not flushed. Now and then a device fails and is
// rebuilt onto a fresh one, so cuts land inside rebuilds too (a device caught mid-rebuild
// comes back failed, and is rebuilt again after the reopen). After every reopen:
//   - every block acknowledged by a completed Flush() reads back
//     intact, in a segment whose scheme is the old or the new one of any conversion;
//   - scrub finds no disagreement between data and redundancy, and nothing unrepairable;
//   - with any one device then failed, everything still reads back.
// ERAID_SEED=N replays one seed; ERAID_RAID_CRASH_SEEDS=K runs K (default 200).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "common/data_gen.h"
#include "compress/faulty_backend.h"
#include "compress/mem_backend.h"
#include "raid/array.h"
#include "tests/support/seed.h"
#include "tests/support/stack.h"

namespace eraid {
namespace {

using Block = std::vector<std::byte>;
using Key = std::pair<uint32_t, uint32_t>;

struct Totals {
  uint64_t crashes = 0, in_conversion = 0, verified = 0, converted_then_crashed = 0;
  uint64_t rebuilds = 0, in_rebuild = 0;
  uint64_t crc_loads = 0;  // sealed segments' CRCs read back from their summaries
};

void RunSeed(uint64_t seed, Totals* totals) {
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const auto devices = static_cast<uint32_t>(3 + rng() % 4);
  FaultyDevices rig(devices, 4096, /*in_one_power_domain=*/true);
  std::vector<Backend*>& devs = rig.devs;
  PowerDomain& power = rig.power;
  auto array = MakeArray(devs);
  ASSERT_NE(array, nullptr);
  // Odd seeds: a CRC cache of one segment's CRCs, so sealed segments' come and go (read
  // back from their summaries) under conversions, rebuilds and power cuts.
  const uint64_t crc_cache = seed % 2 ? array->geometry().segment_positions() * 4 : 0;
  if (crc_cache) array->set_crc_cache_bytes(crc_cache);
  auto count_loads = [&] {
    if (array) totals->crc_loads += array->stats().crc_cache_loads;
  };
  auto fresh_device = [&]() -> Backend* { return rig.Add(); };

  std::map<Key, Block> durable;  // acknowledged by a flush (or a seal)
  std::map<Key, Block> pending;  // appended since the last completed flush
  std::set<uint32_t> open, sealed;
  std::map<uint32_t, std::set<SegmentScheme>> allowed;  // schemes a segment may have after a crash
  Block b(kBlockSize);

  auto restart = [&]() {
    count_loads();
    array.reset();
    rig.CrashAndRestartWith(rng);
    auto reopened = ElasticArray::Open(devs);
    ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
    array = std::move(reopened).value();
    if (crc_cache) array->set_crc_cache_bytes(crc_cache);
    Status inv = array->CheckInvariants();
    ASSERT_TRUE(inv.ok()) << "after recovery: " << inv.ToString();
    ++totals->crashes;
    Block back(kBlockSize);
    for (const auto& [key, data] : durable) {
      Status s = array->Read(SegmentId(key.first), key.second, back);
      ASSERT_TRUE(s.ok()) << "segment " << key.first << " pos " << key.second << ": "
                          << s.ToString();
      ASSERT_EQ(back, data) << "segment " << key.first << " pos " << key.second;
      ++totals->verified;
    }
    for (const auto& [seg, schemes] : allowed) {
      ASSERT_TRUE(schemes.count(array->segment_info(SegmentId(seg)).scheme)) << "segment " << seg;
    }
    auto scrub = array->Scrub();
    ASSERT_TRUE(scrub.ok());
    EXPECT_EQ(scrub->parity_mismatches + scrub->mirror_mismatches, 0u)
        << (scrub->findings.empty() ? "" : scrub->findings.front());
    EXPECT_EQ(scrub->unrepairable, 0u);
    if (scrub->unrepairable > 0 && std::getenv("ERAID_DEBUG")) {
      for (uint32_t seg = 0; seg < array->geometry().segments; ++seg) {
        SegmentInfo info = array->segment_info(SegmentId(seg));
        for (uint32_t pos = 0; pos < info.frontier; ++pos) {
          if (!array->Read(SegmentId(seg), pos, back).ok()) {
            std::printf(
                "lost: segment %u (%s, frontier %u, was open %d) pos %u durable %d pending %d\n",
                seg, raid_format::SchemeName(info.scheme), info.frontier, (int)open.count(seg), pos,
                (int)durable.count({seg, pos}), (int)pending.count({seg, pos}));
          }
        }
      }
    }
    // Open segments were completed and sealed by recovery, or are free again (no flush
    // made their allocation durable: then nothing in them was acknowledged); unflushed
    // blocks may be gone.
    for (uint32_t s : open) sealed.insert(s);
    open.clear();
    std::erase_if(sealed, [&](uint32_t s) {
      if (array->segment_info(SegmentId(s)).scheme != SegmentScheme::kFree) return false;
      EXPECT_FALSE(std::any_of(durable.begin(), durable.end(),
                               [&](const auto& kv) { return kv.first.first == s; }))
          << "segment " << s << " came back free with acknowledged blocks";
      allowed.erase(s);
      return true;
    });
    pending.clear();
    for (auto& [seg, schemes] : allowed) schemes = {array->segment_info(SegmentId(seg)).scheme};
    // A device caught mid-rebuild is failed now: rebuild it again (no power cut armed).
    for (uint32_t d = 0; d < devices; ++d) {
      if (array->stats().devices[d].state == DeviceState::kOk) continue;
      devs[d] = fresh_device();
      Status st = array->Replace(DeviceIndex(d), devs[d]);
      ASSERT_TRUE(st.ok()) << "rebuilding device " << d << " after the reopen: " << st.ToString();
    }
  };

  for (int round = 0; round < 4; ++round) {
    power.CrashAfterOps(1 + rng() % 300, rng());
    bool converting = false, rebuilding = false;
    for (int op = 0; op < 200 && !power.cut(); ++op) {
      Status inv = array->CheckInvariants();
      ASSERT_TRUE(inv.ok()) << "before op " << op << ": " << inv.ToString();
      uint64_t r = rng() % 100;
      if (r < 50 || (open.empty() && sealed.empty())) {
        if (open.size() < 3 && (open.empty() || rng() % 8 == 0)) {
          auto scheme = rng() % 2 ? SegmentScheme::kRaid5 : SegmentScheme::kRaid10;
          auto s = array->AllocateSegment(scheme);
          if (std::getenv("ERAID_DEBUG"))
            std::printf("allocate %s: %s\n", raid_format::SchemeName(scheme),
                        s.ok() ? std::to_string(s->value).c_str() : s.status().ToString().c_str());
          if (!s.ok()) break;  // power cut, or full
          open.insert(s->value);
          allowed[s->value] = {scheme, SegmentScheme::kFree};  // free again if no flush followed
          continue;
        }
        uint32_t s = *std::next(open.begin(), static_cast<long>(rng() % open.size()));
        for (int i = 0; i < 1 + static_cast<int>(rng() % 12); ++i) {
          if (array->Remaining(SegmentId(s)) == 0) break;
          FillBlockWithCompressibility(b, 50, rng);
          auto pos = array->Append(SegmentId(s), b, s, 0);
          if (!pos.ok()) break;
          pending[{s, *pos}] = b;
        }
      } else if (r < 65) {
        if (array->Flush().ok()) {
          if (std::getenv("ERAID_DEBUG")) std::printf("flush\n");
          durable.merge(pending);
          pending.clear();
          for (auto& [seg, schemes] : allowed) schemes.erase(SegmentScheme::kFree);
        }
      } else if (r < 75 && !open.empty()) {
        uint32_t s = *open.begin();
        if (array->Seal(SegmentId(s)).ok()) {  // not a flush: the seal is durable after two
          if (std::getenv("ERAID_DEBUG")) std::printf("seal %u\n", s);
          open.erase(s);
          sealed.insert(s);
        }
      } else if (r < 95 && !sealed.empty()) {
        uint32_t s = *std::next(sealed.begin(), static_cast<long>(rng() % sealed.size()));
        auto from = array->segment_info(SegmentId(s)).scheme;
        auto to = from == SegmentScheme::kRaid5 ? SegmentScheme::kRaid10 : SegmentScheme::kRaid5;
        const bool may_be_free =
            allowed[s].count(SegmentScheme::kFree) > 0;  // until the conversion's flush
        allowed[s] = {from, to};
        if (may_be_free) allowed[s].insert(SegmentScheme::kFree);
        converting = true;
        Status st = array->Convert(SegmentId(s), to);
        if (std::getenv("ERAID_DEBUG"))
          std::printf("convert %u to %s: %s\n", s, raid_format::SchemeName(to),
                      st.ToString().c_str());
        if (st.ok()) {
          allowed[s] = {to};
          converting = false;
        } else {
          ++totals->converted_then_crashed;
        }
      } else if (r < 97 && !array->stats().degraded) {
        // A device fails and is rebuilt onto a fresh one (the old stays in devs until the
        // rebuild completes, as `eraid replace` renames the new file into place only then).
        const auto d = static_cast<uint32_t>(rng() % devices);
        if (!array->FailDevice(DeviceIndex(d)).ok()) break;
        Backend* fresh = fresh_device();
        rebuilding = true;
        Status st = array->Replace(DeviceIndex(d), fresh);
        if (std::getenv("ERAID_DEBUG")) std::printf("rebuild %u: %s\n", d, st.ToString().c_str());
        if (!st.ok()) break;
        devs[d] = fresh;
        rebuilding = false;
        ++totals->rebuilds;
      } else if (!sealed.empty() && sealed.size() > 4) {
        uint32_t s = *sealed.begin();
        // From here the segment may be gone: stop expecting its blocks.
        std::erase_if(durable, [&](const auto& kv) { return kv.first.first == s; });
        std::erase_if(pending, [&](const auto& kv) { return kv.first.first == s; });
        allowed.erase(s);
        sealed.erase(s);
        Status fs = array->Free(SegmentId(s));
        if (std::getenv("ERAID_DEBUG")) std::printf("free %u: %s\n", s, fs.ToString().c_str());
        if (!fs.ok()) break;
      }
    }
    if (converting) ++totals->in_conversion;
    if (rebuilding) ++totals->in_rebuild;
    if (std::getenv("ERAID_DEBUG")) std::printf("-- power cut, restart\n");
    restart();
    if (::testing::Test::HasFatalFailure()) return;
  }
  // Finally the redundancy itself: lose a device and read everything.
  uint32_t victim = static_cast<uint32_t>(rng() % devices);
  ASSERT_TRUE(array->FailDevice(DeviceIndex(victim)).ok());
  Block back(kBlockSize);
  for (const auto& [key, data] : durable) {
    ASSERT_TRUE(array->Read(SegmentId(key.first), key.second, back).ok())
        << "device " << victim << " down";
    ASSERT_EQ(back, data);
  }
  count_loads();
}

TEST(ArrayCrashTest, PowerCutsKeepFlushedDataAndRedundancy) {
  const std::vector<uint64_t> seeds = TestSeeds("ERAID_RAID_CRASH_SEEDS", 200);
  Totals totals;
  for (uint64_t seed : seeds) {
    std::printf("seed=%llu\n", (unsigned long long)seed);
    RunSeed(seed, &totals);
    if (HasFailure()) {
      std::printf("FAILED at seed=%llu (replay: ERAID_SEED=%llu)\n", (unsigned long long)seed,
                  (unsigned long long)seed);
      return;
    }
  }
  std::printf(
      "crashes=%llu (inside a conversion: %llu, conversions interrupted: %llu, inside a rebuild: "
      "%llu; "
      "rebuilds completed: %llu) verified_blocks=%llu crc_cache_loads=%llu\n",
      (unsigned long long)totals.crashes, (unsigned long long)totals.in_conversion,
      (unsigned long long)totals.converted_then_crashed, (unsigned long long)totals.in_rebuild,
      (unsigned long long)totals.rebuilds, (unsigned long long)totals.verified,
      (unsigned long long)totals.crc_loads);
  if (seeds.size() >= 10) {
    EXPECT_GT(totals.crc_loads, 0u) << "odd seeds' small CRC cache must read CRCs back";
    EXPECT_GT(totals.in_conversion, 0u) << "some power cuts must land in conversions";
    EXPECT_GT(totals.in_rebuild, 0u) << "some power cuts must land in rebuilds";
  }
}

// Flush() runs its device flush without the array lock: while one thread appends to
// its segments and flushes, another does the same with seals and frees of its own, then
// the power is cut (each device keeps or drops, seeded, what no flush covered). Every
// block appended before a Flush() that then completed reads back after the restart, and
// so does every block of a sealed segment whose seal a later flush covered. In odd rounds
// full rows are left to each appender's RowBatch, written by a third thread now and then
// and by the appenders only sometimes: a flush must write or wait for the
// rows queued before it, and a read of a queued row's block must find it. Every fourth
// round runs the array's row writer (StartRowWriter) as well, as a served array does.
TEST(ArrayCrashTest, FlushesBesideAppendsKeepWhatTheyCovered) {
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu\n", (unsigned long long)seed);
  for (uint64_t round = 0; round < 8; ++round) {
    SCOPED_TRACE("seed=" + std::to_string(seed + round));
    FaultyDevices rig(4, 8192);
    std::vector<Backend*>& devs = rig.devs;
    auto array = MakeArray(devs);
    ASSERT_NE(array, nullptr);
    const bool deferred = round % 2 == 1;
    const bool row_writer_thread = round % 4 == 3;
    if (row_writer_thread) array->StartRowWriter();
    std::atomic<bool> appending{true};
    std::thread row_writer([&] {
      while (deferred && appending.load()) {
        RowBatch(*array).Write();
        std::this_thread::sleep_for(std::chrono::microseconds(300));
      }
    });
    std::map<Key, Block> covered[2];
    auto worker = [&](int t) {
      std::mt19937_64 rng(seed + round * 2 + t);
      std::map<Key, Block> pending;
      std::vector<uint32_t> mine;  // sealed segments, oldest first
      RowBatch batch(*array);
      RowBatch* rows = deferred ? &batch : nullptr;
      for (int op = 0; op < 60; ++op) {
        auto s = array->AllocateSegment(t ? SegmentScheme::kRaid10 : SegmentScheme::kRaid5);
        if (!s.ok()) break;
        const int n = 1 + static_cast<int>(rng() % 40);
        for (int b = 0; b < n && array->Remaining(*s) > 0; ++b) {
          Block data(kBlockSize);
          FillBlockWithCompressibility(data, 50, rng);
          auto pos = array->Append(*s, data, 0, 0, rows);
          ASSERT_TRUE(pos.ok()) << pos.status().ToString();
          pending[{s->value, *pos}] = data;
          if (deferred && rng() % 3 == 0) batch.Write();
          if (rng() % 4 == 0) {  // an earlier block of this segment, maybe in a queued row
            const uint32_t p = static_cast<uint32_t>(rng() % (*pos + 1));
            if (auto it = pending.find({s->value, p}); it != pending.end()) {
              Block back(kBlockSize);
              ASSERT_TRUE(array->Read(*s, p, back).ok());
              ASSERT_EQ(back, it->second) << "segment " << s->value << " pos " << p;
            }
          }
          if (rng() % 8 == 0) {
            std::map<Key, Block> before = pending;  // appended before this flush began
            ASSERT_TRUE(array->Flush().ok());
            covered[t].merge(before);
            pending.clear();
          }
        }
        ASSERT_TRUE(array->Seal(*s, rows).ok());
        mine.push_back(s->value);
        if (mine.size() > 3) {  // free the oldest; nothing of it is expected any more
          const uint32_t old = mine.front();
          mine.erase(mine.begin());
          std::erase_if(covered[t], [&](const auto& kv) { return kv.first.first == old; });
          std::erase_if(pending, [&](const auto& kv) { return kv.first.first == old; });
          ASSERT_TRUE(array->Free(SegmentId(old)).ok());
        }
      }
      // The cut finds a segment open, its full rows perhaps still queued when the flush
      // that must cover them began.
      if (auto s = array->AllocateSegment(SegmentScheme::kRaid5); s.ok()) {
        for (int b = 0; b < 30 && array->Remaining(*s) > 0; ++b) {
          Block data(kBlockSize);
          FillBlockWithCompressibility(data, 50, rng);
          auto pos = array->Append(*s, data, 0, 0, rows);
          ASSERT_TRUE(pos.ok()) << pos.status().ToString();
          pending[{s->value, *pos}] = data;
        }
      }
      std::map<Key, Block> before = pending;
      ASSERT_TRUE(array->Flush().ok());
      covered[t].merge(before);
    };
    std::thread a(worker, 0), b(worker, 1);
    a.join();
    b.join();
    appending = false;
    row_writer.join();
    if (::testing::Test::HasFatalFailure()) return;
    // The row writer's own writes are let finish first (a device's power cut is not made
    // to race them); in the other deferred rounds rows may still be queued at the cut.
    if (row_writer_thread) RowBatch(*array).WriteAndWait();
    for (auto& f : rig.faulty) f->Crash(seed + round);  // with rows maybe still queued
    array.reset();
    for (auto& f : rig.faulty) f->Restart();
    auto reopened = ElasticArray::Open(devs);
    ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
    array = std::move(reopened).value();
    Block back(kBlockSize);
    for (int t = 0; t < 2; ++t) {
      for (const auto& [key, data] : covered[t]) {
        Status st = array->Read(SegmentId(key.first), key.second, back);
        ASSERT_TRUE(st.ok()) << "segment " << key.first << " pos " << key.second << ": "
                             << st.ToString();
        ASSERT_EQ(back, data) << "segment " << key.first << " pos " << key.second;
      }
    }
    auto scrub = array->Scrub();
    ASSERT_TRUE(scrub.ok());
    EXPECT_EQ(scrub->parity_mismatches + scrub->mirror_mismatches + scrub->unrepairable, 0u)
        << (scrub->findings.empty() ? "" : scrub->findings.front());
  }
}

}  // namespace
}  // namespace eraid
