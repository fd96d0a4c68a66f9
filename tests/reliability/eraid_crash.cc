// eraid-crash: kills the NBD server with SIGKILL at seeded random moments under a write
// load, restarts it, and checks that nothing acknowledged as durable was lost and that no
// block holds anything it should not (DESIGN.md, "Invariants").
//
// The load: several libnbd connections (each its own thread and its own LBAs) write
// self-describing 4 KiB blocks (a header with magic, LBA and version; the rest derived
// from them, half zeros so the drives compress), now and then with FUA, now and then a
// trim, and a flush every few requests. A ledger per LBA keeps the durable version (the
// last acknowledged before a flush completed, or by a FUA write) and the versions written
// since (which may or may not have reached the disk). After each kill the server restarts
// (recovery runs), and every LBA is read: it must be the durable version or one written
// after it, whole — never an older one, never a torn or foreign block. The elastic
// scheduler runs in the server throughout, and the LBA span is three quarters of the
// capacity, so the log collects garbage and converts segments while it is killed.
// At the end, a scrub must find no mismatch.
//
// Exit status: 0 all verified, 1 a violation (printed with the seed), 2 bad arguments.
#include <libnbd.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <latch>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "common/encoding.h"
#include "tests/support/seed.h"
#include "tools/cli/fio_runner.h"
#include "tools/cli/options.h"
#include "tools/json.h"
#include "tools/server/admin.h"
#include "tools/server/array_dir.h"
#include "tools/server/serve.h"

namespace po = boost::program_options;
using namespace eraid;  // NOLINT: a tool

namespace {

constexpr uint64_t kMagic = 0x31485341524345ull;  // "ECRASH1"

// The block for (lba, version): header, then bytes from a generator seeded by both, the
// second half of each 512-byte stretch zero.
void MakeBlock(uint64_t seed, uint64_t lba, uint64_t version, std::byte* out) {
  std::memset(out, 0, kBlockSize);
  if (version == 0) return;
  std::mt19937_64 g(seed ^ (lba * 0x9E3779B97F4A7C15ull) ^ (version << 20));
  for (size_t at = 32; at < kBlockSize; at += 8) {
    if ((at / 256) % 2 == 1) continue;
    const uint64_t v = g();
    std::memcpy(out + at, &v, 8);
  }
  PutLe64(out, kMagic);
  PutLe64(out + 8, lba);
  PutLe64(out + 16, version);
}

struct Slot {
  uint64_t durable = 0;         // version on disk for sure (0: zeros)
  std::vector<uint64_t> maybe;  // written (or trimmed: 0) since, not yet durable
};

struct Totals {
  std::atomic<uint64_t> writes{0}, fua{0}, trims{0}, flushes{0};
};

struct Options {
  uint64_t seed = 1;
  uint32_t kills = 20, connections = 4;
  uint64_t device_size = 32ull << 20;
  uint32_t min_ms = 30, max_ms = 400;
  std::string dir, plugin;
  Policy policy = Policy::kElastic;
  bool keep = false;
  // The server kills itself halfway through writing a drive checkpoint (the crash point
  // "drive-checkpoint", common/crash_point.h): its 5th to 8th since it opened (the open
  // writes one per drive, 4), instead of being killed at a random moment; max_ms then
  // bounds the wait for it, and a timed kill follows if no checkpoint came.
  bool at_checkpoint = false;
};

class Harness {
 public:
  explicit Harness(const Options& o) : o_(o), rng_(o.seed) {}

