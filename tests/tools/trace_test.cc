#include "tools/sim/trace.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

namespace eraid {
namespace {

TEST(TraceTest, EachFormatParses) {
  TraceRecord r;
  ASSERT_TRUE(ParseTraceLine(TraceFormat::kAlibaba, "17,W,8192,12288,1577808000000123", &r).ok());
  EXPECT_EQ(r.volume, "17");
  EXPECT_TRUE(r.write);
  EXPECT_EQ(r.lba, 2u);
  EXPECT_EQ(r.blocks, 3u);
  EXPECT_EQ(r.timestamp_us, 1577808000000123u);
  ASSERT_TRUE(ParseTraceLine(TraceFormat::kAlibaba, "3,R,100,1,5", &r).ok());
  EXPECT_FALSE(r.write);
  EXPECT_EQ(r.lba, 0u);
  EXPECT_EQ(r.blocks, 1u) << "a partial block still touches one block";
  ASSERT_TRUE(ParseTraceLine(TraceFormat::kAlibaba, "3,W,4095,2,5", &r).ok());
  EXPECT_EQ(r.blocks, 2u) << "straddles a block boundary";

  ASSERT_TRUE(ParseTraceLine(TraceFormat::kTencent, "1538323200,16,8,1,1063", &r).ok());
  EXPECT_EQ(r.volume, "1063");
  EXPECT_TRUE(r.write);
  EXPECT_EQ(r.lba, 2u) << "sector 16 = byte 8192 = block 2";
  EXPECT_EQ(r.blocks, 1u);
  EXPECT_EQ(r.timestamp_us, 1538323200000000u);

  ASSERT_TRUE(
      ParseTraceLine(TraceFormat::kMsr, "128166372003061629,hm,1,Write,3221225472,65536,1331", &r)
          .ok());
  EXPECT_EQ(r.volume, "hm_1");
  EXPECT_TRUE(r.write);
  EXPECT_EQ(r.lba, 786432u);
  EXPECT_EQ(r.blocks, 16u);
  EXPECT_EQ(r.timestamp_us, 12816637200306162u);
}

TEST(TraceTest, MalformedLinesAreRejected) {
  TraceRecord r;
  for (const char* bad :
       {"1,W,8192,4096", "1,W,8192,4096,5,6", "1,X,8192,4096,5", "1,W,abc,4096,5", "1,W,8192,0,5",
        "1,W,-1,4096,5", "", "1,W,18446744073709551615,4096,1",
        // Ends within 4 KiB of 2^64: rounding its end up used to wrap to 0 blocks.
        "0,R,53,18446744073709551115,75"}) {
    EXPECT_FALSE(ParseTraceLine(TraceFormat::kAlibaba, bad, &r).ok()) << "'" << bad << "'";
  }
  ASSERT_TRUE(ParseTraceLine(TraceFormat::kAlibaba, "1,W,18446744073709547520,4095,1", &r).ok())
      << "up to the last byte of a 64-bit byte space";
  EXPECT_EQ(r.lba, (1ull << 52) - 1);
  EXPECT_EQ(r.blocks, 1u);
  EXPECT_FALSE(ParseTraceLine(TraceFormat::kTencent, "1,16,8,2,1063", &r).ok()) << "io_type 2";
  EXPECT_FALSE(ParseTraceLine(TraceFormat::kMsr, "1,hm,1,Erase,0,4096,1", &r).ok());
  EXPECT_FALSE(ParseTraceLine(TraceFormat::kMsr, "1,hm,x,Write,0,4096,1", &r).ok());
}

// The Alibaba parser reads the common line eight digits at a time and leaves every other
// form to the general parser: numbers of each length 1..20 (the 8-digit steps and the
// byte-at-a-time tail meet at every length), leading zeros, blanks, signs and overflow
// must read as the number they spell or be refused.
TEST(TraceTest, AlibabaNumbersOfEveryLengthParseExactly) {
  const uint64_t seed = ::testing::UnitTest::GetInstance()->random_seed() + 1;
  std::printf("seed %llu\n", (unsigned long long)seed);
  std::mt19937_64 rng(seed);
  TraceRecord r;
  for (int round = 0; round < 20000; ++round) {
    // A value of 1..20 digits (20 digits: some overflow 64 bits and must be refused).
    const int digits = 1 + static_cast<int>(rng() % 20);
    std::string text = std::to_string(1 + rng() % 9);
    while (static_cast<int>(text.size()) < digits) text += char('0' + rng() % 10);
    if (rng() % 8 == 0) text = std::string(1 + rng() % 3, '0') + text;  // leading zeros
    const int field = static_cast<int>(rng() % 3);                      // offset, length, time
    std::string fields[3] = {std::to_string(4096 * (rng() % 1000)), "4096",
                             std::to_string(rng() % 2000000000000000ull)};
    fields[field] = text;
    const char* pad = rng() % 10 == 0 ? " " : "";
    const std::string line = std::string("v") + std::to_string(rng() % 4) + ",W," + fields[0] +
                             "," + pad + fields[1] + "," + fields[2];
    uint64_t want[3];
    bool fits = true;
    for (int f = 0; f < 3; ++f) {
      unsigned __int128 v = 0;
      for (char c : fields[f]) v = v * 10 + unsigned(c - '0');
      fits = fits && v <= UINT64_MAX;
      want[f] = static_cast<uint64_t>(v);
    }
    const bool valid = fits && want[1] > 0 && want[0] <= UINT64_MAX - want[1] &&
                       (want[0] + want[1] - 1) / 4096 - want[0] / 4096 < UINT32_MAX;
    const Status s = ParseTraceLine(TraceFormat::kAlibaba, line, &r);
    ASSERT_EQ(s.ok(), valid) << "'" << line << "': " << s.ToString() << " (seed " << seed << ")";
    if (!valid) continue;
    EXPECT_EQ(r.lba, want[0] / 4096) << line;
    EXPECT_EQ(r.blocks, (want[0] + want[1] - 1) / 4096 - want[0] / 4096 + 1) << line;
    EXPECT_EQ(r.timestamp_us, want[2]) << line;
  }
}

class TraceFileTest : public ::testing::Test {
 protected:
  std::string Path(const std::string& ext) {
    return (std::filesystem::temp_directory_path() /
            ("eraid_trace_" + std::to_string(::getpid()) + ext))
        .string();
  }
  void TearDown() override {
    for (auto& p : made_) std::filesystem::remove(p);
  }
  // The same text as a plain, a gzip and a zstd file.
  static void WritePlain(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
  }
  static void WriteGzip(const std::string& path, const std::string& text) {
    gzFile g = gzopen(path.c_str(), "wb1");
    gzwrite(g, text.data(), static_cast<unsigned>(text.size()));
    gzclose(g);
  }
  static void WriteZstd(const std::string& path, const std::string& text) {
    std::string z(ZSTD_compressBound(text.size()), '\0');
    z.resize(ZSTD_compress(z.data(), z.size(), text.data(), text.size(), 1));
    std::ofstream(path, std::ios::binary) << z;
  }
  std::vector<std::string> made_;
  const std::string text_ = "# a comment\n1,W,0,4096,10\n\n1,R,0,4096,11\n2,W,4096,8192,12\n";
};

TEST_F(TraceFileTest, PlainGzipAndZstdReadTheSame) {
  std::string plain = Path(".csv"), gz = Path(".csv.gz"), zst = Path(".csv.zst");
  made_ = {plain, gz, zst};
  WritePlain(plain, text_);
  WriteGzip(gz, text_);
  WriteZstd(zst, text_);
  for (const auto& path : {plain, gz, zst}) {
    auto reader = TraceReader::Open(path, TraceFormat::kAlibaba);
    ASSERT_TRUE(reader.ok()) << path;
    TraceRecord r;
    std::vector<std::pair<std::string, bool>> got;
    for (;;) {
      auto more = (*reader)->Next(&r);
      ASSERT_TRUE(more.ok()) << more.status().ToString();
      if (!*more) break;
      got.emplace_back(r.volume, r.write);
    }
    ASSERT_EQ(got.size(), 3u) << path;
    EXPECT_EQ(got[2].first, "2");
    EXPECT_EQ((*reader)->line_number(), 5u);
  }
}

TEST_F(TraceFileTest, ErrorsNameFileAndLine) {
  std::string plain = Path(".bad.csv");
  made_ = {plain};
  std::ofstream(plain) << "1,W,0,4096,10\n1,W,0,4096\n";
  auto reader = std::move(TraceReader::Open(plain, TraceFormat::kAlibaba)).value();
  TraceRecord r;
  ASSERT_TRUE(reader->Next(&r).ok());
  auto bad = reader->Next(&r);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(plain + ":2:"), std::string::npos)
      << bad.status().message();
  EXPECT_EQ(TraceReader::Open("/nonexistent/x.csv", TraceFormat::kAlibaba).status().code(),
            StatusCode::kIoError);
  std::string trunc = Path(".trunc.zst");
  made_.push_back(trunc);
  std::string z(ZSTD_compressBound(1000), '\0');
  std::string big(1000, 'x');
  z.resize(ZSTD_compress(z.data(), z.size(), big.data(), big.size(), 3));
  std::ofstream(trunc, std::ios::binary) << z.substr(0, z.size() / 2);
  auto t = std::move(TraceReader::Open(trunc, TraceFormat::kAlibaba)).value();
  EXPECT_FALSE(t->Next(&r).ok()) << "a truncated zstd file is an error, not a short trace";
}

// Several MiB of lines in all three formats' shapes, so lines straddle the reader's 4 MiB
// chunks (mapped slices and decompressed buffers alike), ending without a newline: every
// file form gives exactly what the line parser gives line by line.
TEST_F(TraceFileTest, LargeFilesReadLineForLineAsTheParser) {
  for (TraceFormat format : {TraceFormat::kAlibaba, TraceFormat::kMsr}) {
    std::string text;
    for (uint64_t i = 0; text.size() < (9u << 20); ++i) {
      if (format == TraceFormat::kAlibaba) {
        // Now and then a blank before the line or a '\r' before its newline: the reader's
        // in-chunk fast path must hand those to the general one, which trims them.
        text += std::string(i % 555 == 1 ? " " : "") + std::to_string(i % 7) + "," +
                (i % 3 ? "W" : "R") + "," + std::to_string(i * 4096 + i % 5) + "," +
                std::to_string(1 + i % 20000) + "," + std::to_string(1600000000000000 + i) +
                (i % 777 == 2 ? "\r\n" : "\n");
      } else {
        text += std::to_string(128166372003061629 + i) + ",host" + std::to_string(i % 3) + "," +
                std::to_string(i % 2) + "," + (i % 4 ? "Write" : "Read") + "," +
                std::to_string(i * 512) + ",4096,1331\n";
      }
      if (i % 1000 == 0) text += "# a comment\n\n";
    }
    text.pop_back();  // the last line has no newline
    std::vector<TraceRecord> want;
    for (size_t at = 0; at < text.size();) {
      size_t nl = text.find('\n', at);
      if (nl == std::string::npos) nl = text.size();
      const std::string_view line(text.data() + at, nl - at);
      at = nl + 1;
      if (line.empty() || line.front() == '#') continue;
      TraceRecord r;
      ASSERT_TRUE(ParseTraceLine(format, line, &r).ok()) << line;
      want.push_back(r);
    }
    const std::string plain = Path(".big.csv"), gz = Path(".big.csv.gz"),
                      gz_unnamed = Path(".big.gzdata"), zst = Path(".big.csv.zst");
    made_ = {plain, gz, gz_unnamed, zst};
    WritePlain(plain, text);
    WriteGzip(gz, text);
    WriteGzip(gz_unnamed, text);
    WriteZstd(zst, text);
    for (const std::string& path : {plain, gz, gz_unnamed, zst}) {
      auto reader = TraceReader::Open(path, format);
      ASSERT_TRUE(reader.ok()) << path << ": " << reader.status().ToString();
      TraceRecord r;
      size_t n = 0;
      for (;; ++n) {
        auto more = (*reader)->Next(&r);
        ASSERT_TRUE(more.ok()) << path << ": " << more.status().ToString();
        if (!*more) break;
        ASSERT_LT(n, want.size()) << path;
        ASSERT_EQ(r.volume, want[n].volume) << path << " record " << n;
        ASSERT_EQ(r.write, want[n].write) << path << " record " << n;
        ASSERT_EQ(r.lba, want[n].lba) << path << " record " << n;
        ASSERT_EQ(r.blocks, want[n].blocks) << path << " record " << n;
        ASSERT_EQ(r.timestamp_us, want[n].timestamp_us) << path << " record " << n;
      }
      EXPECT_EQ(n, want.size()) << path;
      EXPECT_GT((*reader)->compressed_bytes_read(), 0u) << path;
    }
  }
}

}  // namespace
}  // namespace eraid
