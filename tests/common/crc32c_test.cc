#include "common/crc32c.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "tests/support/seed.h"

namespace eraid {
namespace {

TEST(Crc32cTest, KnownVector) {
  const char* s = "123456789";
  EXPECT_EQ(Crc32c(s, 9), 0xE3069283u);
  EXPECT_EQ(Crc32cReference(s, 9), 0xE3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
}

// ISA-L against the plain bitwise loop, over lengths and misalignments.
TEST(Crc32cTest, MatchesReferenceAlignedAndUnaligned) {
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> buf(9000);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t offset : {0, 1, 3, 7, 8, 13}) {
    for (size_t len : {0, 1, 2, 7, 8, 31, 64, 255, 4096, 4097, 8191}) {
      ASSERT_EQ(Crc32c(buf.data() + offset, len), Crc32cReference(buf.data() + offset, len))
          << "offset " << offset << " len " << len;
    }
  }
}

TEST(Crc32cTest, ExtendEqualsWhole) {
  std::vector<uint8_t> buf(5000);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<uint8_t>(i * 31 + 7);
  for (size_t split : {0, 1, 100, 4096, 5000}) {
    uint32_t a = Crc32c(buf.data(), split);
    EXPECT_EQ(Crc32cExtend(a, buf.data() + split, buf.size() - split),
              Crc32c(buf.data(), buf.size()));
  }
}

}  // namespace
}  // namespace eraid