  int Run() {
    ArrayDirOptions ao;
    ao.devices = 4;
    ao.device_size_bytes = o_.device_size;
    ao.scheduler.policy = o_.policy;
    auto a = ArrayDir::Create(dir_ = o_.dir, ao, false);
    if (!a.ok()) return Fail("create: " + a.status().ToString());
    span_ = (*a)->volume().capacity_blocks() * 3 / 4;
    if (Status s = (*a)->Close(); !s.ok()) return Fail("close: " + s.ToString());
    a->reset();
    ledger_.assign(span_, Slot{});
    std::printf("eraid-crash: seed %llu, %u kills, %u connections, span %llu blocks, array in %s\n",
                (unsigned long long)o_.seed, o_.kills, o_.connections, (unsigned long long)span_,
                dir_.c_str());
    std::fflush(stdout);
    for (uint32_t k = 0; k <= o_.kills; ++k) {
      if (o_.at_checkpoint && k < o_.kills) {
        const std::string point = "drive-checkpoint:" + std::to_string(5 + rng_() % 4);
        ::setenv("ERAID_CRASH_POINT", point.c_str(), 1);
      } else {
        ::unsetenv("ERAID_CRASH_POINT");
      }
      if (int rc = Serve(); rc != 0) return rc;
      // The server's log says what the open was: the first after the array was closed
      // cleanly, every later one a crash recovery (with its time).
      const std::string opened = LastOpenLine();
      if ((k == 0) != (opened.find("after a clean stop") != std::string::npos) ||
          (k > 0) != (opened.find("a crash recovery of 4 drive(s)") != std::string::npos)) {
        return Fail("round " + std::to_string(k) + ": the log's open line: '" + opened + "'");
      }
      if (int rc = Verify(k); rc != 0) return rc;
      if (k == o_.kills) break;
      if (int rc = LoadAndKill(k); rc != 0) return rc;
      if (k % 5 == 4 || k + 1 == o_.kills) {
        std::fprintf(stderr, "eraid-crash: %u/%u kills, %llu writes, %llu blocks verified\n", k + 1,
                     o_.kills, (unsigned long long)totals_.writes.load(),
                     (unsigned long long)verified_);
      }
    }
    auto scrub = AdminCall(dir_, {"scrub", "--json"}, nullptr);
    if (!scrub.ok()) return Fail("scrub: " + scrub.status().ToString());
    const double mismatches = JsonNumberAt(scrub->text, "/mismatches", -1);
    const double unrepairable = JsonNumberAt(scrub->text, "/unrepairable", -1);
    if (Status s = StopServer(dir_); !s.ok()) return Fail("stop: " + s.ToString());
    Reap();
    if (mismatches != 0 || unrepairable != 0) return Fail("scrub after the kills: " + scrub->text);
    if (o_.at_checkpoint) {
      std::printf(
          "eraid-crash: %u of %u kills were the server's own, halfway through a checkpoint\n",
          self_kills_, o_.kills);
      // Checkpoints come every few MiB a drive stores: a run where none came while the
      // connections wrote tested nothing of them.
      if (self_kills_ == 0) return Fail("no kill came at a checkpoint: raise --max-ms");
    }
    std::printf(
        "eraid-crash: seed %llu: %u kills, %llu writes (%llu FUA), %llu trims, %llu flushes, "
        "%llu blocks verified, 0 lost or wrong; scrub 0 mismatches\n",
        (unsigned long long)o_.seed, o_.kills, (unsigned long long)totals_.writes.load(),
        (unsigned long long)totals_.fua.load(), (unsigned long long)totals_.trims.load(),
        (unsigned long long)totals_.flushes.load(), (unsigned long long)verified_);
    return 0;
  }

