// eraid-drive-bench: measurements of the drive layer (compress/), each printed as one
// line of key=value pairs for tools/bench/drive-bench.sh to tabulate.
//
//   zstd        4 KiB compression MB/s on one core, per level and compressibility
//   file-iops   FileBackend 4 KiB random read or write IOPS at a queue depth
//   waf         device WAF of six object streams with different lifetimes, at a target
//               fullness, with or without FlashAlloc
//   model       one modeled drive (--drive-model) alone: 4 KiB random reads or writes at a
//               queue depth, against what its profile gives (the model's validation), and
//               the model's own CPU per I/O
#include <stdlib.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <random>
#include <thread>

#include "common/data_gen.h"
#include "compress/codec.h"
#include "compress/compressed_drive.h"
#include "compress/file_backend.h"
#include "compress/mem_backend.h"
#include "compress/timed_backend.h"

namespace po = boost::program_options;
using namespace eraid;  // NOLINT: a tool

namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

int Zstd(double seconds_per_cell) {
  std::mt19937_64 rng(1);
  constexpr int kBlocks = 256;
  std::vector<std::byte> in(BlocksToBytes(kBlocks)), out(kBlockSize);
  for (int pct : {0, 25, 50, 75, 90}) {
    for (int b = 0; b < kBlocks; ++b) {
      FillBlockWithCompressibility(std::span(in).subspan(BlocksToBytes(b), kBlockSize), pct, rng);
    }
    for (int level : {-5, -3, -1, 1, 3}) {
      CodecConfig c;
      c.zstd_level = level;
      uint64_t blocks = 0, stored = 0;
      auto start = std::chrono::steady_clock::now();
      while (Seconds(start) < seconds_per_cell) {
        for (int b = 0; b < kBlocks; ++b, ++blocks) {
          stored += CompressBlock(c, in.data() + BlocksToBytes(b), out.data()).size_bytes;
        }
      }
      double secs = Seconds(start);
      std::printf("zstd pct=%d level=%d mbps=%.0f us_per_block=%.2f ratio=%.2f\n", pct, level,
                  blocks * 4096.0 / secs / 1e6, secs * 1e6 / blocks,
                  blocks * 4096.0 / static_cast<double>(stored));
    }
  }
  return 0;
}

int FileIops(const std::string& path, const std::string& rw, uint32_t qd, double seconds,
             bool direct) {
  FileBackendOptions o;
  o.direct = direct;
  o.queue_depth = qd;
  auto opened = FileBackend::Open(path, o);
  if (!opened.ok()) {
    std::cerr << "file-iops: " << opened.status().ToString() << "\n";
    return 1;
  }
  FileBackend& dev = **opened;
  const bool write = rw == "randwrite";
  std::vector<std::byte*> bufs(qd);
  std::mt19937_64 rng(7);
  for (auto& b : bufs) {
    void* p = nullptr;
    if (posix_memalign(&p, kBlockSize, kBlockSize) != 0) return 1;
    b = static_cast<std::byte*>(p);
    FillBlockWithCompressibility(std::span(b, kBlockSize), 50, rng);
  }
  const uint64_t blocks = dev.capacity_blocks();
  uint64_t done = 0, errors = 0;
  bool stop = false;
  std::function<void(uint32_t)> issue = [&](uint32_t slot) {
    Lba lba(rng() % blocks);
    auto cb = [&, slot](Status s) {
      ++done;
      if (!s.ok()) ++errors;
      if (!stop) issue(slot);
    };
    if (write)
      dev.SubmitWrite(lba, std::span<const std::byte>(bufs[slot], kBlockSize), cb);
    else
      dev.SubmitRead(lba, std::span(bufs[slot], kBlockSize), cb);
  };
  auto start = std::chrono::steady_clock::now();
  for (uint32_t i = 0; i < qd; ++i) issue(i);
  while (Seconds(start) < seconds) dev.Poll(true);
  double secs = Seconds(start);
  uint64_t measured = done;
  stop = true;
  while (dev.in_flight() > 0) dev.Poll(true);
  for (auto* b : bufs) free(b);
  std::printf("file-iops rw=%s qd=%u iops=%.0f errors=%llu\n", rw.c_str(), qd, measured / secs,
              static_cast<unsigned long long>(errors));
  return errors ? 1 : 0;
}

