// eraid-sched-bench: RAID10 coverage the elastic scheduler reaches, as the data's
// compressibility, the drives' expansion factor and the budget β vary (the Elastic RAID
// paper's Figures 9 and 10, on this stack). Each point: four emulated compressing drives
// over memory, the volume filled to its capacity once with data of the given
// compressibility, the scheduler run until idle; prints one CSV line.
#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>
#include <random>

#include "common/data_gen.h"
#include "compress/compressed_drive.h"
#include "compress/mem_backend.h"
#include "scheduler/scheduler.h"
#include "tools/cli/options.h"

namespace po = boost::program_options;
using namespace eraid;  // NOLINT: a tool

namespace {

struct Point {
  double coverage = 0, physical = 0, ratio = 0;
  uint64_t to_raid10 = 0, to_raid5 = 0, autonomous = 0;
};

Result<Point> Run(uint32_t pct, double expansion, double beta, uint64_t flash_blocks) {
  std::vector<std::unique_ptr<MemBackend>> flash;
  std::vector<std::unique_ptr<CompressedDrive>> drives;
  std::vector<Backend*> devs;
  DriveOptions d;
  d.erase_unit_blocks = 16;
  d.expansion = expansion;
  for (int i = 0; i < 4; ++i) {
    flash.push_back(std::make_unique<MemBackend>(flash_blocks));
    ERAID_ASSIGN_OR_RETURN(auto drive, CompressedDrive::Format(*flash.back(), d));
    drives.push_back(std::move(drive));
    devs.push_back(drives.back().get());
  }
  ArrayOptions ao;
  ao.chunk_blocks = 4;
  ao.rows_per_slot = 4;
  ERAID_ASSIGN_OR_RETURN(auto array, ElasticArray::Create(devs, ao));
  ERAID_ASSIGN_OR_RETURN(auto volume, LogVolume::Create(*array, VolumeOptions{}));
  auto physical = [&] { return DrivesPhysicalUse(drives); };
  SchedulerOptions so;
  so.beta = beta;
  Scheduler sched(*array, *volume, physical, so);
  std::mt19937_64 rng(pct * 1000 + static_cast<uint64_t>(expansion * 10));
  std::vector<std::byte> b(kBlockSize);
  const uint64_t cap = volume->capacity_blocks();
  for (uint64_t lba = 0; lba < cap; ++lba) {
    FillBlockWithCompressibility(b, pct, rng);
    Status s = volume->Write(lba, b);
    if (s.code() == StatusCode::kNoSpace) break;  // the drives are full: a finding, not an error
    ERAID_RETURN_IF_ERROR(s);
    if (lba % 256 == 0) ERAID_RETURN_IF_ERROR(sched.Step().status());
  }
  ERAID_RETURN_IF_ERROR(volume->Flush());
  for (int i = 0; i < 100000; ++i) {
    ERAID_ASSIGN_OR_RETURN(uint32_t n, sched.Step());
    if (n == 0) break;
  }
  Point p;
  uint64_t all = 0, r10 = 0;
  for (const auto& [s, gp] : volume->SealedSegments()) {
    const SegmentInfo info = array->segment_info(s);
    all += info.frontier;
    if (info.scheme == SegmentScheme::kRaid10) r10 += info.frontier;
  }
  p.coverage = all ? double(r10) / double(all) : 0;
  const PhysicalUse u = physical();
  p.physical = double(u.used_bytes) / double(u.flash_bytes);
  uint64_t mapped = 0, live = 0;
  for (const auto& dr : drives) {
    mapped += dr->stats().mapped_blocks;
    live += dr->stats().live_bytes;
  }
  p.ratio = live ? double(BlocksToBytes(mapped)) / double(live) : 0;
  const SchedulerStats ss = sched.stats();
  p.to_raid10 = ss.to_raid10;
  p.to_raid5 = ss.to_raid5;
  p.autonomous = ss.autonomous;
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  std::string pcts = "0,25,50,60,67,75,80,90", expansions = "1.0,1.4,1.8", betas = "1.0,0.9,0.8";
  uint64_t flash_blocks = 4096;
  po::options_description desc(
      "eraid-sched-bench [options]: CSV of RAID10 coverage by compressibility, expansion, "
      "beta\noptions");
  desc.add_options()("help,h", "this text")("compressibility",
                                            po::value(&pcts)->default_value(pcts),
                                            "fio buffer_compress_percentage values")(
      "expansion", po::value(&expansions)->default_value(expansions), "drive expansion factors")(
      "beta", po::value(&betas)->default_value(betas), "physical-use budgets")(
      "flash-blocks", po::value(&flash_blocks)->default_value(flash_blocks),
      "4 KiB flash blocks per drive");
  po::variables_map vm;
  if (int rc = ParseOptions("eraid-sched-bench", desc, argc, argv, &vm); rc >= 0) return rc;
  auto list = [](const std::string& s) {
    std::vector<double> v;
    size_t at = 0;
    while (at <= s.size()) {
      size_t comma = s.find(',', at);
      if (comma == std::string::npos) comma = s.size();
      v.push_back(std::stod(s.substr(at, comma - at)));
      at = comma + 1;
    }
    return v;
  };
  std::vector<double> P, E, B;
  try {
    P = list(pcts);
    E = list(expansions);
    B = list(betas);
  } catch (...) {
    std::cerr << "eraid-sched-bench: lists are comma-separated numbers\n";
    return 2;
  }
  std::printf(
      "compressibility,ratio,expansion,beta,raid10_coverage,physical_use,to_raid10,to_raid5,"
      "autonomous\n");
  for (double e : E) {
    for (double b : B) {
      for (double p : P) {
        std::fprintf(stderr, "eraid-sched-bench: expansion %.1f beta %.2f compressibility %.0f%%\n",
                     e, b, p);
        auto r = Run(static_cast<uint32_t>(p), e, b, flash_blocks);
        if (!r.ok()) {
          std::cerr << "eraid-sched-bench: " << r.status().ToString() << "\n";
          return 1;
        }
        std::printf("%.0f,%.2f,%.1f,%.2f,%.3f,%.3f,%llu,%llu,%llu\n", p, r->ratio, e, b,
                    r->coverage, r->physical, (unsigned long long)r->to_raid10,
                    (unsigned long long)r->to_raid5, (unsigned long long)r->autonomous);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