 private:
  int Fail(const std::string& what) {
    std::fprintf(
        stderr,
        "eraid-crash: seed %llu: FAILED: %s\n  (array kept in %s; replay with --seed %llu)\n",
        (unsigned long long)o_.seed, what.c_str(), dir_.c_str(), (unsigned long long)o_.seed);
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      Reap();
    }
    failed_ = true;
    return 1;
  }
  void Reap() {
    if (pid_ <= 0) return;
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  int Serve() {
    ServeOptions so;
    so.dir = dir_;
    so.log = dir_ + "/serve.log";
    if (!o_.plugin.empty()) so.plugin = o_.plugin;
    auto pid = StartServer(so);
    if (!pid.ok()) return Fail("restart: " + pid.status().ToString());
    pid_ = *pid;
    return 0;
  }
  std::string LastOpenLine() const {
    std::ifstream in(dir_ + "/serve.log");
    std::string line, last;
    while (std::getline(in, line))
      if (line.rfind("eraid: opened ", 0) == 0) last = line;
    return last;
  }
  nbd_handle* Connect() {
    nbd_handle* h = nbd_create();
    if (h == nullptr) return nullptr;
    if (nbd_connect_unix(h, (dir_ + "/nbd.sock").c_str()) != 0) {
      nbd_close(h);
      return nullptr;
    }
    return h;
  }

  // Reads every LBA of the span and checks it against the ledger; then makes what is
  // there the durable state (a flush), as the next round's base.
  int Verify(uint32_t round) {
    nbd_handle* h = Connect();
    if (h == nullptr) return Fail(std::string("connect: ") + nbd_get_error());
    constexpr uint64_t kChunk = 64;
    std::vector<std::byte> buf(kChunk * kBlockSize), want(kBlockSize);
    for (uint64_t first = 0; first < span_; first += kChunk) {
      const uint64_t n = std::min(kChunk, span_ - first);
      if (nbd_pread(h, buf.data(), n * kBlockSize, first * kBlockSize, 0) != 0) {
        std::string e = nbd_get_error();
        nbd_close(h);
        return Fail("read after restart " + std::to_string(round) + ": " + e);
      }
      for (uint64_t i = 0; i < n; ++i) {
        const uint64_t lba = first + i;
        const std::byte* got = buf.data() + i * kBlockSize;
        uint64_t version = 0;
        if (GetLe64(got) == kMagic && GetLe64(got + 8) == lba) version = GetLe64(got + 16);
        MakeBlock(o_.seed, lba, version, want.data());
        Slot& slot = ledger_[lba];
        const bool whole = std::memcmp(got, want.data(), kBlockSize) == 0;
        const bool allowed =
            version == slot.durable ||
            std::find(slot.maybe.begin(), slot.maybe.end(), version) != slot.maybe.end();
        if (!whole || !allowed) {
          std::string maybe;
          for (uint64_t v : slot.maybe) maybe += " " + std::to_string(v);
          nbd_close(h);
          return Fail("after kill " + std::to_string(round) + ", LBA " + std::to_string(lba) +
                      ": " +
                      (whole ? "version " + std::to_string(version)
                             : std::string("a torn or foreign block")) +
                      "; durable " + std::to_string(slot.durable) + ", maybe {" + maybe + " }");
        }
        slot.durable = version;
        slot.maybe.clear();
        ++verified_;
      }
    }
    const int rc = nbd_flush(h, 0);
    nbd_shutdown(h, 0);
    nbd_close(h);
    if (rc != 0) return Fail("flush after verify");
    return 0;
  }

  // Writes from several connections until the server is killed at a random moment.
  int LoadAndKill(uint32_t round) {
    std::uniform_int_distribution<uint32_t> delay(o_.min_ms, o_.max_ms);
    // At a checkpoint, the server kills itself when one comes: wait for it all of max_ms
    // (a random, shorter wait left a slow run, under TSan, with no checkpoint in 6 rounds).
    const uint32_t drawn = delay(rng_);
    const uint32_t kill_ms = o_.at_checkpoint ? o_.max_ms : drawn;
    std::vector<std::thread> threads;
    std::atomic<bool> connect_failed{false};
    // The kill's delay counts from when every connection is up: a slow start (TSan) once
    // let the kill come first, and a connect to a killed server failed the run.
    std::latch connected(o_.connections);
    for (uint32_t c = 0; c < o_.connections; ++c) {
      const uint64_t thread_seed = rng_();
      threads.emplace_back([this, c, thread_seed, &connect_failed, &connected] {
        nbd_handle* h = Connect();
        if (h == nullptr) connect_failed = true;
        connected.count_down();
        if (h == nullptr) return;
        std::mt19937_64 g(thread_seed);
        std::vector<std::byte> block(kBlockSize);
        std::vector<uint64_t> since_flush;  // LBAs written on this connection since its last flush
        uint32_t until_flush = 1 + g() % 64;
        const uint64_t mine = (span_ - c + o_.connections - 1) / o_.connections;
        while (true) {
          const uint64_t lba = c + (g() % mine) * o_.connections;
          if (lba >= span_) continue;
          Slot& slot = ledger_[lba];  // this connection's LBAs only: no lock needed
          const uint32_t kind = g() % 100;
          int rc;
          if (kind < 2) {
            slot.maybe.push_back(0);
            rc = nbd_trim(h, kBlockSize, lba * kBlockSize, 0);
            if (rc == 0) totals_.trims++;
          } else {
            const uint64_t version = next_version_.fetch_add(1) + 1;
            MakeBlock(o_.seed, lba, version, block.data());
            slot.maybe.push_back(version);
            const bool fua = kind < 7;
            rc = nbd_pwrite(h, block.data(), kBlockSize, lba * kBlockSize,
                            fua ? LIBNBD_CMD_FLAG_FUA : 0);
            if (rc == 0) {
              totals_.writes++;
              if (fua) {
                totals_.fua++;
                slot.durable = version;  // newer than anything else pending for this LBA
                slot.maybe.clear();
              }
            }
          }
          if (rc != 0) break;  // killed
          since_flush.push_back(lba);
          if (--until_flush == 0) {
            if (nbd_flush(h, 0) != 0) break;
            totals_.flushes++;
            for (uint64_t l : since_flush) {
              Slot& s = ledger_[l];
              if (!s.maybe.empty()) {
                s.durable = s.maybe.back();
                s.maybe.clear();
              }
            }
            since_flush.clear();
            until_flush = 1 + g() % 64;
          }
        }
        nbd_close(h);
      });
    }
    connected.wait();
    bool died = false;  // by its own crash point
    if (!connect_failed) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kill_ms);
      do {
        std::this_thread::sleep_for(std::chrono::milliseconds(o_.at_checkpoint ? 5 : kill_ms));
        int status = 0;
        if (o_.at_checkpoint && ::waitpid(pid_, &status, WNOHANG) == pid_) {
          died = true;
          pid_ = -1;
          self_kills_ += WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
          if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)) {
            for (auto& t : threads) t.join();
            return Fail("the server exited on its own in round " + std::to_string(round) +
                        " (status " + std::to_string(status) + ")");
          }
        }
      } while (!died && std::chrono::steady_clock::now() < deadline);
    }
    if (!died) ::kill(pid_, SIGKILL);
    for (auto& t : threads) t.join();
    Reap();
    if (connect_failed) return Fail("connect in round " + std::to_string(round));
    return 0;
  }

  Options o_;
  std::mt19937_64 rng_;
  std::string dir_;
  uint64_t span_ = 0;
  std::vector<Slot> ledger_;
  std::atomic<uint64_t> next_version_{0};
  Totals totals_;
  uint64_t verified_ = 0;
  uint32_t self_kills_ = 0;
  pid_t pid_ = -1;
  bool failed_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::string size = "32M", policy = "elastic";
  bool soak = false;
  po::options_description desc(
      "eraid-crash [options]: SIGKILLs the NBD server under writes at seeded random moments, "
      "restarts\n"
      "it, and verifies every block against a ledger of what was acknowledged durable.\noptions");
  desc.add_options()("help,h", "this text")(
      "seed", po::value(&o.seed),
      "random seed (default: ERAID_SEED, else a fresh one; printed either way)")(
      "kills", po::value(&o.kills)->default_value(o.kills), "server kills")(
      "soak", po::bool_switch(&soak), "a long run: 200 kills unless --kills says otherwise")(
      "connections", po::value(&o.connections)->default_value(o.connections),
      "writing NBD connections")("device-size", po::value(&size)->default_value(size),
                                 "flash per emulated drive")(
      "min-ms", po::value(&o.min_ms)->default_value(o.min_ms),
      "shortest time from the connections being up to a kill")(
      "max-ms", po::value(&o.max_ms)->default_value(o.max_ms),
      "longest time from the connections being up to a kill")(
      "policy", po::value(&policy)->default_value(policy),
      "conversion policy: elastic | raid5 | raid10 | manual")(
      "dir", po::value(&o.dir), "where the array goes (default: a new temporary folder)")(
      "plugin", po::value(&o.plugin), "the nbdkit plugin (default: next to this program)")(
      "keep", po::bool_switch(&o.keep), "keep the array afterwards")(
      "at-checkpoint", po::bool_switch(&o.at_checkpoint),
      "the server kills itself halfway through writing a drive checkpoint (its 5th to 8th "
      "since it opened) instead of at a random moment; --max-ms bounds the wait for it");
  po::variables_map vm;
  if (int rc = ParseOptions("eraid-crash", desc, argc, argv, &vm); rc >= 0) return rc;
  if (soak && vm["kills"].defaulted()) o.kills = 200;
  if (!vm.count("seed")) o.seed = TestSeed();  // ERAID_SEED, else a fresh one
  auto bytes = ParseSize(size);
  if (!bytes.ok()) {
    std::cerr << "eraid-crash: --device-size: " << bytes.status().message() << "\n";
    return 2;
  }
  o.device_size = *bytes;
  auto pol = ParsePolicy(policy);
  if (!pol.ok()) {
    std::cerr << "eraid-crash: --policy: " << pol.status().message() << "\n";
    return 2;
  }
  o.policy = *pol;
  if (o.connections == 0 || o.min_ms > o.max_ms) {
    std::cerr << "eraid-crash: --connections must be > 0 and --min-ms <= --max-ms\n";
    return 2;
  }
  bool temporary = false;
  if (o.dir.empty()) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "eraid-crash.XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) {
      std::perror("eraid-crash: mkdtemp");
      return 1;
    }
    o.dir = tmpl + "/array";
    temporary = true;
  }
  ::signal(SIGPIPE, SIG_IGN);
  Harness h(o);
  const int rc = h.Run();
  if (rc == 0 && temporary && !o.keep)
    std::filesystem::remove_all(std::filesystem::path(o.dir).parent_path());
  return rc;
}
