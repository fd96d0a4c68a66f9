// NbdBackend against a real nbdkit (memory plugin) on a Unix socket: data round trips
// with many requests in flight, trims read as zeros, exact byte reads; a server that
// hangs (SIGSTOP) fails the backend at the deadline, one that dies fails it at once, and
// neither leaves a request waiting; connects to nothing or to garbage fail clearly; an
// emulated compressing drive runs over the remote flash and survives a reopen.
// nbdkit is installed by tools/install-deps.sh (the test command runs it).
#include "compress/nbd_backend.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "compress/compressed_drive.h"
#include "tests/support/seed.h"

namespace eraid {
namespace {

using Clock = std::chrono::steady_clock;

// nbdkit in the foreground as a child, serving `plugin args` on a fresh Unix socket.
class Nbdkit {
 public:
  explicit Nbdkit(std::vector<std::string> plugin) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "eraid-nbd.XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) return;
    dir_ = tmpl;
    // -P: nbdkit writes its pid file once it accepts connections (the socket file exists
    // from bind(), before listen(): a connect then can be refused).
    std::vector<std::string> args{"nbdkit", "-f",    "--exit-with-parent", "-P", pidfile(),
                                  "-U",     socket()};
    args.insert(args.end(), plugin.begin(), plugin.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execvp("nbdkit", argv.data());
      ::_exit(127);
    }
    for (int i = 0; i < 1000 && !up(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ~Nbdkit() {
    if (pid_ > 0) {
      ::kill(pid_, SIGCONT);
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  std::string socket() const { return dir_ + "/nbd.sock"; }
  std::string uri() const { return "nbd+unix:///?socket=" + socket(); }
  std::string pidfile() const { return dir_ + "/nbdkit.pid"; }
  bool up() const {
    std::error_code ec;
    return pid_ > 0 && std::filesystem::file_size(pidfile(), ec) > 0 && !ec;
  }
  // SIGSTOP returns once the server is stopped (a signal is delivered asynchronously: a
  // request sent right after kill() could still be answered).
  void Signal(int sig) {
    ::kill(pid_, sig);
    if (sig != SIGSTOP) return;
    for (int i = 0; i < 1000; ++i) {  // every thread of it, not only the first
      bool all = true;
      for (const auto& task :
           std::filesystem::directory_iterator("/proc/" + std::to_string(pid_) + "/task")) {
        std::ifstream stat(task.path() / "stat");
        std::string pid, comm, state;
        stat >> pid >> comm >> state;
        all &= state == "T" || state == "t";
      }
      if (all) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  void Kill() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  std::string dir_;
  pid_t pid_ = -1;
};

std::unique_ptr<NbdBackend> Connect(const Nbdkit& server, uint32_t timeout_ms = 30000) {
  NbdBackendOptions o;
  o.timeout_ms = timeout_ms;
  auto b = NbdBackend::Open(server.uri(), o);
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  return b.ok() ? std::move(*b) : nullptr;
}

std::vector<std::byte> Pattern(uint64_t seed, size_t n) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> v(n);
  for (auto& b : v) b = static_cast<std::byte>(rng());
  return v;
}

TEST(NbdBackendTest, ManyRequestsInFlightRoundTripAndTrimsReadAsZeros) {
  const uint64_t seed = TestSeed();
  std::cout << "seed " << seed << " (ERAID_SEED to replay)\n";
  Nbdkit server({"memory", "64M"});
  ASSERT_TRUE(server.up());
  auto b = Connect(server);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->capacity_blocks(), (64u << 20) / kBlockSize);
  EXPECT_EQ(b->name(), "nbd:" + server.uri());

  // 500 writes of 1..16 blocks at random places, submitted without waiting (more than the
  // queue depth: submission waits for slots) except before a write that overlaps one in
  // flight, whose order would otherwise be the server's to choose; then a flush.
  std::mt19937_64 rng(seed);
  std::vector<std::vector<std::byte>> model(b->capacity_blocks());
  std::vector<std::vector<std::byte>> bufs;
  bufs.reserve(500);
  std::vector<std::pair<uint64_t, uint64_t>> in_flight;
  std::atomic<int> done{0}, failed{0};
  for (int i = 0; i < 500; ++i) {
    const uint64_t n = 1 + rng() % 16;
    const uint64_t lba = rng() % (b->capacity_blocks() - n);
    bufs.push_back(Pattern(rng(), BlocksToBytes(n)));
    for (uint64_t k = 0; k < n; ++k) {
      model[lba + k].assign(bufs.back().begin() + BlocksToBytes(k),
                            bufs.back().begin() + BlocksToBytes(k + 1));
    }
    bool overlaps = false;
    for (auto [l, m] : in_flight) overlaps |= lba < l + m && l < lba + n;
    if (overlaps) {
      while (b->in_flight() > 0) b->Poll(true);
      in_flight.clear();
    }
    in_flight.emplace_back(lba, n);
    b->SubmitWrite(Lba(lba), bufs.back(), [&](Status s) {
      ++done;
      if (!s.ok()) ++failed;
    });
  }
  while (b->in_flight() > 0) b->Poll(true);
  EXPECT_EQ(done.load(), 500);
  EXPECT_EQ(failed.load(), 0);
  ASSERT_TRUE(b->Flush().ok());

  // Every block reads back: synchronously and, for a sample, through the queue.
  std::vector<std::byte> got(kBlockSize);
  const std::vector<std::byte> zeros(kBlockSize);
  for (uint64_t lba = 0; lba < b->capacity_blocks(); lba += 7) {
    ASSERT_TRUE(b->Read(Lba(lba), got).ok());
    ASSERT_EQ(got, model[lba].empty() ? zeros : model[lba]) << "lba " << lba;
  }
  std::vector<std::vector<std::byte>> reads(64, std::vector<std::byte>(kBlockSize));
  for (uint64_t i = 0; i < reads.size(); ++i)
    b->SubmitRead(Lba(i * 101), reads[i], [](Status s) { ASSERT_TRUE(s.ok()); });
  while (b->in_flight() > 0) b->Poll(true);
  for (uint64_t i = 0; i < reads.size(); ++i)
    EXPECT_EQ(reads[i], model[i * 101].empty() ? zeros : model[i * 101]);

  // ReadBytes: exactly the bytes asked for, across a block boundary.
  const uint64_t lba = 1000;
  const auto data = Pattern(seed + 1, 2 * kBlockSize);
  ASSERT_TRUE(b->Write(Lba(lba), data).ok());
  std::vector<std::byte> part(1500);
  ASSERT_TRUE(b->ReadBytes(BlocksToBytes(lba) + 3000, part).ok());
  EXPECT_EQ(0, std::memcmp(part.data(), data.data() + 3000, part.size()));

  // A trim reads as zeros.
  ASSERT_TRUE(b->Trim(Lba(lba), 2).ok());
  ASSERT_TRUE(b->Read(Lba(lba + 1), got).ok());
  EXPECT_EQ(got, zeros);

  // Out of range: refused here, before the wire.
  EXPECT_EQ(b->Read(Lba(b->capacity_blocks()), got).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(b->ReadBytes(BlocksToBytes(b->capacity_blocks()) - 10, part).code(),
            StatusCode::kInvalidArgument);
  const NbdLinkStats st = b->link_stats();
  EXPECT_EQ(st.state, "connected");
  EXPECT_GT(st.requests, 500u);
  EXPECT_GT(st.p99_us, 0u);
  EXPECT_GE(st.p99_us, st.p50_us);
}

TEST(NbdBackendTest, AHungServerFailsTheBackendAtTheDeadlineAndEveryRequestAfter) {
  Nbdkit server({"memory", "16M"});
  ASSERT_TRUE(server.up());
  auto b = Connect(server, /*timeout_ms=*/400);
  ASSERT_NE(b, nullptr);
  const auto data = Pattern(1, 4 * kBlockSize);
  ASSERT_TRUE(b->Write(Lba(0), data).ok());
  server.Signal(SIGSTOP);
  // Eight writes in flight when the host stops answering: all fail at the deadline.
  std::vector<Status> results(8);
  const auto start = Clock::now();
  for (int i = 0; i < 8; ++i)
    b->SubmitWrite(Lba(8 * i), data, [&, i](Status s) { results[i] = s; });
  while (b->in_flight() > 0) b->Poll(true);
  const double waited = std::chrono::duration<double>(Clock::now() - start).count();
  for (const Status& s : results) EXPECT_EQ(s.code(), StatusCode::kIoError) << s.ToString();
  EXPECT_GE(waited, 0.35);
  EXPECT_LT(waited, 2.0) << "a request waited well past its deadline";
  EXPECT_TRUE(b->failed());
  // From now on nothing waits: reads, writes and flushes fail at once.
  const auto after = Clock::now();
  std::vector<std::byte> got(kBlockSize);
  EXPECT_EQ(b->Read(Lba(0), got).code(), StatusCode::kIoError);
  EXPECT_EQ(b->Write(Lba(0), data).code(), StatusCode::kIoError);
  EXPECT_EQ(b->Flush().code(), StatusCode::kIoError);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - after).count(), 0.2);
  const NbdLinkStats st = b->link_stats();
  EXPECT_EQ(st.state, "failed");
  EXPECT_EQ(st.timeouts, 1u);
  EXPECT_NE(st.error.find("400 ms"), std::string::npos) << st.error;
  server.Signal(SIGCONT);
  b.reset();  // the destructor does not wait on the dead connection
}

// Late writes: a write abandoned at the deadline of a hung host is carried out when the
// host resumes. drained() stays false until then (and WaitDrained says why), and it turns
// true only once the write has landed: whatever comes after the drain cannot be
// overwritten by it.
TEST(NbdBackendTest, AWriteAbandonedAtTheDeadlineLandsBeforeTheDrainEnds) {
  Nbdkit server({"memory", "16M"});
  ASSERT_TRUE(server.up());
  auto b = Connect(server, /*timeout_ms=*/300);
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(b->drained()) << "nothing failed, nothing to drain";
  const auto old_data = Pattern(10, kBlockSize), late_data = Pattern(11, kBlockSize);
  ASSERT_TRUE(b->Write(Lba(5), old_data).ok());
  server.Signal(SIGSTOP);
  Status late;
  b->SubmitWrite(Lba(5), late_data, [&](Status s) { late = s; });
  while (b->in_flight() > 0) b->Poll(true);
  EXPECT_EQ(late.code(), StatusCode::kIoError) << "abandoned at the deadline";
  EXPECT_FALSE(b->drained()) << "the host holds a write it may still carry out";
  EXPECT_EQ(b->link_stats().abandoned, 1u);
  EXPECT_TRUE(b->link_stats().draining);
  const Status busy = b->WaitDrained(200);
  EXPECT_EQ(busy.code(), StatusCode::kBusy);
  EXPECT_NE(busy.message().find("1 writes were in flight"), std::string::npos) << busy.ToString();
  server.Signal(SIGCONT);
  const auto start = Clock::now();
  ASSERT_TRUE(b->WaitDrained(10000).ok());
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 5.0);
  EXPECT_FALSE(b->link_stats().draining);
  // The late write did land, and before the drain ended: a new connection reads it.
  auto again = Connect(server);
  ASSERT_NE(again, nullptr);
  std::vector<std::byte> got(kBlockSize);
  ASSERT_TRUE(again->Read(Lba(5), got).ok());
  EXPECT_EQ(got, late_data) << "the abandoned write was carried out after the host resumed";
}

// The timeout changed while a request waits on a hung host: the new deadline holds for it.
TEST(NbdBackendTest, ATimeoutChangedLiveAppliesToRequestsInFlight) {
  Nbdkit server({"memory", "16M"});
  ASSERT_TRUE(server.up());
  auto b = Connect(server, /*timeout_ms=*/60000);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->SetTimeout(0).code(), StatusCode::kInvalidArgument);
  server.Signal(SIGSTOP);
  Status result;
  const auto start = Clock::now();
  b->SubmitWrite(Lba(2), Pattern(13, kBlockSize), [&](Status s) { result = s; });
  ASSERT_TRUE(b->SetTimeout(300).ok());
  EXPECT_EQ(b->timeout_ms(), 300u);
  while (b->in_flight() > 0) b->Poll(true);
  const double waited = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_EQ(result.code(), StatusCode::kIoError);
  EXPECT_GE(waited, 0.25);
  EXPECT_LT(waited, 2.0) << "the request kept its old 60 s deadline";
  EXPECT_NE(b->link_stats().error.find("300 ms"), std::string::npos) << b->link_stats().error;
  server.Signal(SIGCONT);
}

// A host killed with writes in flight can carry out nothing more: drained at once.
TEST(NbdBackendTest, AKilledHostLeavesNothingToDrain) {
  Nbdkit server({"memory", "16M"});
  ASSERT_TRUE(server.up());
  auto b = Connect(server, /*timeout_ms=*/300);
  ASSERT_NE(b, nullptr);
  server.Signal(SIGSTOP);
  const auto data = Pattern(12, kBlockSize);
  Status s1;
  b->SubmitWrite(Lba(1), data, [&](Status s) { s1 = s; });
  while (b->in_flight() > 0) b->Poll(true);
  EXPECT_FALSE(b->drained());
  server.Kill();
  EXPECT_TRUE(b->WaitDrained(5000).ok()) << "the connection ended with its host";
}

// Synchronous reads (the drive's record reads), several at once: their deadline holds too.
TEST(NbdBackendTest, AHungServerFailsAReadAtTheDeadline) {
  Nbdkit server({"memory", "16M"});
  ASSERT_TRUE(server.up());
  auto b = Connect(server, /*timeout_ms=*/400);
  ASSERT_NE(b, nullptr);
  const auto data = Pattern(4, kBlockSize);
  ASSERT_TRUE(b->Write(Lba(3), data).ok());
  std::vector<std::byte> got(kBlockSize);
  ASSERT_TRUE(b->Read(Lba(3), got).ok());
  EXPECT_EQ(got, data);
  server.Signal(SIGSTOP);
  std::vector<Status> results(4);
  std::vector<std::thread> readers;
  const auto start = Clock::now();
  for (int i = 0; i < 4; ++i) {
    readers.emplace_back([&, i] {
      std::vector<std::byte> buf(kBlockSize);
      results[i] = b->Read(Lba(i), buf);
    });
  }
  for (auto& t : readers) t.join();
  const double waited = std::chrono::duration<double>(Clock::now() - start).count();
  for (const Status& s : results) EXPECT_EQ(s.code(), StatusCode::kIoError) << s.ToString();
  EXPECT_GE(waited, 0.35);
  EXPECT_LT(waited, 2.0);
  EXPECT_TRUE(b->failed());
  EXPECT_EQ(b->link_stats().state, "failed");
  server.Signal(SIGCONT);
}

// Read lanes: a synchronous read goes on a connection of its own only where a flush has
// covered every write to it. A read of data written since goes on the main connection and
// sees the new data; the poller flushes such writes after kLaneFlushMs, and reads of them
// then go on lanes again.
TEST(NbdBackendTest, ReadsGoOnLanesOnlyWhereAFlushCoversTheWrites) {
  Nbdkit server({"memory", "16M"});
  ASSERT_TRUE(server.up());
  auto b = Connect(server);
  ASSERT_NE(b, nullptr);
  const auto v1 = Pattern(1, kBlockSize), v2 = Pattern(2, kBlockSize);
  std::vector<std::byte> got(kBlockSize);
  ASSERT_TRUE(b->Write(Lba(5), v1).ok());
  ASSERT_TRUE(b->Read(Lba(5), got).ok());
  EXPECT_EQ(got, v1);
  EXPECT_EQ(b->link_stats().lane_reads, 0u) << "an unflushed write is read on its own connection";
  ASSERT_TRUE(b->Read(Lba(100), got).ok());
  EXPECT_EQ(b->link_stats().lane_reads, 1u) << "a block never written goes on a lane";
  EXPECT_EQ(b->link_stats().lanes, 1u);

  ASSERT_TRUE(b->Flush().ok());
  ASSERT_TRUE(b->Read(Lba(5), got).ok());
  EXPECT_EQ(got, v1);
  EXPECT_EQ(b->link_stats().lane_reads, 2u) << "flushed: a lane";

  // Overwritten: the read right after sees the new data, on the main connection; so does a
  // byte read that only touches the block's first bytes.
  ASSERT_TRUE(b->Write(Lba(5), v2).ok());
  const auto written = Clock::now();
  ASSERT_TRUE(b->Read(Lba(5), got).ok());
  EXPECT_EQ(got, v2);
  std::vector<std::byte> part(100);
  ASSERT_TRUE(b->ReadBytes(BlocksToBytes(5) - 50, part).ok());
  EXPECT_EQ(0, std::memcmp(part.data() + 50, v2.data(), 50));
  EXPECT_EQ(b->link_stats().lane_reads, 2u);
  ASSERT_TRUE(b->ReadBytes(BlocksToBytes(5) - 100, part).ok());  // ends where block 5 starts
  EXPECT_EQ(b->link_stats().lane_reads, 3u);

  // Unflushed by the user: the poller flushes it, and the block's reads go on lanes again.
  const uint64_t before = b->link_stats().lane_reads;
  while (b->link_stats().lane_reads == before &&
         Clock::now() < written + std::chrono::seconds(10)) {
    ASSERT_TRUE(b->Read(Lba(5), got).ok());
    ASSERT_EQ(got, v2);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(b->link_stats().lane_reads, before + 1);
  EXPECT_GE(Clock::now() - written, std::chrono::milliseconds(NbdBackend::kLaneFlushMs));
  EXPECT_FALSE(b->failed());
}

// Many byte ranges at once (GC's and rebuild's reads): each comes back exactly, in the
// caller's order; ranges lying close together go as one request; a range outside the
// device is refused alone; a failed backend fails them all.
TEST(NbdBackendTest, ManyByteReadsGoAsFewRequests) {
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu\n", (unsigned long long)seed);
  Nbdkit server({"memory", "16M"});
  ASSERT_TRUE(server.up());
  auto b = Connect(server);
  ASSERT_NE(b, nullptr);
  const auto data = Pattern(seed, 4 << 20);  // the first 4 MiB
  for (uint64_t off = 0; off < data.size(); off += 1 << 20) {
    ASSERT_TRUE(b->Write(Lba(off / kBlockSize), std::span(data).subspan(off, 1 << 20)).ok());
  }
  ASSERT_TRUE(b->Flush().ok());
  std::mt19937_64 rng(seed);
  std::vector<ByteExtent> extents;
  // A run of records side by side (one request), then scattered ones, shuffled.
  for (uint64_t off = 100000, i = 0; i < 40; ++i) {
    const uint64_t len = 200 + rng() % 3000;
    extents.push_back({off, len});
    off += len + rng() % 64;
  }
  for (int i = 0; i < 20; ++i) {
    const uint64_t len = 1 + rng() % 5000;
    extents.push_back({rng() % (data.size() - len), len});
  }
  std::shuffle(extents.begin(), extents.end(), rng);
  extents.push_back({16 << 20, 10});  // past the end
  std::vector<std::vector<std::byte>> bufs;
  std::vector<std::span<std::byte>> out;
  for (const ByteExtent& e : extents) bufs.emplace_back(e.length);
  for (auto& v : bufs) out.emplace_back(v);
  std::vector<Status> results(extents.size());
  const uint64_t before = b->link_stats().requests;
  b->ReadBytesMany(extents, out, results);
  const uint64_t requests = b->link_stats().requests - before;
  for (size_t i = 0; i + 1 < extents.size(); ++i) {
    ASSERT_TRUE(results[i].ok()) << i << ": " << results[i].ToString();
    ASSERT_EQ(0, std::memcmp(bufs[i].data(), data.data() + extents[i].offset, extents[i].length))
        << "extent " << i << " at " << extents[i].offset;
  }
  EXPECT_EQ(results.back().code(), StatusCode::kInvalidArgument);
  std::printf("%zu extents in %llu requests\n", extents.size(), (unsigned long long)requests);
  EXPECT_LE(requests, 21u) << "the run side by side is one request";
  EXPECT_GE(requests, 2u);

  b->Fail("test");
  results.assign(extents.size(), Status::Ok());
  b->ReadBytesMany(std::span(extents).first(5), std::span(out).first(5),
                   std::span(results).first(5));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(results[i].code(), StatusCode::kIoError);
}

// A server that does not promise multi-conn, or takes only one connection: every read on
// the main connection, and nothing failed.
TEST(NbdBackendTest, NoLanesWithoutMultiConnOrASecondConnection) {
  for (const std::vector<std::string>& plugin :
       {std::vector<std::string>{"--filter=multi-conn", "memory", "16M", "multi-conn-mode=disable"},
        std::vector<std::string>{"--filter=limit", "memory", "16M", "limit=1"}}) {
    SCOPED_TRACE(plugin[0]);
    Nbdkit server(plugin);
    ASSERT_TRUE(server.up());
    auto b = Connect(server);
    ASSERT_NE(b, nullptr);
    const auto data = Pattern(3, kBlockSize);
    ASSERT_TRUE(b->Write(Lba(7), data).ok());
    ASSERT_TRUE(b->Flush().ok());
    std::vector<std::byte> got(kBlockSize);
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(b->Read(Lba(7), got).ok());
      EXPECT_EQ(got, data);
    }
    EXPECT_EQ(b->link_stats().lane_reads, 0u);
    EXPECT_EQ(b->link_stats().lanes, 0u);
    EXPECT_FALSE(b->failed());
  }
}

// Readers and writers at once, each thread on blocks of its own, with flushes now and
// then: every read sees the thread's last write, whichever connection it went on.
TEST(NbdBackendTest, ConcurrentReadersSeeTheLastWriteOnLanesOrNot) {
  const uint64_t seed = TestSeed();
  std::cout << "seed " << seed << " (ERAID_SEED to replay)\n";
  Nbdkit server({"memory", "16M"});
  ASSERT_TRUE(server.up());
  auto b = Connect(server);
  ASSERT_NE(b, nullptr);
  constexpr int kThreads = 4, kBlocks = 32, kOps = 400;
  std::atomic<int> mismatches{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(seed + t);
      std::vector<std::vector<std::byte>> model(kBlocks, std::vector<std::byte>(kBlockSize));
      std::vector<std::byte> got(kBlockSize);
      for (int i = 0; i < kOps; ++i) {
        const uint64_t k = rng() % kBlocks, lba = t * kBlocks + k;
        const uint64_t op = rng() % 10;
        if (op < 3) {
          model[k] = Pattern(rng(), kBlockSize);
          errors += !b->Write(Lba(lba), model[k]).ok();
        } else if (op == 3) {
          errors += !b->Flush().ok();
        } else {
          errors += !b->Read(Lba(lba), got).ok();
          mismatches += got != model[k];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(mismatches.load(), 0);
  const NbdLinkStats st = b->link_stats();
  EXPECT_GT(st.lane_reads, 0u);
  EXPECT_LE(st.lanes, NbdBackend::kMaxLanes);
  std::cout << "lane reads " << st.lane_reads << " of " << st.requests << " requests, " << st.lanes
            << " lanes\n";
}

TEST(NbdBackendTest, AKilledServerFailsTheBackendAtOnce) {
  Nbdkit server({"memory", "16M"});
  ASSERT_TRUE(server.up());
  auto b = Connect(server, /*timeout_ms=*/30000);
  ASSERT_NE(b, nullptr);
  const auto data = Pattern(2, kBlockSize);
  ASSERT_TRUE(b->Write(Lba(0), data).ok());
  server.Kill();
  const auto start = Clock::now();
  Status s = b->Write(Lba(1), data);
  if (s.ok()) s = b->Flush();  // the write may have been taken by the socket's buffer
  EXPECT_EQ(s.code(), StatusCode::kIoError) << s.ToString();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 5.0);
  EXPECT_TRUE(b->failed());
}

TEST(NbdBackendTest, ConnectsToNothingOrGarbageFailClearly) {
  NbdBackendOptions o;
  o.timeout_ms = 500;
  auto bad = NbdBackend::Open("http://example/x", o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  auto none = NbdBackend::Open("nbd+unix:///?socket=/nonexistent/eraid-test.sock", o);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kIoError) << none.status().ToString();
  EXPECT_NE(none.status().message().find("/nonexistent/eraid-test.sock"), std::string::npos);

  // A host that accepts but never answers: the connect gives up at the deadline.
  Nbdkit server({"memory", "16M"});
  ASSERT_TRUE(server.up());
  server.Signal(SIGSTOP);
  const auto start = Clock::now();
  auto hung = NbdBackend::Open(server.uri(), o);
  EXPECT_FALSE(hung.ok());
  const double waited = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_GE(waited, 0.45);
  EXPECT_LT(waited, 2.0);
  server.Signal(SIGCONT);

  o.timeout_ms = 0;
  EXPECT_EQ(NbdBackend::Open(server.uri(), o).status().code(), StatusCode::kInvalidArgument);
}

TEST(NbdBackendTest, UrisShownWithoutSecrets) {
  EXPECT_TRUE(NbdBackend::IsUri("nbd://host/x"));
  EXPECT_TRUE(NbdBackend::IsUri("nbds+unix:///x?socket=/s"));
  EXPECT_FALSE(NbdBackend::IsUri("/dev/sdb"));
  EXPECT_FALSE(NbdBackend::IsUri("drive0"));
  EXPECT_EQ(NbdBackend::Redact("nbd://10.0.0.2:10809/d0"), "nbd://10.0.0.2:10809/d0");
  EXPECT_EQ(NbdBackend::Redact("nbds://alice@h:10809/d0?tls-psk-file=/etc/k.psk"),
            "nbds://h:10809/d0");
  EXPECT_EQ(NbdBackend::Redact("nbds+unix://bob@/d?tls-psk-file=/k&socket=/run/d.sock"),
            "nbds+unix:///d?socket=/run/d.sock");
}

// TLS with a pre-shared key, as `nbdkit --tls=require --tls-psk=FILE` serves it: the key's
// file is named in the URI (and left out of the name shown); without TLS the server refuses.
TEST(NbdBackendTest, TlsWithAPreSharedKey) {
  std::string tmpl = (std::filesystem::temp_directory_path() / "eraid-psk.XXXXXX").string();
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
  const std::string psk = tmpl + "/keys.psk";
  {
    std::FILE* f = std::fopen(psk.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fprintf(f, "alice:%s\n",
                 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
    std::fclose(f);
  }
  Nbdkit server({"--tls=require", "--tls-psk=" + psk, "memory", "16M"});
  ASSERT_TRUE(server.up());
  NbdBackendOptions o;
  o.timeout_ms = 5000;
  const std::string uri = "nbds+unix://alice@/?socket=" + server.socket() + "&tls-psk-file=" + psk;
  auto b = NbdBackend::Open(uri, o);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*b)->name(), "nbd:nbds+unix:///?socket=" + server.socket());
  const auto data = Pattern(3, 2 * kBlockSize);
  ASSERT_TRUE((*b)->Write(Lba(5), data).ok());
  std::vector<std::byte> got(2 * kBlockSize);
  ASSERT_TRUE((*b)->Read(Lba(5), got).ok());
  EXPECT_EQ(got, data);
  auto plain = NbdBackend::Open(server.uri(), o);
  EXPECT_FALSE(plain.ok());
  std::filesystem::remove_all(tmpl);
}

// The emulated drive over remote flash: formatted, written, closed, opened again.
TEST(NbdBackendTest, ACompressingDriveRunsOverRemoteFlash) {
  const uint64_t seed = TestSeed();
  std::cout << "seed " << seed << " (ERAID_SEED to replay)\n";
  Nbdkit server({"memory", "64M"});
  ASSERT_TRUE(server.up());
  std::vector<std::vector<std::byte>> written;
  DriveOptions o;
  o.write_cache_blocks = 64;
  {
    auto flash = Connect(server);
    ASSERT_NE(flash, nullptr);
    auto drive = CompressedDrive::Format(*flash, o);
    ASSERT_TRUE(drive.ok()) << drive.status().ToString();
    std::mt19937_64 rng(seed);
    for (uint64_t lba = 0; lba < 2000; ++lba) {
      auto data = Pattern(rng(), kBlockSize);
      std::memset(data.data(), 0, kBlockSize / 2);  // half compressible
      ASSERT_TRUE((*drive)->Write(Lba(lba), data).ok());
      written.push_back(std::move(data));
    }
    ASSERT_TRUE((*drive)->Close().ok());
    EXPECT_GT((*drive)->stats().compression_ratio(), 1.5);
  }
  auto flash = Connect(server);
  ASSERT_NE(flash, nullptr);
  auto drive = CompressedDrive::Open(*flash, o);
  ASSERT_TRUE(drive.ok()) << drive.status().ToString();
  std::vector<std::byte> got(kBlockSize);
  for (uint64_t lba = 0; lba < written.size(); ++lba) {
    ASSERT_TRUE((*drive)->Read(Lba(lba), got).ok());
    ASSERT_EQ(got, written[lba]) << "lba " << lba;
  }
}

}  // namespace
}  // namespace eraid
