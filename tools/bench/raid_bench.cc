// eraid-raid-bench: measurements of the array layer (raid/), one key=value line each,
// tabulated by tools/bench/raid-bench.sh.
//   write     RAID5 (full-stripe) and RAID10 append throughput on memory devices, with
//             memcpy bandwidth measured in the same run as the ceiling
//   degraded  device reads per user read with one device failed, per scheme
//   convert   conversion throughput each way, on memory or file devices
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <random>

#include "common/data_gen.h"
#include "compress/file_backend.h"
#include "compress/mem_backend.h"
#include "raid/array.h"

namespace po = boost::program_options;
using namespace eraid;  // NOLINT: a tool

namespace {

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

double MemcpyGBps() {
  std::vector<std::byte> a(64 << 20, std::byte{1}), b(64 << 20);
  auto t = std::chrono::steady_clock::now();
  int rounds = 0;
  while (Since(t) < 1.0) {
    std::memcpy(b.data(), a.data(), a.size());
    a[rounds % a.size()] = b[(rounds * 7) % b.size()];  // keep the copies observable
    ++rounds;
  }
  return rounds * double(a.size()) / Since(t) / 1e9;
}

struct Devices {
  std::vector<std::unique_ptr<Backend>> owned;
  std::vector<Backend*> ptrs;
  std::string dir;
  ~Devices() {
    owned.clear();
    if (!dir.empty()) std::filesystem::remove_all(dir);
  }
};

std::unique_ptr<Devices> MakeDevices(const std::string& kind, uint32_t n, uint64_t blocks,
                                     const std::string& tmp) {
  auto holder = std::make_unique<Devices>();
  Devices& d = *holder;
  if (kind == "file") {
    d.dir = tmp + "/eraid-raid-bench-" + std::to_string(::getpid());
    std::filesystem::create_directories(d.dir);
  }
  for (uint32_t i = 0; i < n; ++i) {
    if (kind == "mem") {
      d.owned.push_back(std::make_unique<MemBackend>(blocks));
    } else {
      FileBackendOptions o;
      o.create = true;
      o.size_bytes = BlocksToBytes(blocks);
      d.owned.push_back(
          std::move(FileBackend::Open(d.dir + "/dev" + std::to_string(i), o)).value());
    }
    d.ptrs.push_back(d.owned.back().get());
  }
  return holder;
}

// Fills `segments` segments in `scheme`; returns user bytes and seconds.
std::pair<uint64_t, double> Fill(ElasticArray& a, SegmentScheme scheme, uint32_t segments,
                                 std::vector<std::pair<SegmentId, uint32_t>>* written = nullptr) {
  std::mt19937_64 rng(1);
  std::vector<std::byte> blocks(BlocksToBytes(64));
  for (size_t i = 0; i < 64; ++i) {
    FillBlockWithCompressibility(std::span(blocks).subspan(BlocksToBytes(i), kBlockSize), 50, rng);
  }
  uint64_t bytes = 0;
  auto t = std::chrono::steady_clock::now();
  for (uint32_t i = 0; i < segments; ++i) {
    SegmentId s = a.AllocateSegment(scheme).value();
    for (uint64_t k = 0; a.Remaining(s) > 0; ++k) {
      auto pos = a.Append(s, std::span(blocks).subspan(BlocksToBytes(k % 64), kBlockSize), k, k);
      if (!pos.ok()) std::abort();
      if (written) written->emplace_back(s, *pos);
      bytes += kBlockSize;
    }
    if (!a.Seal(s).ok()) std::abort();
  }
  return {bytes, Since(t)};
}

// What every mode runs on.
struct Bench {
  std::string kind, tmp;
  uint32_t devices, segments;
  uint64_t device_blocks;
  ArrayOptions ao;
};

// Fill throughput of each scheme against memcpy's.
int WriteMode(const Bench& b) {
  double memcpy_gbps = MemcpyGBps();
  {  // warm-up: the first array in a process pays the heap's first-touch page faults
    auto d = MakeDevices("mem", b.devices, b.device_blocks, b.tmp);
    auto a = std::move(ElasticArray::Create(d->ptrs, b.ao)).value();
    Fill(*a, SegmentScheme::kRaid10, b.segments);
  }
  for (auto scheme : {SegmentScheme::kRaid5, SegmentScheme::kRaid10}) {
    auto d = MakeDevices("mem", b.devices, b.device_blocks, b.tmp);
    auto a = std::move(ElasticArray::Create(d->ptrs, b.ao)).value();
    auto [bytes, secs] = Fill(*a, scheme, b.segments);
    double gbps = bytes / secs / 1e9;
    std::printf("write scheme=%s gbps=%.2f memcpy_gbps=%.2f ratio=%.3f\n",
                raid_format::SchemeName(scheme), gbps, memcpy_gbps, gbps / memcpy_gbps);
  }
  return 0;
}

// Device reads per user read with device 1 failed, for each scheme.
int DegradedMode(const Bench& b) {
  for (auto scheme : {SegmentScheme::kRaid5, SegmentScheme::kRaid10}) {
    auto d = MakeDevices("mem", b.devices, b.device_blocks, b.tmp);
    auto a = std::move(ElasticArray::Create(d->ptrs, b.ao)).value();
    std::vector<std::pair<SegmentId, uint32_t>> blocks;
    Fill(*a, scheme, std::min(b.segments, 8u), &blocks);
    if (!a->FailDevice(DeviceIndex(1)).ok()) return 1;
    auto reads = [&] {
      uint64_t r = 0;
      for (const auto& dev : a->stats().devices) r += dev.reads;
      return r;
    };
    std::vector<std::byte> out(kBlockSize);
    uint64_t user = 0, lost = 0, before = reads(), lost_reads = 0;
    for (auto [s, p] : blocks) {
      uint64_t r0 = reads();
      if (!a->Read(s, p, out).ok()) return 1;
      ++user;
      if (a->geometry().Primary(s, p).device == 1) {
        ++lost;
        lost_reads += reads() - r0;
      }
    }
    std::printf(
        "degraded scheme=%s devices=%u reads_per_user_read=%.3f reads_per_lost_block=%.3f\n",
        raid_format::SchemeName(scheme), b.devices, double(reads() - before) / user,
        double(lost_reads) / lost);
  }
  return 0;
}

// Every sealed segment converted to RAID10 and back, timed.
int ConvertMode(const Bench& b) {
  auto d = MakeDevices(b.kind, b.devices, b.device_blocks, b.tmp);
  auto a = std::move(ElasticArray::Create(d->ptrs, b.ao)).value();
  auto [bytes, secs] = Fill(*a, SegmentScheme::kRaid5, b.segments);
  (void)secs;
  for (auto to : {SegmentScheme::kRaid10, SegmentScheme::kRaid5}) {
    auto t = std::chrono::steady_clock::now();
    for (uint32_t i = 0; i < a->geometry().segments; ++i) {
      if (a->segment_info(SegmentId(i)).scheme == SegmentScheme::kFree) continue;
      if (!a->Convert(SegmentId(i), to).ok()) return 1;
    }
    double s = Since(t);
    std::printf("convert backend=%s to=%s mbps=%.0f user_mib=%.0f\n", b.kind.c_str(),
                raid_format::SchemeName(to), bytes / s / 1e6, bytes / 1048576.0);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode, kind = "mem", tmp = "/tmp";
  uint32_t devices = 4, chunk = 16, rows = 16, segments = 64;
  po::options_description opts(
      "eraid-raid-bench MODE [options]\nmodes: write, degraded, convert\noptions");
  opts.add_options()("help,h", "this text")("mode", po::value(&mode), "write | degraded | convert")(
      "devices", po::value(&devices), "n+1")("chunk-blocks", po::value(&chunk),
                                             "chunk size, 4 KiB blocks")(
      "rows", po::value(&rows), "rows per slot")("segments", po::value(&segments),
                                                 "segments to fill")(
      "backend", po::value(&kind), "convert: mem | file")("dir", po::value(&tmp),
                                                          "where file devices go");
  po::positional_options_description pos;
  pos.add("mode", 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(opts).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "eraid-raid-bench: " << e.what() << "\n";
    return 2;
  }
  if (vm.count("help") || mode.empty()) {
    std::cout << opts << "\n";
    return vm.count("help") ? 0 : 2;
  }
  if (kind != "mem" && kind != "file") {
    std::cerr << "eraid-raid-bench: --backend must be mem or file\n";
    return 2;
  }
  auto plan = PlanGeometry(devices, chunk, rows, 1 << 30);
  if (!plan.ok()) {
    std::cerr << "eraid-raid-bench: " << plan.status().ToString() << "\n";
    return 2;
  }
  Bench b{kind,
          tmp,
          devices,
          segments,
          plan->meta_blocks + uint64_t{segments + 1} * plan->segment_span_blocks(),
          {}};
  b.ao.chunk_blocks = chunk;
  b.ao.rows_per_slot = rows;
  if (mode == "write") return WriteMode(b);
  if (mode == "degraded") return DegradedMode(b);
  if (mode == "convert") return ConvertMode(b);
  std::cerr << "eraid-raid-bench: unknown mode '" << mode << "'\n";
  return 2;
}