int Waf(bool flashalloc, double fullness, uint64_t flash_mib, uint32_t eu_blocks,
        uint64_t object_blocks, double writes_x, uint32_t pct) {
  DriveOptions o;
  o.erase_unit_blocks = eu_blocks;
  o.flashalloc = flashalloc;
  o.expansion = 2.0 / (1.0 - pct / 100.0) * 0.6 + 1.0;  // room for fullness at this ratio
  MemBackend flash(BytesToBlocks(flash_mib << 20));
  auto made = CompressedDrive::Format(flash, o);
  if (!made.ok()) {
    std::cerr << "waf: " << made.status().ToString() << "\n";
    return 1;
  }
  CompressedDrive& drive = **made;
  const uint64_t slots = drive.capacity_blocks() / object_blocks;
  const uint64_t target = static_cast<uint64_t>(fullness * drive.stats().flash_bytes);
  if (target > drive.stats().usable_bytes) {
    std::cerr << "waf: fullness beyond the drive's usable capacity\n";
    return 1;
  }
  std::mt19937_64 rng(42);
  std::vector<uint64_t> free_slots;
  for (uint64_t i = 0; i < slots; ++i) free_slots.push_back(i);
  std::multimap<uint64_t, uint64_t> deaths;  // death time -> slot
  std::vector<std::byte> block(kBlockSize);
  uint64_t now = 0;  // ticks: one object written by each of the six streams
  const uint64_t total_bytes = static_cast<uint64_t>(writes_x * drive.stats().flash_bytes);
  // Six streams; stream k's objects live ~ base * (1 + 3k) ticks, jittered +-50%. base is
  // chosen so that natural deaths alone would keep ~1.2x the target live: the space limit
  // binds, and objects die early in death-time order, as a log's GC would free them.
  const double object_stored = object_blocks * (32.0 + 4096.0 * (100 - pct) / 100.0);
  const double base = 1.2 * (static_cast<double>(target) / object_stored) / 51.0;
  while (drive.stats().host_stored_bytes < total_bytes) {
    // Objects die at their time; when the next six would not fit under the target, the
    // next to die go early.
    while (!deaths.empty() && (deaths.begin()->first <= now ||
                               static_cast<double>(drive.stats().live_bytes) + 6 * object_stored >
                                   static_cast<double>(target))) {
      uint64_t slot = deaths.begin()->second;
      deaths.erase(deaths.begin());
      if (!drive.Trim(Lba(slot * object_blocks), object_blocks).ok()) return 1;
      free_slots.push_back(slot);
    }
    uint64_t objs[6];
    for (int k = 0; k < 6; ++k) {
      if (free_slots.empty()) return std::cerr << "waf: out of slots\n", 1;
      size_t i = rng() % free_slots.size();
      objs[k] = free_slots[i];
      free_slots[i] = free_slots.back();
      free_slots.pop_back();
      (void)drive.FlashAlloc(Lba(objs[k] * object_blocks), object_blocks);
      auto life =
          static_cast<uint64_t>(base * (1 + 3 * k) * static_cast<double>(50 + rng() % 101) / 100.0);
      deaths.emplace(now + life, objs[k]);
    }
    for (uint64_t b = 0; b < object_blocks; ++b) {
      for (uint64_t obj : objs) {
        FillBlockWithCompressibility(block, pct, rng);
        Status s = drive.Write(Lba(obj * object_blocks + b), block);
        if (!s.ok()) return std::cerr << "waf: " << s.ToString() << "\n", 1;
      }
    }
    now += 1;
  }
  DriveStats st = drive.stats();
  std::printf(
      "waf flashalloc=%s fullness=%.2f eu_kib=%u object_kib=%llu waf=%.3f relocated_mib=%.1f "
      "erased_eus=%llu ckpt_mib=%.1f host_mib=%.0f\n",
      flashalloc ? "on" : "off", fullness, eu_blocks * 4,
      static_cast<unsigned long long>(object_blocks * 4), st.device_waf(),
      st.gc_relocated_bytes / 1048576.0, static_cast<unsigned long long>(st.gc_erased_eus),
      st.meta_write_bytes / 1048576.0, st.host_stored_bytes / 1048576.0);
  return 0;
}

}  // namespace

double CpuSeconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}
// Context switches of the whole process so far, voluntary and not.
double ContextSwitches() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return double(u.ru_nvcsw + u.ru_nivcsw);
}

// The model's own arithmetic per I/O (a flash read and its host part), at queue depth
// 16: a manual clock moves on by a sixteenth of the read latency per I/O.
double ModelCostNs(const DriveProfile& p) {
  ManualClock clock;
  DriveModel m(p, clock);
  std::mt19937_64 rng(1);
  constexpr int kOps = 200000;
  // No faster than the drive serves (or its calendars would only grow).
  const auto step = static_cast<uint64_t>(
      std::max(p.ReadLatencyUs() / 16, 1e6 / p.RandomReadIops()) * p.time_scale * 1e3);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kOps; ++i) {
    clock.AdvanceNanos(step);
    const uint64_t flash = m.FlashRead((rng() % (1ull << 30)) & ~uint64_t(2047), 2048);
    (void)m.HostRead(4096, true, 0, flash);
  }
  return Seconds(start) * 1e9 / kOps;
}

