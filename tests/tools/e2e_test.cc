// End to end through real NBD: an array made like `eraid create`, served by nbdkit with
// the eraid plugin (StartServer, what `eraid serve` runs), and real clients:
//   - fio (ioengine=nbd) random writes with verify=crc32c over the whole volume;
//   - the same with a drive failed half-way through the writes, every block verified
//     degraded, then after replace + rebuild, then scrub: 0 mismatches;
//   - everything still verifies after the server restarts;
//   - libnbd with its client-side checks off, sending out-of-range requests: each fails
//     with EINVAL (ENOSPC for writes) and the server keeps serving;
//   - any request size: byte-granular reads and writes against a model, two connections
//     writing different sectors of the same blocks at once, and after a restart;
//   - the sockets are 0600; the admin socket rejects malformed commands;
//   - the scheduler under zoned 80/20 reads at full speed: the hot fifth is mirrored, a
//     stable workload stops converting, a hot zone that moves is followed (from what
//     `eraid inspect --json` says of each segment's LBAs and scheme).
// fio, nbdkit and libnbd are installed by tools/install-deps.sh (the test command runs it).
#include <gtest/gtest.h>
#include <libnbd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "tests/support/seed.h"
#include "tools/cli/fio_runner.h"
#include "tools/json.h"
#include "tools/server/admin.h"
#include "tools/server/array_dir.h"
#include "tools/server/serve.h"

