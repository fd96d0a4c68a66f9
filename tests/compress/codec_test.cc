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

// Records packed by the host count for a drive only under the settings that would have
// made them: the level, and whether compression is on at all.
TEST(PackedBlocks, MatchOnlyTheSettingsThatMadeThem) {
  CodecConfig config, level1, none, none_level1;
  level1.zstd_level = 1;
  none.enabled = false;
  none_level1.enabled = false;
  none_level1.zstd_level = 1;
  const PackedBlocks p(config, 2), off(none, 2);
  EXPECT_TRUE(p.Matches(config));
  EXPECT_FALSE(p.Matches(level1));
  EXPECT_FALSE(p.Matches(none));
  EXPECT_TRUE(off.Matches(none_level1)) << "raw is raw, whatever the level";
  EXPECT_FALSE(off.Matches(config));
  EXPECT_EQ(p.sizes.size(), 2u);
  EXPECT_EQ(p.payload(1) - p.payload(0), static_cast<std::ptrdiff_t>(kBlockSize));
}

}  // namespace
}  // namespace eraid
