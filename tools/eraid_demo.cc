// eraid-demo: the whole stack as it stands, on file-backed emulated drives in a temporary
// folder: a SepBIT log volume over an elastic array of compressing drives. It runs random
// 4 KiB writes and reads with verification, fails a drive mid-run and keeps going
// degraded, rebuilds onto a fresh drive with a progress bar, scrubs, verifies every
// block, and prints a summary. (Serving it to fio over NBD is the next layer's job.)
#include <stdlib.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <random>

#include "common/crc32c.h"
#include "common/data_gen.h"
#include "compress/compressed_drive.h"
#include "compress/file_backend.h"
#include "log/volume.h"

namespace po = boost::program_options;
using namespace eraid;  // NOLINT: a tool

namespace {

struct Drive {
  std::unique_ptr<FileBackend> flash;
  std::unique_ptr<CompressedDrive> drive;
};

Result<Drive> MakeDrive(const std::string& path, uint64_t flash_mib) {
  FileBackendOptions fo;
  fo.create = true;
  fo.size_bytes = flash_mib << 20;
  ERAID_ASSIGN_OR_RETURN(auto flash, FileBackend::Open(path, fo));
  DriveOptions o;  // 2x expansion, zstd -3, FlashAlloc on
  ERAID_ASSIGN_OR_RETURN(auto drive, CompressedDrive::Format(*flash, o));
  return Drive{std::move(flash), std::move(drive)};
}

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

int Fail(const std::string& what, const Status& s) {
  std::fprintf(stderr, "eraid-demo: %s: %s\n", what.c_str(), s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t flash_mib = 256, ops = 100000;
  uint32_t compress_pct = 50;
  std::string dir;
  bool keep = false, quick = false;
  po::options_description desc("eraid-demo [options]\noptions");
  desc.add_options()("help,h", "this text")
      ("quick", po::bool_switch(&quick), "a small run (64 MiB drives, 40k operations)")
      ("flash-mib", po::value(&flash_mib)->default_value(flash_mib), "flash per drive (4 drives)")
      ("ops", po::value(&ops)->default_value(ops), "operations per phase")
      ("compressibility", po::value(&compress_pct)->default_value(compress_pct), "% (fio buffer_compress_percentage)")
      ("dir", po::value(&dir), "where the drive files go (default: a new temporary folder)")
      ("keep", po::bool_switch(&keep), "keep the drive files");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "eraid-demo: " << e.what() << "\n";
    return 2;
  }
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  if (quick) {
    flash_mib = 64;
    ops = 40000;
  }
  if (compress_pct > 95 || flash_mib < 32) {
    std::cerr << "eraid-demo: need --compressibility <= 95 and --flash-mib >= 32\n";
    return 2;
  }
  if (dir.empty()) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "eraid-demo.XXXXXX").string();
    if (!mkdtemp(tmpl.data())) return Fail("mkdtemp", Status::IoError(tmpl));
    dir = tmpl;
  } else {
    std::filesystem::create_directories(dir);
  }
  struct Cleanup {
    std::string dir;
    bool keep;
    ~Cleanup() {
      if (!keep) std::filesystem::remove_all(dir);
    }
  } cleanup{dir, keep};
  std::printf("eraid-demo: 4 emulated drives of %llu MiB flash (2x expansion, zstd) in %s\n",
              (unsigned long long)flash_mib, dir.c_str());

  std::vector<Drive> drives;
  std::vector<Backend*> devs;
  for (int d = 0; d < 4; ++d) {
    auto drive = MakeDrive(dir + "/drive" + std::to_string(d), flash_mib);
    if (!drive.ok()) return Fail("drive " + std::to_string(d), drive.status());
    drives.push_back(std::move(drive).value());
    devs.push_back(drives.back().drive.get());
  }
  ArrayOptions ao;  // 64 KiB chunks, 16 rows per slot
  auto array = ElasticArray::Create(devs, ao);
  if (!array.ok()) return Fail("array", array.status());
  VolumeOptions vo;  // SepBIT, Cost-Benefit, RAID5 segments
  auto volume = Volume::Create(**array, vo);
  if (!volume.ok()) return Fail("volume", volume.status());
  Volume& vol = **volume;
  const uint64_t cap = vol.capacity_blocks();
  std::printf("array: n+1 = 4, %u segments; volume: %.1f MiB, SepBIT placement\n", (*array)->geometry().segments,
              cap / 256.0);

  // The model: a fingerprint (CRC32C) of each block's latest content; 0 = never written.
  std::vector<uint32_t> model(cap, 0);
  std::mt19937_64 rng(42);
  std::vector<std::byte> block(kBlockSize), back(kBlockSize);
  uint64_t mismatches = 0;
  auto pick = [&] { return rng() % 5 ? rng() % (cap / 5) : rng() % cap; };  // 80/20 skew
  auto run = [&](const char* phase, uint64_t n, int fail_at) -> Result<std::pair<double, double>> {
    uint64_t writes = 0, reads = 0;
    double write_s = 0, read_s = 0;
    for (uint64_t i = 0; i < n; ++i) {
      if (static_cast<int64_t>(i) == fail_at) {
        std::printf("  ... drive 2 fails now (%llu operations in)\n", (unsigned long long)i);
        ERAID_RETURN_IF_ERROR((*array)->FailDevice(2));
      }
      const uint64_t lba = pick();
      auto t = std::chrono::steady_clock::now();
      if (rng() % 3) {
        FillBlockWithCompressibility(block, compress_pct, rng);
        ERAID_RETURN_IF_ERROR(vol.Write(lba, block));
        model[lba] = Crc32c(block) | 1;
        ++writes;
        write_s += Since(t);
      } else {
        ERAID_RETURN_IF_ERROR(vol.Read(lba, back));
        const uint32_t want = model[lba];
        if (want ? (Crc32c(back) | 1) != want : std::any_of(back.begin(), back.end(), [](std::byte b) { return b != std::byte{0}; })) {
          ++mismatches;
        }
        ++reads;
        read_s += Since(t);
      }
      if (i % 20000 == 19999) ERAID_RETURN_IF_ERROR(vol.Flush());
    }
    ERAID_RETURN_IF_ERROR(vol.Flush());
    std::printf("  %-9s %8.0f write IOPS  %8.0f read IOPS  (in-process, one thread)\n", phase, writes / write_s,
                reads / read_s);
    return std::make_pair(writes / write_s, reads / read_s);
  };

  std::printf("phase 1: random 4 KiB writes and reads, %u%% compressible, 80/20 skew\n", compress_pct);
  auto healthy = run("healthy", ops, -1);
  if (!healthy.ok()) return Fail("healthy phase", healthy.status());
  std::printf("phase 2: the same, a drive failing part-way\n");
  auto degraded = run("degraded", ops, static_cast<int>(ops / 4));
  if (!degraded.ok()) return Fail("degraded phase", degraded.status());

  std::printf("phase 3: replace drive 2 and rebuild online\n");
  auto fresh = MakeDrive(dir + "/drive2.new", flash_mib);
  if (!fresh.ok()) return Fail("replacement", fresh.status());
  const auto t_rebuild = std::chrono::steady_clock::now();
  Status rs = (*array)->Replace(2, fresh->drive.get(), 0, [](const RebuildProgress& p) {
    const int width = 40, filled = static_cast<int>(width * p.segments_done / std::max(1u, p.segments_total));
    std::fprintf(stderr, "\r  [%s%s] %u/%u segments", std::string(filled, '#').c_str(),
                 std::string(width - filled, '.').c_str(), p.segments_done, p.segments_total);
  });
  std::fprintf(stderr, "\n");
  if (!rs.ok()) return Fail("rebuild", rs);
  const double rebuild_s = Since(t_rebuild);

  std::printf("phase 4: scrub, then verify every block\n");
  auto scrub = (*array)->Scrub();
  if (!scrub.ok()) return Fail("scrub", scrub.status());
  for (uint64_t lba = 0; lba < cap; ++lba) {
    Status s = vol.Read(lba, back);
    if (!s.ok()) return Fail("verify", s);
    const uint32_t want = model[lba];
    if (want ? (Crc32c(back) | 1) != want : std::any_of(back.begin(), back.end(), [](std::byte b) { return b != std::byte{0}; })) {
      ++mismatches;
    }
  }

  const VolumeStats vs = vol.stats();
  const ArrayStats as = (*array)->stats();
  double flash_written = 0, host_stored = 0, logical = 0, stored = 0;
  for (int d = 0; d < 4; ++d) {
    DriveStats ds = (d == 2 ? fresh->drive : drives[static_cast<size_t>(d)].drive)->stats();
    flash_written += double(ds.flash_write_bytes);
    host_stored += double(ds.host_stored_bytes);
    logical += double(ds.mapped_blocks * kBlockSize);
    stored += double(ds.live_bytes);
  }
  std::printf("\nsummary\n");
  std::printf("  IOPS healthy     %.0f write, %.0f read\n", healthy->first, healthy->second);
  std::printf("  IOPS degraded    %.0f write, %.0f read\n", degraded->first, degraded->second);
  std::printf("  log WA           %.3f (SepBIT, %llu user / %llu GC-rewritten blocks)\n", vs.engine.wa(),
              (unsigned long long)vs.engine.user_blocks, (unsigned long long)vs.engine.gc_blocks);
  std::printf("  device WAF       %.3f (drives' flash bytes / record bytes they were given)\n",
              host_stored ? flash_written / host_stored : 0.0);
  std::printf("  compression      %.2f : 1 (logical / stored bytes on the drives)\n", stored ? logical / stored : 0.0);
  std::printf("  RAID10 coverage  %.1f%% of user data (segments open as RAID5; the scheduler is not built yet)\n",
              as.user_blocks ? 100.0 * as.raid10_user_blocks / as.user_blocks : 0.0);
  std::printf("  rebuild          %.2f s, then %s\n", rebuild_s, as.degraded ? "still degraded" : "healthy");
  std::printf("  scrub            %llu blocks checked, %llu CRC / %llu parity mismatches, %llu unrepairable\n",
              (unsigned long long)scrub->blocks_checked, (unsigned long long)scrub->crc_mismatches,
              (unsigned long long)scrub->parity_mismatches, (unsigned long long)scrub->unrepairable);
  std::printf("  verification     %llu mismatches over every read and every block\n", (unsigned long long)mismatches);
  return mismatches == 0 && scrub->unrepairable == 0 && !as.degraded ? 0 : 1;
}
