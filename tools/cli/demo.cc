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

struct DemoOptions {
  std::string dir, device_size = "512M", size, fio = "fio";
  uint32_t compress_pct = 50, iodepth = 16, fail_device = 2;
  bool keep = false, quick = false;
  uint64_t device_bytes = 0;
};

// The command line; -1 to go on, else the exit code.
int ParseDemo(int argc, char** argv, DemoOptions* o) {
  po::options_description desc(
      "eraid demo [options]\n"
      "4 emulated compressing drives in a temporary folder, served over NBD by nbdkit; fio\n"
      "4 KiB random writes with verify=crc32c; a drive fails mid-run; every block is verified\n"
      "degraded; the drive is rebuilt; every block is verified again; scrub; a summary.\n"
      "options");
  desc.add_options()("help,h", "this text")("quick", po::bool_switch(&o->quick),
                                            "a small run (128M drives, 64 MiB written)")(
      "device-size", po::value(&o->device_size)->default_value(o->device_size),
      "flash per emulated drive")("size", po::value(&o->size),
                                  "bytes fio writes and verifies (default: half the volume)")(
      "compressibility", po::value(&o->compress_pct)->default_value(o->compress_pct),
      "fio buffer_compress_percentage (0..95)")(
      "iodepth", po::value(&o->iodepth)->default_value(o->iodepth), "fio queue depth (1..256)")(
      "fail-device", po::value(&o->fail_device)->default_value(o->fail_device),
      "the drive that fails (0..3)")(
      "dir", po::value(&o->dir),
      "where the array goes (default: a new temporary folder, removed after)")(
      "keep", po::bool_switch(&o->keep), "keep the array afterwards")(
      "fio", po::value(&o->fio)->default_value(o->fio), "the fio binary");
  po::variables_map vm;
  if (int rc = ParseOptions("eraid demo", desc, argc, argv, &vm); rc >= 0) return rc;
  if (o->quick) {
    if (vm["device-size"].defaulted()) o->device_size = "128M";
    if (o->size.empty()) o->size = "64M";
  }
  if (o->compress_pct > 95 || o->iodepth < 1 || o->iodepth > 256 || o->fail_device > 3) {
    std::cerr << "eraid demo: need --compressibility <= 95, --iodepth 1..256, --fail-device 0..3\n";
    return 2;
  }
  auto device_bytes = ParseSize(o->device_size);
  if (!device_bytes.ok()) return Fail("--device-size", device_bytes.status());
  o->device_bytes = *device_bytes;
  return -1;
}

// The array made and closed; its volume's capacity in bytes.
Result<uint64_t> CreateDemoArray(const DemoOptions& o) {
  ArrayDirOptions ao;
  ao.devices = 4;
  ao.device_size_bytes = o.device_bytes;
  ERAID_ASSIGN_OR_RETURN(auto a, ArrayDir::Create(o.dir, ao, /*force=*/false));
  const uint64_t capacity = BlocksToBytes(a->volume().capacity_blocks());
  ERAID_RETURN_IF_ERROR(a->Close());
  return capacity;
}

// What fio writes: --size, or half the volume.
Result<uint64_t> DemoBytes(const DemoOptions& o, uint64_t capacity) {
  uint64_t bytes = capacity / 2 / (1 << 20) * (1 << 20);
  if (!o.size.empty()) {
    ERAID_ASSIGN_OR_RETURN(bytes, ParseSize(o.size));
  }
  if (bytes == 0 || bytes > capacity || bytes % kBlockSize != 0) {
    return Status::InvalidArgument("must be a multiple of 4K and at most the volume (" +
                                   std::to_string(capacity >> 20) + " MiB)");
  }
  return bytes;
}