// A drive formatted on `flash` and its first half written with random data, without the
// model (its programs would keep the units busy into the run); the blocks written.
Result<uint64_t> FillHalfUnmodeled(Backend& flash, const DriveOptions& o) {
  ERAID_ASSIGN_OR_RETURN(auto drive, CompressedDrive::Format(flash, o));
  const uint64_t span = drive->capacity_blocks() / 2;
  std::vector<std::byte> chunk(BlocksToBytes(64));
  std::mt19937_64 rng(2);
  for (auto& b : chunk) b = std::byte(rng());
  for (uint64_t lba = 0; lba + 64 <= span; lba += 64) {
    ERAID_RETURN_IF_ERROR(drive->Write(Lba(lba), chunk));
  }
  ERAID_RETURN_IF_ERROR(drive->Close());
  return span;
}

// One modeled drive over memory, filled, then `qd` threads of synchronous 4 KiB random
// reads or writes for `seconds`. What the profile gives: latency at QD 1 and the IOPS
// cap (RandomReadIops / RandomWriteIops), scaled; at a queue depth, min(qd / latency, cap).
int Model(const std::string& spec, const std::string& rw, uint32_t qd, double seconds,
          uint64_t flash_mib) {
  auto profile = ParseDriveProfile(spec);
  if (!profile.ok() || !profile->enabled()) {
    std::cerr << "eraid-drive-bench: model needs --drive-model PROFILE[,key=value...]: "
              << (profile.ok() ? "not none" : profile.status().message()) << "\n";
    return 2;
  }
  MemBackend flash(BytesToBlocks(flash_mib << 20));
  DriveOptions o;
  o.expansion = 1.0;
  o.codec.enabled = false;  // incompressible data: the profile's byte rates apply as they are
  // Half full: no device GC in the run.
  auto span = FillHalfUnmodeled(flash, o);
  if (!span.ok()) {
    std::cerr << "eraid-drive-bench: fill: " << span.status().ToString() << "\n";
    return 1;
  }
  auto timing = DriveTiming::Make(*profile, flash);
  o.timing = &timing->model();
  auto drive = CompressedDrive::Open(timing->flash(), o);
  if (!drive.ok()) {
    std::cerr << "eraid-drive-bench: " << drive.status().ToString() << "\n";
    return 1;
  }
  Backend& dev = timing->Attach(**drive);
  const bool reads = rw == "randread";
  std::atomic<bool> stop{false};
  std::vector<std::vector<double>> lat_us(qd);
  std::vector<std::thread> threads;
  const double cpu0 = CpuSeconds(), switches0 = ContextSwitches();
  const DriveModelStats model0 = timing->model().stats();
  const auto start = std::chrono::steady_clock::now();
  for (uint32_t t = 0; t < qd; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(100 + t);
      std::vector<std::byte> buf(kBlockSize);
      for (auto& b : buf) b = std::byte(rng());
      while (!stop.load(std::memory_order_relaxed)) {
        const Lba lba(rng() % *span);
        const auto t0 = std::chrono::steady_clock::now();
        Status s = reads ? dev.Read(lba, buf) : dev.Write(lba, buf);
        if (!s.ok()) std::abort();
        lat_us[t].push_back(Seconds(t0) * 1e6);
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& th : threads) th.join();
  const double secs = Seconds(start), cpu = CpuSeconds() - cpu0;
  const double switches = ContextSwitches() - switches0;
  std::vector<double> all;
  for (auto& v : lat_us) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  double sum = 0;
  for (double v : all) sum += v;
  const double n = double(all.size());
  const double scale = profile->time_scale;
  // The curve. Reads: the model itself on a virtual clock (SimulateRandomReads), the closed
  // form beside it. Writes: the host side on a virtual clock (SimulateRandomWrites), or what
  // the NAND does when kept busy all the time, whichever is less. The NAND's work per write
  // (programs, the drive's own GC and erases) is the drive's, so it is measured here: the rate at
  // which the units would be busy all the time is the measured rate over their busy share.
  const DriveModelStats model1 = timing->model().stats();
  const double nand_busy = double(model1.unit_busy_ns - model0.unit_busy_ns) /
                           (double(model1.elapsed_ns - model0.elapsed_ns) * double(model1.units));
  const double mva_iops = profile->ExpectedIops(qd, reads) / scale;
  double want_iops = mva_iops, want_lat_us = qd * 1e6 / mva_iops;
  if (reads) {
    const ModelCurve curve = SimulateRandomReads(*profile, qd, flash_mib << 20);
    want_iops = curve.iops;
    want_lat_us = curve.mean_latency_us;
  } else {
    const ModelCurve host = SimulateRandomWrites(*profile, qd);
    want_iops = host.iops;
    want_lat_us = host.mean_latency_us;
    if (nand_busy > 0 && n / secs / nand_busy < want_iops) {
      want_iops = n / secs / nand_busy;
      want_lat_us = qd * 1e6 / want_iops;
    }
  }
  std::printf(
      "model profile=%s rw=%s qd=%u iops=%.0f profile_iops=%.0f iops_ratio=%.3f lat_mean_us=%.1f "
      "profile_lat_us=%.1f lat_ratio=%.3f mva_iops=%.0f mva_ratio=%.3f p99_us=%.1f "
      "cpu_us_per_io=%.2f model_ns_per_io=%.0f "
      "profile_units_iops=%.0f flash_reads_per_io=%.2f queued_share=%.2f switches_per_io=%.2f "
      "nand_busy=%.3f programs_per_io=%.2f\n",
      profile->Spec().c_str(), rw.c_str(), qd, n / secs, want_iops, n / secs / want_iops, sum / n,
      want_lat_us, sum / n / want_lat_us, mva_iops, n / secs / mva_iops, all[size_t(n * 0.99)],
      cpu * 1e6 / n, ModelCostNs(*profile), n / secs * scale,
      double(timing->model().stats().flash_reads) / n, timing->model().stats().queued_share(),
      switches / n, nand_busy, double(model1.flash_programs - model0.flash_programs) / n);
  return 0;
}

int main(int argc, char** argv) {
  po::options_description opts(
      "eraid-drive-bench MODE [options]\nmodes: zstd, file-iops, waf, model\noptions");
  std::string mode, file, rw = "randwrite";
  uint32_t qd = 16, eu_blocks = 64, pct = 50;
  double seconds = 10, fullness = 0.85, writes_x = 8;
  uint64_t flash_mib = 256, object_blocks = 256;
  std::string flashalloc = "on", drive_model;
  bool direct = true;
  opts.add_options()("help,h", "this text")("mode", po::value(&mode), "zstd | file-iops | waf")(
      "file", po::value(&file), "file-iops: an existing file to test")(
      "rw", po::value(&rw), "file-iops: randwrite | randread")(
      "qd", po::value(&qd), "file-iops: queue depth")("seconds", po::value(&seconds),
                                                      "file-iops: run time; zstd: time per cell")(
      "direct", po::value(&direct), "file-iops: O_DIRECT (1/0)")(
      "flashalloc", po::value(&flashalloc), "waf: on | off")("fullness", po::value(&fullness),
                                                             "waf: live bytes / flash")(
      "flash-mib", po::value(&flash_mib), "waf: flash size")("eu-blocks", po::value(&eu_blocks),
                                                             "waf: erase unit, 4 KiB blocks")(
      "object-blocks", po::value(&object_blocks), "waf: object (segment) size, 4 KiB blocks")(
      "writes", po::value(&writes_x), "waf: host bytes to write, in multiples of flash")(
      "compressibility", po::value(&pct), "waf: % (fio buffer_compress_percentage)")(
      "drive-model", po::value(&drive_model),
      "model: the profile, e.g. nvme-tlc,time_scale=50 (with --rw, --qd, --seconds, --flash-mib)");
  po::positional_options_description pos;
  pos.add("mode", 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(opts).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "eraid-drive-bench: " << e.what() << "\n";
    return 2;
  }
  if (vm.count("help") || mode.empty()) {
    std::cout << opts << "\n";
    return mode.empty() && !vm.count("help") ? 2 : 0;
  }
  if (mode == "zstd") return Zstd(seconds > 1 ? 0.3 : seconds);
  if (mode == "file-iops") {
    if (file.empty() || (rw != "randwrite" && rw != "randread") || qd == 0) {
      std::cerr << "eraid-drive-bench: file-iops needs --file and --rw randwrite|randread\n";
      return 2;
    }
    return FileIops(file, rw, qd, seconds, direct);
  }
  if (mode == "waf") {
    if ((flashalloc != "on" && flashalloc != "off") || fullness <= 0 || fullness >= 1 || pct > 95) {
      std::cerr << "eraid-drive-bench: waf needs --flashalloc on|off, 0 < --fullness < 1\n";
      return 2;
    }
    return Waf(flashalloc == "on", fullness, flash_mib, eu_blocks, object_blocks, writes_x, pct);
  }
  if (mode == "model") {
    if ((rw != "randwrite" && rw != "randread") || qd == 0 || qd > 1024) {
      std::cerr << "eraid-drive-bench: model needs --rw randwrite|randread and --qd 1..1024\n";
      return 2;
    }
    return Model(drive_model, rw, qd, seconds, flash_mib);
  }
  std::cerr << "eraid-drive-bench: unknown mode '" << mode << "' (zstd, file-iops, waf, model)\n";
  return 2;
}
