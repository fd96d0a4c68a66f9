// The Backend contract, checked on every implementation: memory, file (io_uring), the
// fault injector with no faults armed, and the emulated compressing drive.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>

#include "common/data_gen.h"
#include "compress/compressed_drive.h"
#include "compress/faulty_backend.h"
#include "compress/file_backend.h"
#include "compress/mem_backend.h"
#include "compress/timed_backend.h"

namespace eraid {
namespace {

constexpr uint64_t kBlocks = 4096;  // 16 MiB

struct Harness {
  std::unique_ptr<Backend> owner;       // innermost device
  std::unique_ptr<DriveTiming> timing;  // a timing model's layers, if any
  std::unique_ptr<Backend> middle;      // wrapper, if any
  Backend* device = nullptr;
  std::string path;
  ~Harness() {
    middle.reset();
    timing.reset();
    owner.reset();
    if (!path.empty()) std::filesystem::remove(path);
  }
};

using Factory = std::unique_ptr<Harness> (*)();

std::unique_ptr<Harness> MakeMem() {
  auto h = std::make_unique<Harness>();
  h->owner = std::make_unique<MemBackend>(kBlocks, 16);
  h->device = h->owner.get();
  return h;
}
std::unique_ptr<Harness> MakeFileWith(bool mapped_reads) {
  auto h = std::make_unique<Harness>();
  h->path = (std::filesystem::temp_directory_path() /
             ("eraid_backend_test_" + std::string(mapped_reads ? "mapped_" : "") +
              std::to_string(::getpid())))
                .string();
  FileBackendOptions o;
  o.mapped_reads = mapped_reads;
  o.create = true;
  o.size_bytes = BlocksToBytes(kBlocks);
  o.queue_depth = 16;
  auto fb = FileBackend::Open(h->path, o);
  EXPECT_TRUE(fb.ok()) << fb.status().ToString();
  h->owner = std::move(fb).value();
  h->device = h->owner.get();
  return h;
}
std::unique_ptr<Harness> MakeFile() { return MakeFileWith(false); }
std::unique_ptr<Harness> MakeMappedFile() { return MakeFileWith(true); }
std::unique_ptr<Harness> MakeFaulty() {
  auto h = MakeMem();
  h->middle = std::make_unique<FaultyBackend>(*h->owner);
  h->device = h->middle.get();
  return h;
}
std::unique_ptr<Harness> MakeDrive() {
  auto h = std::make_unique<Harness>();
  h->owner = std::make_unique<MemBackend>(kBlocks);
  DriveOptions o;
  o.erase_unit_blocks = 16;
  o.max_flashalloc_ranges = 4;
  o.expansion = 1.0;
  auto d = CompressedDrive::Format(*h->owner, o);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  h->middle = std::move(d).value();
  h->device = h->middle.get();
  return h;
}

// The emulated drive between the timing model's layers, on the real clock: a sata-ssd
// at a tenth of its latencies, so the contract runs at the pace of a fast drive.
std::unique_ptr<Harness> MakeTimedDrive() {
  auto h = std::make_unique<Harness>();
  h->owner = std::make_unique<MemBackend>(kBlocks);
  auto profile = ParseDriveProfile("sata-ssd,time_scale=0.1");
  EXPECT_TRUE(profile.ok());
  h->timing = DriveTiming::Make(*profile, *h->owner);
  DriveOptions o;
  o.erase_unit_blocks = 16;
  o.max_flashalloc_ranges = 4;
  o.expansion = 1.0;
  o.timing = &h->timing->model();
  auto d = CompressedDrive::Format(h->timing->flash(), o);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  h->middle = std::move(d).value();
  h->device = &h->timing->Attach(*h->middle);
  return h;
}

class BackendContractTest : public ::testing::TestWithParam<std::pair<const char*, Factory>> {
 protected:
  void SetUp() override {
    harness_ = GetParam().second();
    dev_ = harness_->device;
    ASSERT_NE(dev_, nullptr);
  }
  std::unique_ptr<Harness> harness_;
  Backend* dev_ = nullptr;
};

std::vector<std::byte> RandomBlocks(size_t n, std::mt19937_64& rng, uint32_t pct = 50) {
  std::vector<std::byte> v(BlocksToBytes(n));
  for (size_t i = 0; i < n; ++i) {
    FillBlockWithCompressibility(std::span(v).subspan(BlocksToBytes(i), kBlockSize), pct, rng);
  }
  return v;
}

TEST_P(BackendContractTest, UnwrittenReadsZero) {
  std::vector<std::byte> buf(BlocksToBytes(3), std::byte{0xAA});
  ASSERT_TRUE(dev_->Read(Lba(100), buf).ok());
  for (auto b : buf) ASSERT_EQ(b, std::byte{0});
}

TEST_P(BackendContractTest, WriteReadTrim) {
  std::mt19937_64 rng(1);
  auto data = RandomBlocks(8, rng);
  ASSERT_TRUE(dev_->Write(Lba(10), data).ok());
  std::vector<std::byte> back(data.size());
  ASSERT_TRUE(dev_->Read(Lba(10), back).ok());
  EXPECT_EQ(back, data);
  ASSERT_TRUE(dev_->Trim(Lba(12), 2).ok());
  ASSERT_TRUE(dev_->Read(Lba(10), back).ok());
  for (size_t i = 0; i < back.size(); ++i) {
    bool trimmed = i >= BlocksToBytes(2) && i < BlocksToBytes(4);
    ASSERT_EQ(back[i], trimmed ? std::byte{0} : data[i]) << "byte " << i;
  }
  ASSERT_TRUE(dev_->Flush().ok());
}

TEST_P(BackendContractTest, BadExtentsAreInvalidArgument) {
  std::vector<std::byte> buf(kBlockSize);
  const uint64_t cap = dev_->capacity_blocks();
  EXPECT_EQ(dev_->Read(Lba(cap), buf).code(), StatusCode::kInvalidArgument);
  std::vector<std::byte> two(BlocksToBytes(2));
  EXPECT_EQ(dev_->Write(Lba(cap - 1), two).code(), StatusCode::kInvalidArgument);
  std::vector<std::byte> odd(100);
  EXPECT_EQ(dev_->Write(Lba(0), odd).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(dev_->Trim(Lba(0), 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(dev_->Trim(Lba(cap - 2), 3).code(), StatusCode::kInvalidArgument);
  // And the device still serves.
  EXPECT_TRUE(dev_->Write(Lba(cap - 1), buf).ok());
}

// Many operations in flight at once, more than the queue depth, completing out of order.
TEST_P(BackendContractTest, AsyncBeyondQueueDepth) {
  std::mt19937_64 rng(7);
  constexpr size_t kOps = 200;
  auto data = RandomBlocks(kOps, rng);
  size_t completed = 0;
  for (size_t i = 0; i < kOps; ++i) {
    dev_->SubmitWrite(Lba(i * 3), std::span(data).subspan(BlocksToBytes(i), kBlockSize),
                      [&](Status s) {
                        EXPECT_TRUE(s.ok()) << s.ToString();
                        ++completed;
                      });
  }
  while (completed < kOps) dev_->Poll(true);
  EXPECT_EQ(dev_->in_flight(), 0u);
  std::vector<std::byte> back(data.size());
  completed = 0;
  for (size_t i = 0; i < kOps; ++i) {
    dev_->SubmitRead(Lba(i * 3), std::span(back).subspan(BlocksToBytes(i), kBlockSize),
                     [&](Status s) {
                       EXPECT_TRUE(s.ok());
                       ++completed;
                     });
  }
  while (completed < kOps) dev_->Poll(true);
  EXPECT_EQ(back, data);
}

// The contract says every Backend may be used from several threads at once: four
// threads write, flush and read back their own LBA ranges concurrently (run under TSan
// by `cmake -DERAID_SANITIZE=thread`).
TEST_P(BackendContractTest, ConcurrentThreads) {
  constexpr int kThreads = 4, kOps = 300;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(100 + t);
      std::vector<std::byte> data(kBlockSize), back(kBlockSize);
      for (int i = 0; i < kOps; ++i) {
        Lba lba(static_cast<uint64_t>(t) * 1000 + rng() % 1000);
        FillBlockWithCompressibility(data, 50, rng);
        if (!dev_->Write(lba, data).ok()) ++failures;
        if (i % 50 == 0 && !dev_->Flush().ok()) ++failures;
        if (!dev_->Read(lba, back).ok() || back != data) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

// ReadBytes: any byte range, across block boundaries, equals what was written.
TEST_P(BackendContractTest, ReadBytesAtAnyOffset) {
  std::mt19937_64 rng(11);
  auto data = RandomBlocks(4, rng);
  ASSERT_TRUE(dev_->Write(Lba(20), data).ok());
  for (auto [off, len] :
       {std::pair<uint64_t, size_t>{0, 1}, {100, 3000}, {4000, 200}, {4095, 8194}, {8192, 4096}}) {
    std::vector<std::byte> out(len);
    ASSERT_TRUE(dev_->ReadBytes(BlocksToBytes(20) + off, out).ok()) << off;
    EXPECT_TRUE(std::equal(out.begin(), out.end(), data.begin() + static_cast<long>(off)))
        << "offset " << off;
  }
  std::vector<std::byte> past(2);
  EXPECT_EQ(dev_->ReadBytes(BlocksToBytes(dev_->capacity_blocks()) - 1, past).code(),
            StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(All, BackendContractTest,
                         ::testing::Values(std::make_pair("mem", &MakeMem),
                                           std::make_pair("file", &MakeFile),
                                           std::make_pair("mapped_file", &MakeMappedFile),
                                           std::make_pair("faulty", &MakeFaulty),
                                           std::make_pair("drive", &MakeDrive),
                                           std::make_pair("timed_drive", &MakeTimedDrive)),
                         [](const auto& info) { return std::string(info.param.first); });

// ---------------------------------------------------------------- FaultyBackend

class FaultyTest : public ::testing::Test {
 protected:
  MemBackend media_{1024};
  FaultyBackend dev_{media_};
  std::vector<std::byte> block_ = std::vector<std::byte>(kBlockSize, std::byte{0x5A});
};

TEST_F(FaultyTest, FailStopFailsEverything) {
  ASSERT_TRUE(dev_.Write(Lba(1), block_).ok());
  dev_.FailStop();
  EXPECT_EQ(dev_.Read(Lba(1), block_).code(), StatusCode::kIoError);
  EXPECT_EQ(dev_.Write(Lba(1), block_).code(), StatusCode::kIoError);
  EXPECT_EQ(dev_.Flush().code(), StatusCode::kIoError);
  EXPECT_GE(dev_.stats().injected_errors, 3u);
}

TEST_F(FaultyTest, FailNthOpFailsExactlyThatOne) {
  dev_.FailNthOp(3);
  EXPECT_TRUE(dev_.Write(Lba(1), block_).ok());
  EXPECT_TRUE(dev_.Write(Lba(2), block_).ok());
  EXPECT_EQ(dev_.Write(Lba(3), block_).code(), StatusCode::kIoError);
  EXPECT_TRUE(dev_.Write(Lba(4), block_).ok());
}

TEST_F(FaultyTest, FailRangeOnlyThere) {
  dev_.FailRange(Lba(10), 5, FaultyBackend::kReads);
  EXPECT_TRUE(dev_.Write(Lba(12), block_).ok()) << "writes were not armed";
  EXPECT_EQ(dev_.Read(Lba(12), block_).code(), StatusCode::kIoError);
  EXPECT_TRUE(dev_.Read(Lba(15), block_).ok());
  dev_.ClearFaults();
  EXPECT_TRUE(dev_.Read(Lba(12), block_).ok());
}

TEST_F(FaultyTest, FlipBitChangesStoredData) {
  ASSERT_TRUE(dev_.Write(Lba(5), block_).ok());
  ASSERT_TRUE(dev_.Flush().ok());
  ASSERT_TRUE(dev_.FlipBit(Lba(5), 9).ok());
  std::vector<std::byte> back(kBlockSize);
  ASSERT_TRUE(dev_.Read(Lba(5), back).ok());
  EXPECT_EQ(back[1], block_[1] ^ std::byte{2});
  EXPECT_EQ(dev_.stats().bit_flips, 1u);
}

TEST_F(FaultyTest, TornWriteKeepsPrefixAndFails) {
  std::vector<std::byte> four(BlocksToBytes(4), std::byte{0x77});
  dev_.TearNextWrite(1);
  EXPECT_EQ(dev_.Write(Lba(20), four).code(), StatusCode::kIoError);
  std::vector<std::byte> back(BlocksToBytes(4));
  ASSERT_TRUE(dev_.Read(Lba(20), back).ok());
  EXPECT_EQ(back[0], std::byte{0x77});
  EXPECT_EQ(back[BlocksToBytes(1)], std::byte{0});
  EXPECT_EQ(back[BlocksToBytes(3)], std::byte{0});
}

TEST_F(FaultyTest, CrashDropsOnlyUnflushed) {
  ASSERT_TRUE(dev_.Write(Lba(1), block_).ok());
  ASSERT_TRUE(dev_.Flush().ok());
  std::vector<std::byte> other(kBlockSize, std::byte{0x11});
  ASSERT_TRUE(dev_.Write(Lba(1), other).ok());
  ASSERT_TRUE(dev_.Write(Lba(2), other).ok());
  dev_.Crash();
  EXPECT_EQ(dev_.Read(Lba(1), other).code(), StatusCode::kAborted) << "a crashed device is off";
  dev_.Restart();
  std::vector<std::byte> back(kBlockSize);
  ASSERT_TRUE(dev_.Read(Lba(1), back).ok());
  EXPECT_EQ(back, block_);
  ASSERT_TRUE(dev_.Read(Lba(2), back).ok());
  EXPECT_EQ(back, std::vector<std::byte>(kBlockSize));
  EXPECT_EQ(dev_.stats().dropped_blocks, 2u);
}

TEST_F(FaultyTest, LatencyDelaysCompletion) {
  ManualClock clock;
  FaultyBackend slow(media_, clock);
  slow.SetLatency(1'000'000);
  bool done = false;
  slow.SubmitWrite(Lba(0), block_, [&](Status s) { done = s.ok(); });
  EXPECT_EQ(slow.Poll(false), 0u);
  EXPECT_FALSE(done);
  clock.AdvanceNanos(1'000'000);
  EXPECT_EQ(slow.Poll(false), 1u);
  EXPECT_TRUE(done);
}

TEST(FileBackendTest, OpenErrorsAreClear) {
  FileBackendOptions o;
  auto r = FileBackend::Open("/nonexistent/dir/file", o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIoError);
  EXPECT_NE(r.status().message().find("/nonexistent/dir/file"), std::string::npos);
  o.queue_depth = 0;
  EXPECT_EQ(FileBackend::Open("/tmp/x", o).status().code(), StatusCode::kInvalidArgument);
}

// A mapped read of a page that cannot be read (here: the file was cut short behind the
// backend's back) raises SIGBUS; the backend turns it into a read through the ring and
// reports that read's error, and goes on serving what is still there.
TEST(FileBackendTest, MappedReadOfAVanishedPageIsAnIoError) {
  std::string path =
      (std::filesystem::temp_directory_path() / ("eraid_file_sigbus_" + std::to_string(::getpid())))
          .string();
  FileBackendOptions o;
  o.create = true;
  o.size_bytes = BlocksToBytes(64);
  o.mapped_reads = true;
  auto fb = FileBackend::Open(path, o);
  ASSERT_TRUE(fb.ok()) << fb.status().ToString();
  if (!(*fb)->mapped()) GTEST_SKIP() << "this build reads through the ring (TSan)";
  std::vector<std::byte> data(kBlockSize, std::byte{0x77}), back(kBlockSize);
  ASSERT_TRUE((*fb)->Write(Lba(3), data).ok());
  ASSERT_TRUE((*fb)->Write(Lba(40), data).ok());
  ASSERT_TRUE((*fb)->Read(Lba(40), back).ok());
  EXPECT_EQ(back, data);
  std::filesystem::resize_file(path, BlocksToBytes(8));  // another process truncates it
  EXPECT_EQ((*fb)->Read(Lba(40), back).code(), StatusCode::kIoError);
  std::vector<std::byte> bytes(10);
  EXPECT_EQ((*fb)->ReadBytes(BlocksToBytes(40) + 5, bytes).code(), StatusCode::kIoError);
  ASSERT_TRUE((*fb)->Read(Lba(3), back).ok());
  EXPECT_EQ(back, data);
  fb->reset();
  std::filesystem::remove(path);
}

TEST(FileBackendTest, PersistsAcrossReopen) {
  std::string path =
      (std::filesystem::temp_directory_path() / ("eraid_file_reopen_" + std::to_string(::getpid())))
          .string();
  std::vector<std::byte> data(BlocksToBytes(2), std::byte{0x3C});
  {
    FileBackendOptions o;
    o.create = true;
    o.size_bytes = BlocksToBytes(64);
    auto fb = FileBackend::Open(path, o);
    ASSERT_TRUE(fb.ok());
    ASSERT_TRUE((*fb)->Write(Lba(7), data).ok());
    ASSERT_TRUE((*fb)->Flush().ok());
  }
  auto fb = FileBackend::Open(path, {});
  ASSERT_TRUE(fb.ok());
  EXPECT_EQ((*fb)->capacity_blocks(), 64u);
  std::vector<std::byte> back(data.size());
  ASSERT_TRUE((*fb)->Read(Lba(7), back).ok());
  EXPECT_EQ(back, data);
  std::filesystem::remove(path);
}

// A thread that submits and exits before its operations finish (an nbdkit worker at a
// connection's end): the kernel cancels what the thread left queued for io_uring's
// workers (-ECANCELED). Those operations were never ours to cancel: they must still
// complete, with their data where it belongs.
TEST(FileBackendTest, OperationsOfAThreadThatExitedStillComplete) {
  std::string path =
      (std::filesystem::temp_directory_path() / ("eraid_file_exit_" + std::to_string(::getpid())))
          .string();
  FileBackendOptions o;
  o.create = true;
  o.size_bytes = BlocksToBytes(32 * 64);
  auto fb = FileBackend::Open(path, o);
  ASSERT_TRUE(fb.ok());
  FileBackend& b = **fb;
  std::vector<std::vector<std::byte>> bufs;
  for (int i = 0; i < 32; ++i) bufs.emplace_back(BlocksToBytes(64), std::byte(i + 1));
  for (int round = 0; round < 20; ++round) {
    std::atomic<int> done{0}, failed{0};
    std::string first_error;
    std::mutex mu;
    auto cb = [&](Status s) {
      if (!s.ok()) {
        std::lock_guard lock(mu);
        if (failed++ == 0) first_error = s.ToString();
      }
      ++done;
    };
    // fsyncs always go to the kernel's workers; buffered writes often do.
    std::thread t([&] {
      for (int i = 0; i < 32; ++i) {
        b.SubmitWrite(Lba(uint64_t(i) * 64), bufs[i], cb);
        b.SubmitFlush(cb);
      }
    });
    t.join();  // the submitter is gone; its operations may still be queued
    while (done.load() < 64) b.Poll(true);
    ASSERT_EQ(failed.load(), 0) << "round " << round << ": " << first_error;
  }
  std::vector<std::byte> back(BlocksToBytes(64));
  for (int i = 0; i < 32; ++i) {
    ASSERT_TRUE(b.Read(Lba(uint64_t(i) * 64), back).ok());
    ASSERT_EQ(back, bufs[i]) << "extent " << i;
  }
  fb->reset();
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace eraid
