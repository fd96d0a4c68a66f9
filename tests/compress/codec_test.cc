#include "compress/codec.h"

#include <gtest/gtest.h>
#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "common/crc32c.h"
#include "common/data_gen.h"

namespace eraid {
namespace {

class CodecTest : public ::testing::TestWithParam<uint32_t> {};

// Our wrapper against plain libzstd: what we compress, ZSTD_decompress restores; and our
// ratio tracks the requested compressibility.
TEST_P(CodecTest, RoundTripAgainstPlainZstd) {
  const uint32_t pct = GetParam();
  std::mt19937_64 rng(pct + 1);
  std::vector<std::byte> in(kBlockSize), out(kMaxCompressedBlockBytes), back(kBlockSize);
  CodecConfig config;
  uint64_t total = 0;
  for (int i = 0; i < 50; ++i) {
    FillBlockWithCompressibility(in, pct, rng);
    Compressed c = CompressBlock(config, in.data(), out.data());
    total += c.size_bytes;
    if (c.codec == Codec::kZstd) {
      size_t n = ZSTD_decompress(back.data(), back.size(), out.data(), c.size_bytes);
      ASSERT_FALSE(ZSTD_isError(n));
      ASSERT_EQ(n, kBlockSize);
      ASSERT_EQ(back, in);
    }
    ASSERT_TRUE(DecompressBlock(c.codec, std::span(out).first(c.size_bytes), back.data()).ok());
    ASSERT_EQ(back, in);
  }
  double stored_fraction = double(total) / (50.0 * kBlockSize);
  double expected = (100.0 - pct) / 100.0;
  EXPECT_NEAR(stored_fraction, expected, 0.06) << pct << "% compressible";
}

INSTANTIATE_TEST_SUITE_P(Compressibility, CodecTest, ::testing::Values(0u, 25u, 50u, 75u, 90u));

TEST(CodecBasics, IncompressibleIsRawAndNoneDisables) {
  std::mt19937_64 rng(3);
  std::vector<std::byte> in(kBlockSize), out(kBlockSize);
  FillBlockWithCompressibility(in, 0, rng);
  EXPECT_EQ(CompressBlock({}, in.data(), out.data()).codec, Codec::kRaw);
  std::vector<std::byte> zeros(kBlockSize);
  CodecConfig none;
  none.enabled = false;
  Compressed c = CompressBlock(none, zeros.data(), out.data());
  EXPECT_EQ(c.codec, Codec::kRaw);
  EXPECT_EQ(c.size_bytes, kBlockSize);
}

TEST(CodecBasics, DecompressRejectsGarbage) {
  std::vector<std::byte> junk(100, std::byte{0x42}), out(kBlockSize);
  EXPECT_EQ(DecompressBlock(Codec::kZstd, junk, out.data()).code(), StatusCode::kCorruption);
  EXPECT_EQ(DecompressBlock(Codec::kRaw, junk, out.data()).code(), StatusCode::kCorruption);
}

TEST(CodecBasics, ParseConfig) {
  EXPECT_FALSE(ParseCodecConfig("none")->enabled);
  EXPECT_EQ(ParseCodecConfig("zstd:3")->zstd_level, 3);
  EXPECT_EQ(ParseCodecConfig("zstd:-5")->zstd_level, -5);
  EXPECT_FALSE(ParseCodecConfig("zstd:fast").ok());
  EXPECT_FALSE(ParseCodecConfig("lz4").ok());
  EXPECT_FALSE(ParseCodecConfig("zstd:99").ok());
}

// The memo's output is CompressBlock's, byte for byte: on a miss (computed), on a hit
// (the second copy of a mirrored block), and after a hit consumed the entry.
TEST(CompressionMemo, ReusesOnlyAnEqualBlockOnce) {
  std::mt19937_64 rng(11);
  CompressionMemo memo;
  CodecConfig config;
  for (uint32_t pct : {0u, 50u, 90u, 100u}) {
    std::vector<std::byte> in(kBlockSize), want(kBlockSize), got(kBlockSize);
    FillBlockWithCompressibility(in, pct, rng);
    const Compressed w = CompressBlock(config, in.data(), want.data());
    const uint64_t hits = memo.hits(), misses = memo.misses();
    for (int copy = 0; copy < 3; ++copy) {
      std::fill(got.begin(), got.end(), std::byte{0xEE});
      const Compressed c = memo.Compress(config, in.data(), got.data());
      ASSERT_EQ(c.codec, w.codec) << pct << "% copy " << copy;
      ASSERT_EQ(c.size_bytes, w.size_bytes);
      ASSERT_TRUE(std::equal(got.begin(), got.begin() + c.size_bytes, want.begin())) << pct << "% copy " << copy;
    }
    // miss, hit (consumes the entry), miss again
    EXPECT_EQ(memo.hits() - hits, 1u) << pct;
    EXPECT_EQ(memo.misses() - misses, 2u) << pct;
  }
}

// A block primed by the host (compressed once, in the thread that took the write) answers
// the next two compressions of it — both copies of a mirrored block — with
// CompressBlock's bytes; a third is computed afresh.
TEST(CompressionMemo, APrimedBlockAnswersBothCopies) {
  std::mt19937_64 rng(14);
  CompressionMemo memo;
  CodecConfig config;
  for (uint32_t pct : {0u, 50u, 100u}) {
    std::vector<std::byte> in(kBlockSize), want(kBlockSize), got(kBlockSize);
    FillBlockWithCompressibility(in, pct, rng);
    const Compressed w = CompressBlock(config, in.data(), want.data());
    memo.Prime(config, in.data());
    const uint64_t hits = memo.hits(), misses = memo.misses();
    for (int copy = 0; copy < 3; ++copy) {
      std::fill(got.begin(), got.end(), std::byte{0xEE});
      const Compressed c = memo.Compress(config, in.data(), got.data());
      ASSERT_EQ(c.codec, w.codec) << pct << "% copy " << copy;
      ASSERT_EQ(c.size_bytes, w.size_bytes);
      ASSERT_TRUE(std::equal(got.begin(), got.begin() + c.size_bytes, want.begin())) << pct << "% copy " << copy;
    }
    EXPECT_EQ(memo.hits() - hits, 2u) << pct;
    EXPECT_EQ(memo.misses() - misses, 1u) << pct;
  }
  // Primed under other settings: not an answer for these.
  std::vector<std::byte> in(kBlockSize), out(kBlockSize);
  FillBlockWithCompressibility(in, 50, rng);
  CodecConfig level1;
  level1.zstd_level = 1;
  memo.Prime(level1, in.data());
  const uint64_t hits = memo.hits();
  memo.Compress(config, in.data(), out.data());
  EXPECT_EQ(memo.hits(), hits);
}

// One entry, so every block lands on it: a block one byte apart, or the same block under
// other codec settings, is compressed afresh, never answered from the entry.
TEST(CompressionMemo, DifferentBytesOrSettingsMiss) {
  std::mt19937_64 rng(12);
  CompressionMemo memo(1);
  std::vector<std::byte> a(kBlockSize), b, want(kBlockSize), got(kBlockSize);
  FillBlockWithCompressibility(a, 50, rng);
  b = a;
  b[2000] ^= std::byte{1};
  CodecConfig config, level1, none;
  level1.zstd_level = 1;
  none.enabled = false;
  auto check = [&](const CodecConfig& c, const std::vector<std::byte>& in, bool hit) {
    const uint64_t hits = memo.hits();
    const Compressed w = CompressBlock(c, in.data(), want.data());
    const Compressed got_c = memo.Compress(c, in.data(), got.data());
    EXPECT_EQ(got_c.codec, w.codec);
    ASSERT_EQ(got_c.size_bytes, w.size_bytes);
    EXPECT_TRUE(std::equal(got.begin(), got.begin() + w.size_bytes, want.begin()));
    EXPECT_EQ(memo.hits() - hits, hit ? 1u : 0u);
  };
  check(config, a, false);
  check(config, b, false);  // one byte apart
  check(config, b, true);
  check(config, a, false);
  check(level1, a, false);  // other level
  check(none, a, false);    // compression off
  check(none, a, true);
}

// Threads compressing the same blocks at once, as an array's drive workers do with the
// two copies of a RAID10 row: every result is CompressBlock's. (In the TSan subset.)
TEST(CompressionMemo, ConcurrentThreadsGetCompressBlocksOutput) {
  std::mt19937_64 rng(13);  // fixed data; what varies run to run is the interleaving
  constexpr int kBlocks = 256, kThreads = 4;
  std::vector<std::vector<std::byte>> in(kBlocks), want(kBlocks);
  std::vector<Compressed> want_c(kBlocks);
  CodecConfig config;
  for (int i = 0; i < kBlocks; ++i) {
    in[i].resize(kBlockSize);
    want[i].resize(kBlockSize);
    FillBlockWithCompressibility(in[i], static_cast<uint32_t>(rng() % 101), rng);
    want_c[i] = CompressBlock(config, in[i].data(), want[i].data());
  }
  CompressionMemo memo(64);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::byte> out(kBlockSize);
      for (int round = 0; round < 20; ++round) {
        for (int k = 0; k < kBlocks; ++k) {
          const int i = (k * (t + 1) + round) % kBlocks;
          const Compressed c = memo.Compress(config, in[i].data(), out.data());
          if (c.codec != want_c[i].codec || c.size_bytes != want_c[i].size_bytes ||
              !std::equal(out.begin(), out.begin() + c.size_bytes, want[i].begin())) {
            ++wrong;
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(memo.hits() + memo.misses(), uint64_t{kThreads} * 20 * kBlocks);
  EXPECT_GT(memo.hits(), 0u);
}

}  // namespace
}  // namespace eraid
