// eraid-write-bench: the served stack's random-write path without the transport. An
// array made and opened as `eraid serve` does (ArrayDir, scheduler running), then T
// threads writing random 4 KiB blocks of 50% compressible data through the volume for S
// seconds. Reports writes per second and, from getrusage over the timed part, the
// process's CPU time and context switches per write — what nbdkit and fio add on top is
// measured by tools/bench/nbd-bench.sh; this isolates eraid's own share, so an A/B of a
// change to the write path does not drown in the socket's noise.
//
//   eraid-write-bench --dir DIR [--device-size 512M] [--threads 4] [--seconds 5]
//                     [--region-mib 512] [--warm-seconds 2] [--seed N]
#include <sys/resource.h>

#include <atomic>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <random>
#include <thread>
#include <vector>

#include "common/data_gen.h"
#include "tools/cli/options.h"
#include "tools/server/array_dir.h"

namespace po = boost::program_options;
using namespace eraid;

namespace {

struct Usage {
  double cpu_us;
  long switches;
};
Usage Now() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto us = [](const timeval& t) { return double(t.tv_sec) * 1e6 + double(t.tv_usec); };
  return {us(ru.ru_utime) + us(ru.ru_stime), ru.ru_nvcsw + ru.ru_nivcsw};
}

// Writes random blocks of `pool` until `stop`; counts into `done`.
void Writer(LogVolume& v, uint64_t region_blocks, const std::vector<std::byte>& pool, uint64_t seed,
            const std::atomic<bool>& stop, std::atomic<uint64_t>& done) {
  std::mt19937_64 rng(seed);
  const uint64_t pool_blocks = pool.size() / kBlockSize;
  uint64_t k = rng() % pool_blocks;
  while (!stop.load(std::memory_order_relaxed)) {
    const uint64_t lba = rng() % region_blocks;
    k = (k + 1) % pool_blocks;
    Status s = v.Write(lba, std::span<const std::byte>(pool.data() + BlocksToBytes(k), kBlockSize));
    if (!s.ok()) {
      std::cerr << "eraid-write-bench: write: " << s.ToString() << "\n";
      std::exit(1);
    }
    done.fetch_add(1, std::memory_order_relaxed);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir, device_size = "512M";
  uint32_t threads = 4;
  double seconds = 5, warm = 2;
  uint64_t region_mib = 512, seed = 1;
  po::options_description desc(
      "eraid-write-bench: random 4 KiB writes through a served array's volume, in-process");
  desc.add_options()("help,h", "this help")("dir", po::value(&dir)->required(),
                                            "array directory (made; must not exist)")(
      "device-size", po::value(&device_size)->default_value(device_size),
      "flash per emulated drive (4 drives)")("threads", po::value(&threads)->default_value(threads),
                                             "writer threads")(
      "seconds", po::value(&seconds)->default_value(seconds), "timed part")(
      "warm-seconds", po::value(&warm)->default_value(warm), "untimed random writes first")(
      "region-mib", po::value(&region_mib)->default_value(region_mib),
      "the LBA range written (written once first)")("seed", po::value(&seed)->default_value(seed),
                                                    "data and address seed");
  po::variables_map vm;
  if (int rc = ParseOptions("eraid-write-bench", desc, argc, argv, &vm); rc >= 0) return rc;
  if (threads < 1 || threads > 256 || seconds <= 0 || warm < 0 || region_mib == 0) {
    std::cerr << "eraid-write-bench: --threads 1..256, --seconds > 0, --region-mib > 0\n";
    return 2;
  }
  auto size = ParseSize(device_size);
  if (!size.ok()) {
    std::cerr << "eraid-write-bench: --device-size: " << size.status().ToString() << "\n";
    return 2;
  }
  ArrayDirOptions o;
  o.device_size_bytes = *size;
  {
    auto made = ArrayDir::Create(dir, o, /*force=*/false);
    if (!made.ok()) {
      std::cerr << "eraid-write-bench: create: " << made.status().ToString() << "\n";
      return 1;
    }
    if (Status s = (*made)->Close(); !s.ok()) {
      std::cerr << "eraid-write-bench: " << s.ToString() << "\n";
      return 1;
    }
  }
  auto opened = ArrayDir::Open(dir);
  if (!opened.ok()) {
    std::cerr << "eraid-write-bench: open: " << opened.status().ToString() << "\n";
    return 1;
  }
  ArrayDir& a = **opened;
  a.StartServing();
  LogVolume& v = a.volume();
  const uint64_t region =
      std::min<uint64_t>(BytesToBlocks(region_mib << 20), v.capacity_blocks() / 2);

  // 8192 distinct blocks (32 MiB): twice the compression memo, so a write's blocks are
  // never found compressed by an earlier write of the same bytes.
  std::vector<std::byte> pool(BlocksToBytes(8192));
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < 8192; ++i) {
    FillBlockWithCompressibility(std::span<std::byte>(pool.data() + BlocksToBytes(i), kBlockSize),
                                 50, rng);
  }
  std::vector<std::byte> chunk(BlocksToBytes(64));
  for (uint64_t lba = 0; lba < region; lba += 64) {
    const uint64_t n = std::min<uint64_t>(64, region - lba);
    std::memcpy(chunk.data(), pool.data() + BlocksToBytes(lba % 8128), BlocksToBytes(n));
    if (Status s = v.Write(lba, std::span<const std::byte>(chunk.data(), BlocksToBytes(n)));
        !s.ok()) {
      std::cerr << "eraid-write-bench: fill: " << s.ToString() << "\n";
      return 1;
    }
  }
  (void)v.Flush();

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> done{0};
  std::vector<std::thread> ts;
  for (uint32_t t = 0; t < threads; ++t) {
    ts.emplace_back(Writer, std::ref(v), region, std::cref(pool), seed * 1000 + t, std::cref(stop),
                    std::ref(done));
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(warm));
  const uint64_t n0 = done.load();
  const Usage u0 = Now();
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const uint64_t n1 = done.load();
  const Usage u1 = Now();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stop = true;
  for (auto& t : ts) t.join();
  const double n = double(n1 - n0);
  std::printf("threads %u  writes/s %.0f  cpu_us/write %.2f  switches/write %.3f\n", threads,
              n / secs, (u1.cpu_us - u0.cpu_us) / n, double(u1.switches - u0.switches) / n);
  if (Status s = a.Close(); !s.ok()) {
    std::cerr << "eraid-write-bench: close: " << s.ToString() << "\n";
    return 1;
  }
  return 0;
}