// fio's writes (`job`), with drive `o.fail_device` failed once half of `bytes` is written.
Result<FioResult> WriteWhileADriveFails(const DemoOptions& o, uint64_t bytes,
                                        std::vector<std::string> job) {
  std::atomic<bool> writing{true};
  std::atomic<bool> failed{false};
  std::thread injector([&] {
    while (writing) {
      const double valid = JsonNumberAt(StatusJson(o.dir), "/valid_bytes");
      if (valid >= double(bytes) / 2) {
        auto r = AdminCall(o.dir, {"fail", std::to_string(o.fail_device)}, nullptr);
        failed = r.ok() && r->rc == 0;
        std::printf("   ... drive %u failed at %.0f MiB written\n", o.fail_device, valid / 1048576);
        std::fflush(stdout);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  job.push_back("--do_verify=0");
  auto w = RunFio(job, o.fio);
  writing = false;
  injector.join();
  if (w.ok() && !failed)
    return Status::Aborted("failure injection: the drive was not failed mid-run");
  return w;
}

// A fresh drive in the failed one's place, rebuilt online with a progress bar: its
// reply (JSON).
Result<AdminReply> ReplaceFailed(const DemoOptions& o) {
  Result<AdminReply> rep = Status::Aborted("not run");
  {
    ProgressBar bar("   rebuild");
    rep = AdminCall(o.dir, {"replace", std::to_string(o.fail_device), "", "0", "--json"},
                    [&](double f) { bar.Update(f); });
  }
  if (rep.ok() && rep->rc != 0) return Status::IoError(rep->text);
  return rep;
}

struct DemoFigures {
  FioResult write, degraded, healthy;
  double rebuild_s = 0, mismatches = 0, unrepairable = 0;
  uint64_t bytes = 0;
};

void PrintSummary(const DemoOptions& o, const DemoFigures& f, const std::string& st) {
  std::printf("\nsummary\n");
  std::printf(
      "  random write     %8.0f IOPS  p50 %5.0f us  p99 %6.0f us  (QD %u, a drive failing "
      "half-way)\n",
      f.write.write_iops, f.write.write_p50_us, f.write.write_p99_us, o.iodepth);
  std::printf("  random read      %8.0f IOPS  p50 %5.0f us  p99 %6.0f us  degraded\n",
              f.degraded.read_iops, f.degraded.read_p50_us, f.degraded.read_p99_us);
  std::printf("  random read      %8.0f IOPS  p50 %5.0f us  p99 %6.0f us  healthy\n",
              f.healthy.read_iops, f.healthy.read_p50_us, f.healthy.read_p99_us);
  std::printf("  log WA           %.3f\n", JsonNumberAt(st, "/wa/log"));
  std::printf("  RAID WA          %.3f (blocks written to drives per block the log wrote)\n",
              JsonNumberAt(st, "/wa/raid"));
  std::printf("  device WAF       %.3f\n", JsonNumberAt(st, "/wa/device"));
  std::printf("  compression      %.2f : 1\n", JsonNumberAt(st, "/compression"));
  std::printf("  RAID10 coverage  %.1f%% of user data\n",
              100 * JsonNumberAt(st, "/raid10_coverage"));
  std::printf("  rebuild          %.2f s\n", f.rebuild_s);
  std::printf("  scrub            %.0f mismatches, %.0f unrepairable\n", f.mismatches,
              f.unrepairable);
  std::printf("  verification     fio verify=crc32c over all %llu MiB, twice: passed\n",
              static_cast<unsigned long long>(f.bytes >> 20));
  if (o.keep) std::printf("  kept: %s\n", o.dir.c_str());
}

}  // namespace

int RunDemo(int argc, char** argv) {
  DemoOptions o;
  if (int rc = ParseDemo(argc, argv, &o); rc >= 0) return rc;
  const bool made_dir = o.dir.empty();
  if (made_dir) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "eraid-demo.XXXXXX").string();
    if (!mkdtemp(tmpl.data())) return Fail("mkdtemp", Status::IoError(tmpl));
    o.dir = tmpl;
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
  } cleanup{o.dir, made_dir && !o.keep, &server};

  auto capacity = CreateDemoArray(o);
  if (!capacity.ok()) return Fail("create", capacity.status());
  DemoFigures f;
  auto bytes = DemoBytes(o, *capacity);
  if (!bytes.ok()) return Fail("--size", bytes.status());
  f.bytes = *bytes;
  std::printf("eraid demo: 4 emulated drives of %s flash (2x expansion, zstd, FlashAlloc) in %s\n",
              o.device_size.c_str(), o.dir.c_str());
  std::printf("  volume: %llu MiB (SepBIT log over elastic RAID5/RAID10, n+1 = 4)\n",
              static_cast<unsigned long long>(*capacity >> 20));

  ServeOptions so;
  so.dir = o.dir;
  so.log = o.dir + "/serve.log";
  auto pid = StartServer(so);
  if (!pid.ok()) return Fail("serve", pid.status());
  server = *pid;
  std::printf("  served by nbdkit on %s (pid %d)\n", (o.dir + "/nbd.sock").c_str(),
              static_cast<int>(server));

  const std::string uri = NbdUnixUri(o.dir + "/nbd.sock");
  const std::vector<std::string> job{
      "--name=demo",
      "--ioengine=nbd",
      "--uri=" + uri,
      "--rw=randwrite",
      "--bs=4k",
      "--iodepth=" + std::to_string(o.iodepth),
      "--size=" + std::to_string(f.bytes),
      "--verify=crc32c",
      "--buffer_compress_percentage=" + std::to_string(o.compress_pct),
      "--refill_buffers",
      "--verify_state_save=0"};
  auto verify = job;
  verify.push_back("--verify_only");

  std::printf(
      "1. fio: %llu MiB of 4 KiB random writes, QD %u, %u%% compressible; drive %u fails "
      "half-way\n",
      static_cast<unsigned long long>(f.bytes >> 20), o.iodepth, o.compress_pct, o.fail_device);
  auto w = WriteWhileADriveFails(o, f.bytes, job);
  if (!w.ok()) return Fail("fio write", w.status());
  f.write = *w;
  std::printf("   %.0f IOPS, latency p50 %.0f us, p99 %.0f us\n", w->write_iops, w->write_p50_us,
              w->write_p99_us);

  std::printf("2. fio: verify every block, degraded\n");
  auto d = RunFio(verify, o.fio);
  if (!d.ok()) return Fail("fio verify (degraded)", d.status());
  f.degraded = *d;
  std::printf("   %.0f IOPS, latency p50 %.0f us, p99 %.0f us, 0 verify errors\n", d->read_iops,
              d->read_p50_us, d->read_p99_us);

  std::printf("3. replace drive %u and rebuild\n", o.fail_device);
  const auto t0 = std::chrono::steady_clock::now();
  auto rep = ReplaceFailed(o);
  if (!rep.ok()) return Fail("replace", rep.status());
  f.rebuild_s = Since(t0);
  std::printf("   %.1f MiB rebuilt in %.2f s\n", JsonNumberAt(rep->text, "/bytes") / 1048576,
              f.rebuild_s);

  std::printf("4. fio: verify every block again, healthy; scrub\n");
  auto h = RunFio(verify, o.fio);
  if (!h.ok()) return Fail("fio verify (healthy)", h.status());
  f.healthy = *h;
  std::printf("   %.0f IOPS, latency p50 %.0f us, p99 %.0f us, 0 verify errors\n", h->read_iops,
              h->read_p50_us, h->read_p99_us);
  auto scrub = AdminCall(o.dir, {"scrub", "--json"}, nullptr);
  if (!scrub.ok()) return Fail("scrub", scrub.status());
  f.mismatches = JsonNumberAt(scrub->text, "/mismatches", -1);
  f.unrepairable = JsonNumberAt(scrub->text, "/unrepairable", -1);
  PrintSummary(o, f, StatusJson(o.dir));
  return f.mismatches == 0 && f.unrepairable == 0 ? 0 : 1;
}

}  // namespace eraid