namespace eraid {
namespace {

class E2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "eraid-e2e.XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    ArrayDirOptions o;
    o.devices = 4;
    o.device_size_bytes = 64ull << 20;
    o.scheduler.policy = policy_;
    Configure(o);
    auto a = ArrayDir::Create(dir_, o, false);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    capacity_ = BlocksToBytes((*a)->volume().capacity_blocks());
    segment_bytes_ = BlocksToBytes((*a)->array().geometry().segment_positions());
    ASSERT_TRUE((*a)->Close().ok());
    a->reset();
    Serve();
  }
  virtual void Configure(ArrayDirOptions&) {}
  void TearDown() override {
    Stop();
    std::filesystem::remove_all(dir_);
  }
  void Serve() {
    ServeOptions so;
    so.dir = dir_;
    so.log = dir_ + "/serve.log";
    so.plugin = ERAID_PLUGIN_PATH;
    auto pid = StartServer(so);
    ASSERT_TRUE(pid.ok()) << pid.status().ToString() << "\n" << Log();
    pid_ = *pid;
  }
  void Stop() {
    if (pid_ <= 0) return;
    Status s = StopServer(dir_);
    EXPECT_TRUE(s.ok()) << s.ToString();
    int status = 0;
    ::waitpid(pid_, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "nbdkit exit status " << status << "\n"
        << Log();
    pid_ = -1;
  }
  std::string Log() const {
    std::ifstream f(dir_ + "/serve.log");
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  std::string Socket() const { return dir_ + "/nbd.sock"; }
  std::vector<std::string> Job(uint64_t bytes, std::vector<std::string> extra) const {
    std::vector<std::string> job{"--name=e2e",
                                 "--ioengine=nbd",
                                 "--uri=" + NbdUnixUri(Socket()),
                                 "--rw=randwrite",
                                 "--bs=4k",
                                 "--iodepth=16",
                                 "--size=" + std::to_string(bytes),
                                 "--verify=crc32c",
                                 "--buffer_compress_percentage=50",
                                 "--refill_buffers",
                                 "--verify_state_save=0"};
    job.insert(job.end(), extra.begin(), extra.end());
    return job;
  }
  AdminReply Admin(std::vector<std::string> words) {
    auto r = AdminCall(dir_, words, nullptr);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : AdminReply{-1, ""};
  }

  std::string dir_;
  Policy policy_ = Policy::kElastic;
  uint64_t capacity_ = 0, segment_bytes_ = 0;
  pid_t pid_ = -1;
};

TEST_F(E2eTest, FioVerifiesTheWholeVolumeAndAfterARestart) {
  const uint64_t bytes = capacity_ / kBlockSize * kBlockSize;
  auto w = RunFio(Job(bytes, {"--do_verify=1"}));  // writes every block, then reads and verifies it
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->error, 0);
  EXPECT_GT(w->write_iops, 0);
  Stop();
  Serve();
  auto v = RunFio(Job(bytes, {"--verify_only"}));
  ASSERT_TRUE(v.ok()) << "after a restart: " << v.status().ToString();
  EXPECT_GT(v->read_iops, 0);
}

// Under the manual policy only `eraid convert` converts: everything goes to RAID10 and
// back, paced; the pace is a floor on each pass's time (a segment waits until the bytes
// before it are due), and every block still verifies.
class E2eManualTest : public E2eTest {
 protected:
  E2eManualTest() { policy_ = Policy::kManual; }
};

TEST_F(E2eManualTest, PacedConversionsBothWaysKeepEveryBlock) {
  const uint64_t bytes = capacity_ / kBlockSize * kBlockSize;
  auto w = RunFio(Job(bytes, {"--do_verify=0"}));
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  AdminReply st = Admin({"status", "--json"});
  EXPECT_EQ(JsonNumberAt(st.text, "/conversions/to_raid10", -1), 0)
      << "manual: the scheduler converts nothing\n"
      << st.text;
  const uint64_t rate = 32ull << 20;
  for (const char* to : {"raid10", "raid5"}) {
    AdminReply r = Admin({"convert", to, "all", std::to_string(rate), "--json"});
    ASSERT_EQ(r.rc, 0) << r.text;
    const double moved = JsonNumberAt(r.text, "/bytes");
    EXPECT_GE(moved, double(bytes) / 2) << to << ": the sealed segments\n" << r.text;
    EXPECT_GE(JsonNumberAt(r.text, "/seconds"), (moved - double(segment_bytes_)) / double(rate))
        << r.text;
    auto v = RunFio(Job(bytes, {"--verify_only"}));
    ASSERT_TRUE(v.ok()) << "after converting to " << to << ": " << v.status().ToString();
  }
}

TEST_F(E2eTest, DriveFailsMidRunThenReplaceRebuildAndScrub) {
  const uint64_t bytes = capacity_ / kBlockSize * kBlockSize;
  std::atomic<bool> writing{true}, failed{false};
  std::thread injector([&] {
    while (writing) {
      auto st = AdminCall(dir_, {"status", "--json"}, nullptr);
      if (st.ok() && JsonNumberAt(st->text, "/valid_bytes") >= double(bytes) / 2) {
        auto r = AdminCall(dir_, {"fail", "1"}, nullptr);
        failed = r.ok() && r->rc == 0;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  auto w = RunFio(Job(bytes, {"--do_verify=1"}));
  writing = false;
  injector.join();
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_TRUE(failed) << "the drive must fail while fio writes";
  EXPECT_NE(Admin({"status", "--json"}).text.find("\"health\":\"degraded\""), std::string::npos);
  auto degraded = RunFio(Job(bytes, {"--verify_only"}));
  ASSERT_TRUE(degraded.ok()) << "degraded: " << degraded.status().ToString();

  AdminReply rep = Admin({"replace", "1", "", "0", "--json"});
  ASSERT_EQ(rep.rc, 0) << rep.text;
  EXPECT_NE(Admin({"status", "--json"}).text.find("\"health\":\"ok\""), std::string::npos);
  auto healthy = RunFio(Job(bytes, {"--verify_only"}));
  ASSERT_TRUE(healthy.ok()) << "after the rebuild: " << healthy.status().ToString();
  AdminReply scrub = Admin({"scrub", "--json"});
  ASSERT_EQ(scrub.rc, 0) << scrub.text;
  EXPECT_EQ(JsonNumberAt(scrub.text, "/mismatches", -1), 0) << scrub.text;
  EXPECT_GT(JsonNumberAt(scrub.text, "/blocks_checked"), double(bytes / kBlockSize) / 2)
      << scrub.text;

  // The replacement survives a restart: the manifest and superblocks agree.
  Stop();
  Serve();
  auto again = RunFio(Job(bytes, {"--verify_only"}));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
}

// The scheduler at full speed: a budget for about a third of the data (incompressible,
// expansion 1.8, β 0.67 — at this small size that is a third; issue 17 measured it on
// 512 MiB drives at β 0.8), a 2 s half-life so the suite converges in seconds, and fio
// reading zoned 80/20 at QD 16.
class E2eHotTest : public E2eTest {
 protected:
  void Configure(ArrayDirOptions& o) override {
    o.drive.expansion = 1.8;
    o.scheduler.beta = 0.67;
    o.scheduler.hotness.half_life_ms = 2000;
  }
  // Of the blocks in [from, to) twentieths of the volume, the shares that live in RAID10
  // segments (with reads uniform inside a zone, the share of its reads RAID10 serves) and
  // in open ones (which no scheduler converts: they are still being written).
  struct Shares {
    double mirrored = 0, open = 0;
  };
  Shares ZoneShares(int from, int to) {
    const std::string text = Admin({"inspect", "20", "--json"}).text;
    double all = 0, mirrored = 0, open = 0;
    // Each segment object:
    // {"index":N,"scheme":"raid10","state":"open",...,"lba_histogram":[a,b,...],...}.
    for (size_t at = text.find("{\"index\":"); at != std::string::npos;
         at = text.find("{\"index\":", at + 1)) {
      const size_t end = text.find('}', at);
      const std::string seg = text.substr(at, end - at);
      const size_t h = seg.find("\"lba_histogram\":[");
      if (h == std::string::npos) continue;
      const bool raid10 = seg.find("\"scheme\":\"raid10\"") != std::string::npos;
      const bool is_open = seg.find("\"state\":\"open\"") != std::string::npos;
      std::stringstream bins(seg.substr(h + 17, seg.find(']', h) - h - 17));
      std::string v;
      for (int bin = 0; std::getline(bins, v, ','); ++bin) {
        if (bin < from || bin >= to) continue;
        all += std::stod(v);
        if (raid10) mirrored += std::stod(v);
        if (is_open) open += std::stod(v);
      }
    }
    return all > 0 ? Shares{mirrored / all, open / all} : Shares{};
  }
  double ZoneShare(int from, int to) { return ZoneShares(from, to).mirrored; }
  double Conversions() {
    const std::string st = Admin({"status", "--json"}).text;
    return JsonNumberAt(st, "/conversions/to_raid10") + JsonNumberAt(st, "/conversions/to_raid5");
  }
  // Reads for `seconds` with the zoned distribution.
  void Read(const std::string& zones, int seconds) {
    auto r = RunFio({"--name=hot", "--ioengine=nbd", "--uri=" + NbdUnixUri(Socket()),
                     "--rw=randread", "--bs=4k", "--iodepth=16",
                     "--size=" + std::to_string(capacity_ / kBlockSize * kBlockSize),
                     "--random_distribution=" + zones, "--time_based",
                     "--runtime=" + std::to_string(seconds), "--randrepeat=0"});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_GT(r->read_iops, 0);
  }
  // Reads until the zone's share reaches 0.9; returns the seconds it took (or -1).
  int Converge(const std::string& zones, int from, int to, int limit_s) {
    for (int t = 0; t <= limit_s; t += 2) {
      if (ZoneShare(from, to) >= 0.9) return t;
      Read(zones, 2);
    }
    // What the scheduler saw, for whoever reads the failure: each segment's scheme, state,
    // valid blocks, LBA range and hotness density.
    std::printf("not converged; status and segments:\n%s\n%s\n", Admin({"status"}).text.c_str(),
                Admin({"inspect"}).text.c_str());
    return -1;
  }
};

TEST_F(E2eHotTest, ZonedReadsAtFullSpeedMirrorTheHotFifthAndFollowItWhenItMoves) {
  auto w =
      RunFio({"--name=fill", "--ioengine=nbd", "--uri=" + NbdUnixUri(Socket()), "--rw=write",
              "--bs=64k", "--iodepth=16",
              "--size=" + std::to_string(capacity_ / kBlockSize * kBlockSize), "--refill_buffers"});
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  // The last fifth first, then the middle one: both born RAID5 (the first segments took the
  // room for births), so the scheduler has to demote to mirror them.
  const std::string last = "zoned:20/80:80/20", middle = "zoned:10/40:80/20:10/40";
  const Shares l0 = ZoneShares(16, 20), m0 = ZoneShares(8, 12);
  std::printf("before: last fifth %.3f RAID10 %.3f open, middle %.3f RAID10 %.3f open\n",
              l0.mirrored, l0.open, m0.mirrored, m0.open);
  {
    const std::string st = Admin({"status", "--json"}).text;
    std::printf(
        "after the fill: born RAID10 %.0f, RAID5 %.0f; GC wrote %.0f MiB; log WA %.3f\n",
        JsonNumberAt(st, "/scheduler/born_raid10"), JsonNumberAt(st, "/scheduler/born_raid5"),
        JsonNumberAt(st, "/counters/gc_written_bytes") / 1048576, JsonNumberAt(st, "/wa/log"));
  }
  const int t1 = Converge(last, 16, 20, 60);
  std::printf("last fifth mirrored (>= 0.9) after %d s\n", t1);
  ASSERT_GE(t1, 0) << "the hot fifth is mirrored within 60 s";
  // Stable: a handful of conversions a minute at most (here 20 s of it).
  Read(last, 4);
  const double before = Conversions();
  Read(last, 20);
  const double stable = Conversions() - before;
  std::printf("stable: %.0f conversions in 20 s; last fifth %.3f\n", stable, ZoneShare(16, 20));
  EXPECT_LE(stable, 3) << "a stable workload must not churn";
  EXPECT_GE(ZoneShare(16, 20), 0.9);
  const std::string st = Admin({"status", "--json"}).text;
  std::printf(
      "physical %.1f MiB, budget use %.3f, RAID10 segments %.0f, open %.0f, freed but untrimmed "
      "%.0f\n",
      JsonNumberAt(st, "/physical_bytes") / 1048576, JsonNumberAt(st, "/scheduler/budget_use"),
      JsonNumberAt(st, "/segments/raid10"), JsonNumberAt(st, "/segments/open"),
      JsonNumberAt(st, "/segments/untrimmed_free"));
  // The budget counts what the drives hold: a freed segment must not keep its space
  // through a read-only phase (in CI one did, and the hot fifth stopped at 0.907).
  EXPECT_EQ(JsonNumberAt(st, "/segments/untrimmed_free", -1), 0) << st;
  EXPECT_GE(JsonNumberAt(st, "/scheduler/budget_use"), 0.95) << "with the budget full\n" << st;
  // 80% of the reads go to the hot fifth, and at least 0.9 of it is mirrored (above).
  EXPECT_GE(JsonNumberAt(st, "/hot_read_coverage"), 0.8 * 0.9)
      << "the hot reads (80%) are served by RAID10\n"
      << st;
  // The hot zone moves to the middle fifth.
  const int t2 = Converge(middle, 8, 12, 60);
  const double old_zone = ZoneShare(16, 20);
  std::printf("middle fifth mirrored after %d s; the old one now %.3f RAID10\n", t2, old_zone);
  EXPECT_GE(t2, 0) << "the moved hot zone is mirrored within 60 s";
  EXPECT_LE(old_zone, 0.8)
      << "the old hot zone gave up room to the new one (the budget holds a third)";
  // Degraded, the hot zone moves back: nothing is converted until the drive is rebuilt.
  ASSERT_EQ(Admin({"fail", "2"}).rc, 0);
  const double at_failure = Conversions();
  Read(last, 6);
  EXPECT_EQ(Conversions(), at_failure) << "no conversions while degraded";
  EXPECT_GT(JsonNumberAt(Admin({"status", "--json"}).text, "/scheduler/degraded_steps"), 0);
  ASSERT_EQ(Admin({"replace", "2", "", "0", "--json"}).rc, 0);
  const int t3 = Converge(last, 16, 20, 60);
  std::printf("after the rebuild the last fifth is mirrored again after %d s\n", t3);
  EXPECT_GE(t3, 0);
}

TEST_F(E2eTest, BadRequestsFailCleanlyAndTheServerKeepsServing) {
  nbd_handle* h = nbd_create();
  ASSERT_NE(h, nullptr);
  ASSERT_EQ(nbd_set_strict_mode(h, 0), 0);  // let the bad requests reach the server
  ASSERT_EQ(nbd_connect_unix(h, Socket().c_str()), 0) << nbd_get_error();
  const int64_t size = nbd_get_size(h);
  ASSERT_EQ(static_cast<uint64_t>(size), capacity_);
  std::vector<char> buf(8192, 'x');
  struct Case {
    const char* what;
    bool write;
    size_t count;
    uint64_t offset;
    int errno_expected;  // the NBD protocol answers a write past the end with ENOSPC
  };
  for (const Case& c :
       {Case{"read past the end", false, 4096, uint64_t(size), EINVAL},
        Case{"write past the end", true, 4096, uint64_t(size), ENOSPC},
        Case{"read across the end", false, 8192, uint64_t(size) - 4096, EINVAL},
        Case{"write across the end", true, 8192, uint64_t(size) - 4096, ENOSPC},
        Case{"short write across the end", true, 512, uint64_t(size) - 256, ENOSPC}}) {
    const int rc = c.write ? nbd_pwrite(h, buf.data(), c.count, c.offset, 0)
                           : nbd_pread(h, buf.data(), c.count, c.offset, 0);
    EXPECT_EQ(rc, -1) << c.what;
    EXPECT_EQ(nbd_get_errno(), c.errno_expected) << c.what << ": " << nbd_get_error();
  }
  // Still serving, on this connection and a new one.
  std::vector<char> block(4096, 'e'), back(4096);
  ASSERT_EQ(nbd_pwrite(h, block.data(), 4096, 8192, 0), 0) << nbd_get_error();
  ASSERT_EQ(nbd_flush(h, 0), 0);
  ASSERT_EQ(nbd_pread(h, back.data(), 4096, 8192, 0), 0);
  EXPECT_EQ(back, block);
  nbd_shutdown(h, 0);
  nbd_close(h);
  nbd_handle* h2 = nbd_create();
  ASSERT_EQ(nbd_connect_unix(h2, Socket().c_str()), 0) << nbd_get_error();
  ASSERT_EQ(nbd_pread(h2, back.data(), 4096, 8192, 0), 0);
  EXPECT_EQ(back, block);
  nbd_close(h2);
}

// Any request size and alignment (the blocksize filter `eraid serve` puts in front of the
// plugin): byte-granular reads and writes land exactly where a plain byte array says;
// two connections writing different 512-byte sectors of the same 4 KiB blocks at once do
// not undo each other's read-modify-write; and it all survives a restart.
TEST_F(E2eTest, AnyRequestSizeAndAlignmentMatchesAModel) {
  const uint64_t seed = TestSeed();
  std::printf("seed %llu (ERAID_SEED replays)\n", (unsigned long long)seed);
  std::mt19937_64 rng(seed);
  auto connect = [&] {
    nbd_handle* h = nbd_create();
    EXPECT_EQ(nbd_connect_unix(h, Socket().c_str()), 0) << nbd_get_error();
    return h;
  };
  nbd_handle* h = connect();
  const uint64_t span = 1 << 20;  // the model: the first MiB, zeros on a fresh volume
  std::vector<char> model(span, 0), buf;
  for (int i = 0; i < 600; ++i) {
    const uint64_t off = rng() % span;
    const size_t len = 1 + rng() % std::min<uint64_t>(12000, span - off);
    buf.resize(len);
    if (rng() % 3 != 0) {
      for (char& c : buf) c = static_cast<char>(rng());
      ASSERT_EQ(nbd_pwrite(h, buf.data(), len, off, 0), 0)
          << off << "+" << len << ": " << nbd_get_error();
      std::copy(buf.begin(), buf.end(), model.begin() + static_cast<long>(off));
    } else {
      ASSERT_EQ(nbd_pread(h, buf.data(), len, off, 0), 0)
          << off << "+" << len << ": " << nbd_get_error();
      ASSERT_TRUE(std::equal(buf.begin(), buf.end(), model.begin() + static_cast<long>(off)))
          << off << "+" << len;
    }
  }
  ASSERT_EQ(nbd_flush(h, 0), 0);
  // Two writers, 512-byte sectors of the same 64 blocks after the model's MiB, odd and even
  // sectors, each in its own random order.
  const uint64_t base = span, sectors = 64 * 8;
  auto writer = [&](int parity, uint64_t wseed) {
    nbd_handle* w = connect();
    std::vector<uint64_t> order;
    for (uint64_t s = parity; s < sectors; s += 2) order.push_back(s);
    std::shuffle(order.begin(), order.end(), std::mt19937_64(wseed));
    std::vector<char> sector(512, static_cast<char>('A' + parity));
    for (uint64_t s : order)
      EXPECT_EQ(nbd_pwrite(w, sector.data(), 512, base + s * 512, 0), 0) << nbd_get_error();
    EXPECT_EQ(nbd_flush(w, 0), 0);
    nbd_close(w);
  };
  std::thread even(writer, 0, rng()), odd(writer, 1, rng());
  even.join();
  odd.join();
  auto check = [&](nbd_handle* c, const char* when) {
    std::vector<char> got(span);
    ASSERT_EQ(nbd_pread(c, got.data(), span, 0, 0), 0);
    EXPECT_TRUE(got == model) << when << ": the model's MiB";
    std::vector<char> sec(sectors * 512);
    ASSERT_EQ(nbd_pread(c, sec.data(), sec.size(), base, 0), 0);
    for (uint64_t s = 0; s < sectors; ++s) {
      ASSERT_EQ(sec[s * 512], static_cast<char>('A' + s % 2))
          << when << ": sector " << s << " lost its write";
      ASSERT_EQ(sec[s * 512 + 511], static_cast<char>('A' + s % 2)) << when << ": sector " << s;
    }
  };
  check(h, "served");
  nbd_close(h);
  Stop();
  Serve();
  nbd_handle* again = connect();
  check(again, "after a restart");
  nbd_close(again);
}

TEST_F(E2eTest, SocketsAreOwnerOnlyAndTheAdminSocketRejectsMalformedCommands) {
  for (const std::string& path : {Socket(), AdminSocketPath(dir_)}) {
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0) << path;
    EXPECT_TRUE(S_ISSOCK(st.st_mode)) << path;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << path;
  }
  auto raw = [&](const std::string& request) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, AdminSocketPath(dir_).c_str(), sizeof(addr.sun_path) - 1);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL), ssize_t(request.size()));
    ::shutdown(fd, SHUT_WR);
    std::string reply;
    char buf[512];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;) reply.append(buf, size_t(n));
    ::close(fd);
    return reply;
  };
  EXPECT_EQ(raw("hello\n").rfind("result 2 ", 0), 0u);
  EXPECT_EQ(raw(std::string(10000, 'a')).rfind("result 2 ", 0), 0u);
  EXPECT_EQ(raw("eraid-admin 1\tfail\t99\n").rfind("result 2 ", 0), 0u);
  EXPECT_EQ(raw("eraid-admin 1\tfail\t-1\n").rfind("result 2 ", 0), 0u);
  EXPECT_EQ(raw("eraid-admin 1\tconvert\traid6\tall\n").rfind("result 2 ", 0), 0u);
  EXPECT_EQ(raw("eraid-admin 1\tnosuch\n").rfind("result 2 ", 0), 0u);
  EXPECT_EQ(raw("eraid-admin 1\tstatus\n").rfind("result 0 ", 0), 0u) << "and it still answers";
  EXPECT_FALSE(Admin({"status", "--json"}).text.empty());
}

TEST_F(E2eTest, ASecondServerOrAnOfflineOpenIsRefusedWhileServing) {
  ServeOptions so;
  so.dir = dir_;
  so.plugin = ERAID_PLUGIN_PATH;
  auto second = StartServer(so, 10);
  EXPECT_EQ(second.status().code(), StatusCode::kBusy);
  auto offline = ArrayDir::Open(dir_);
  EXPECT_EQ(offline.status().code(), StatusCode::kBusy);
}

}  // namespace
}  // namespace eraid
