#include "tools/cli/demo.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <thread>

#include "tools/cli/fio_runner.h"
#include "tools/cli/options.h"
#include "tools/cli/progress.h"
#include "tools/json.h"
#include "tools/server/admin.h"
#include "tools/server/array_dir.h"
#include "tools/server/serve.h"

namespace po = boost::program_options;

namespace eraid {

namespace {

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

int Fail(const std::string& what, const Status& s) {
  std::fprintf(stderr, "eraid demo: %s: %s\n", what.c_str(), s.message().c_str());
  return 1;
}

std::string StatusJson(const std::string& dir) {
  auto r = AdminCall(dir, {"status", "--json"}, nullptr);
  return r.ok() ? r->text : "";
}

}  // namespace

int RunDemo(int argc, char** argv) {
  std::string dir, device_size = "512M", size, fio = "fio";
  uint32_t compress_pct = 50, iodepth = 16, fail_device = 2;
  bool keep = false, quick = false;
  po::options_description desc(
      "eraid demo [options]\n"
      "4 emulated compressing drives in a temporary folder, served over NBD by nbdkit; fio\n"
      "4 KiB random writes with verify=crc32c; a drive fails mid-run; every block is verified\n"
      "degraded; the drive is rebuilt; every block is verified again; scrub; a summary.\n"
      "options");
  desc.add_options()("help,h", "this text")("quick", po::bool_switch(&quick),
                                            "a small run (128M drives, 64 MiB written)")(
      "device-size", po::value(&device_size)->default_value(device_size),
      "flash per emulated drive")("size", po::value(&size),
                                  "bytes fio writes and verifies (default: half the volume)")(
      "compressibility", po::value(&compress_pct)->default_value(compress_pct),
      "fio buffer_compress_percentage (0..95)")(
      "iodepth", po::value(&iodepth)->default_value(iodepth), "fio queue depth (1..256)")(
      "fail-device", po::value(&fail_device)->default_value(fail_device),
      "the drive that fails (0..3)")(
      "dir", po::value(&dir),
      "where the array goes (default: a new temporary folder, removed after)")(
      "keep", po::bool_switch(&keep), "keep the array afterwards")(
      "fio", po::value(&fio)->default_value(fio), "the fio binary");
  po::variables_map vm;
  if (int rc = ParseOptions("eraid demo", desc, argc, argv, &vm); rc >= 0) return rc;
  if (quick) {
    if (vm["device-size"].defaulted()) device_size = "128M";
    if (size.empty()) size = "64M";
  }
  if (compress_pct > 95 || iodepth < 1 || iodepth > 256 || fail_device > 3) {
    std::cerr << "eraid demo: need --compressibility <= 95, --iodepth 1..256, --fail-device 0..3\n";
    return 2;
  }
  auto device_bytes = ParseSize(device_size);
  if (!device_bytes.ok()) return Fail("--device-size", device_bytes.status());

  const bool made_dir = dir.empty();
  if (made_dir) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "eraid-demo.XXXXXX").string();
    if (!mkdtemp(tmpl.data())) return Fail("mkdtemp", Status::IoError(tmpl));
    dir = tmpl;
  }
  pid_t server = -1;
  struct Cleanup {
    std::string dir;
    bool remove;
    pid_t* server;
    ~Cleanup() {
      if (*server > 0) {
        if (!StopServer(dir, 30).ok()) ::kill(*server, SIGKILL);
        ::waitpid(*server, nullptr, 0);
        ::unlink((dir + "/nbd.sock").c_str());
      }
      if (remove) std::filesystem::remove_all(dir);
    }
  } cleanup{dir, made_dir && !keep, &server};

  ArrayDirOptions o;
  o.devices = 4;
  o.device_size_bytes = *device_bytes;
  uint64_t capacity = 0;
  {
    auto a = ArrayDir::Create(dir, o, /*force=*/false);
    if (!a.ok()) return Fail("create", a.status());
    capacity = BlocksToBytes((*a)->volume().capacity_blocks());
    if (Status s = (*a)->Close(); !s.ok()) return Fail("create", s);
  }
  uint64_t bytes = capacity / 2 / (1 << 20) * (1 << 20);
  if (!size.empty()) {
    auto b = ParseSize(size);
    if (!b.ok()) return Fail("--size", b.status());
    bytes = *b;
  }
  if (bytes == 0 || bytes > capacity || bytes % kBlockSize != 0) {
    return Fail("--size",
                Status::InvalidArgument("must be a multiple of 4K and at most the volume (" +
                                        std::to_string(capacity >> 20) + " MiB)"));
  }
  std::printf("eraid demo: 4 emulated drives of %s flash (2x expansion, zstd, FlashAlloc) in %s\n",
              device_size.c_str(), dir.c_str());
  std::printf("  volume: %llu MiB (SepBIT log over elastic RAID5/RAID10, n+1 = 4)\n",
              static_cast<unsigned long long>(capacity >> 20));

  ServeOptions so;
  so.dir = dir;
  so.log = dir + "/serve.log";
  auto pid = StartServer(so);
  if (!pid.ok()) return Fail("serve", pid.status());
  server = *pid;
  std::printf("  served by nbdkit on %s (pid %d)\n", (dir + "/nbd.sock").c_str(),
              static_cast<int>(server));

  const std::string uri = NbdUnixUri(dir + "/nbd.sock");
  const std::vector<std::string> job{"--name=demo",
                                     "--ioengine=nbd",
                                     "--uri=" + uri,
                                     "--rw=randwrite",
                                     "--bs=4k",
                                     "--iodepth=" + std::to_string(iodepth),
                                     "--size=" + std::to_string(bytes),
                                     "--verify=crc32c",
                                     "--buffer_compress_percentage=" + std::to_string(compress_pct),
                                     "--refill_buffers",
                                     "--verify_state_save=0"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> all = job;
    all.insert(all.end(), extra.begin(), extra.end());
    return all;
  };

  // 1. Writes, with a drive failing half-way through.
  std::printf(
      "1. fio: %llu MiB of 4 KiB random writes, QD %u, %u%% compressible; drive %u fails "
      "half-way\n",
      static_cast<unsigned long long>(bytes >> 20), iodepth, compress_pct, fail_device);
  std::atomic<bool> writing{true};
  std::atomic<bool> failed{false};
  std::thread injector([&] {
    while (writing) {
      const double valid = JsonNumberAt(StatusJson(dir), "/valid_bytes");
      if (valid >= double(bytes) / 2) {
        auto r = AdminCall(dir, {"fail", std::to_string(fail_device)}, nullptr);
        failed = r.ok() && r->rc == 0;
        std::printf("   ... drive %u failed at %.0f MiB written\n", fail_device, valid / 1048576);
        std::fflush(stdout);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  auto w = RunFio(with({"--do_verify=0"}), fio);
  writing = false;
  injector.join();
  if (!w.ok()) return Fail("fio write", w.status());
  if (!failed)
    return Fail("failure injection", Status::Aborted("the drive was not failed mid-run"));
  std::printf("   %.0f IOPS, latency p50 %.0f us, p99 %.0f us\n", w->write_iops, w->write_p50_us,
              w->write_p99_us);

  // 2. Every block read back and verified, degraded.
  std::printf("2. fio: verify every block, degraded\n");
  auto d = RunFio(with({"--verify_only"}), fio);
  if (!d.ok()) return Fail("fio verify (degraded)", d.status());
  std::printf("   %.0f IOPS, latency p50 %.0f us, p99 %.0f us, 0 verify errors\n", d->read_iops,
              d->read_p50_us, d->read_p99_us);

  // 3. Rebuild onto a fresh drive, online.
  std::printf("3. replace drive %u and rebuild\n", fail_device);
  const auto t0 = std::chrono::steady_clock::now();
  Result<AdminReply> rep = Status::Aborted("not run");
  {
    ProgressBar bar("   rebuild");
    rep = AdminCall(dir, {"replace", std::to_string(fail_device), "", "0", "--json"},
                    [&](double f) { bar.Update(f); });
  }
  if (!rep.ok()) return Fail("replace", rep.status());
  if (rep->rc != 0) return Fail("replace", Status::IoError(rep->text));
  const double rebuild_s = Since(t0);
  std::printf("   %.1f MiB rebuilt in %.2f s\n", JsonNumberAt(rep->text, "/bytes") / 1048576,
              rebuild_s);

  // 4. Verified again, healthy; then a scrub.
  std::printf("4. fio: verify every block again, healthy; scrub\n");
  auto h = RunFio(with({"--verify_only"}), fio);
  if (!h.ok()) return Fail("fio verify (healthy)", h.status());
  std::printf("   %.0f IOPS, latency p50 %.0f us, p99 %.0f us, 0 verify errors\n", h->read_iops,
              h->read_p50_us, h->read_p99_us);
  auto scrub = AdminCall(dir, {"scrub", "--json"}, nullptr);
  if (!scrub.ok()) return Fail("scrub", scrub.status());
  const double mismatches = JsonNumberAt(scrub->text, "/mismatches", -1);
  const double unrepairable = JsonNumberAt(scrub->text, "/unrepairable", -1);

  const std::string st = StatusJson(dir);
  std::printf("\nsummary\n");
  std::printf(
      "  random write     %8.0f IOPS  p50 %5.0f us  p99 %6.0f us  (QD %u, a drive failing "
      "half-way)\n",
      w->write_iops, w->write_p50_us, w->write_p99_us, iodepth);
  std::printf("  random read      %8.0f IOPS  p50 %5.0f us  p99 %6.0f us  degraded\n", d->read_iops,
              d->read_p50_us, d->read_p99_us);
  std::printf("  random read      %8.0f IOPS  p50 %5.0f us  p99 %6.0f us  healthy\n", h->read_iops,
              h->read_p50_us, h->read_p99_us);
  std::printf("  log WA           %.3f\n", JsonNumberAt(st, "/wa/log"));
  std::printf("  RAID WA          %.3f (blocks written to drives per block the log wrote)\n",
              JsonNumberAt(st, "/wa/raid"));
  std::printf("  device WAF       %.3f\n", JsonNumberAt(st, "/wa/device"));
  std::printf("  compression      %.2f : 1\n", JsonNumberAt(st, "/compression"));
  std::printf("  RAID10 coverage  %.1f%% of user data\n",
              100 * JsonNumberAt(st, "/raid10_coverage"));
  std::printf("  rebuild          %.2f s\n", rebuild_s);
  std::printf("  scrub            %.0f mismatches, %.0f unrepairable\n", mismatches, unrepairable);
  std::printf("  verification     fio verify=crc32c over all %llu MiB, twice: passed\n",
              static_cast<unsigned long long>(bytes >> 20));
  if (keep) std::printf("  kept: %s\n", dir.c_str());
  return mismatches == 0 && unrepairable == 0 ? 0 : 1;
}

}  // namespace eraid
