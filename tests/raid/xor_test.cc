#include "raid/xor.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "tests/support/seed.h"

namespace eraid {
namespace {

// ISA-L's xor_gen path (aligned) and the fallback (unaligned) against the plain loop.
TEST(XorTest, MatchesReferenceAlignedAndUnaligned) {
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu\n", (unsigned long long)seed);
  std::mt19937_64 rng(seed);
  for (size_t nsrc : {1, 2, 3, 5, 15}) {
    for (size_t len : {32, 4096, 65536, 100, 4095}) {
      for (size_t misalign : {0, 1, 8, 16}) {
        std::vector<std::vector<std::byte>> bufs(nsrc, std::vector<std::byte>(len + 64));
        std::vector<const std::byte*> srcs;
        for (auto& b : bufs) {
          for (auto& x : b) x = static_cast<std::byte>(rng());
          auto base = reinterpret_cast<uintptr_t>(b.data());
          srcs.push_back(b.data() + ((32 - base % 32) % 32) + misalign);
        }
        std::vector<std::byte> out(len + 64), ref(len);
        auto base = reinterpret_cast<uintptr_t>(out.data());
        std::byte* dst = out.data() + (32 - base % 32) % 32;
        XorBlocks(srcs, dst, len);
        XorReference(srcs, ref.data(), len);
        ASSERT_EQ(std::memcmp(dst, ref.data(), len), 0)
            << nsrc << " sources, len " << len << ", +" << misalign;
      }
    }
  }
}

TEST(XorTest, ParityRecoversAnyMember) {
  std::mt19937_64 rng(5);
  std::vector<std::vector<std::byte>> d(4, std::vector<std::byte>(4096));
  for (auto& b : d)
    for (auto& x : b) x = static_cast<std::byte>(rng());
  std::vector<std::byte> p(4096), back(4096);
  std::vector<const std::byte*> all = {d[0].data(), d[1].data(), d[2].data(), d[3].data()};
  XorBlocks(all, p.data(), 4096);
  std::vector<const std::byte*> without_2 = {d[0].data(), d[1].data(), p.data(), d[3].data()};
  XorBlocks(without_2, back.data(), 4096);
  EXPECT_EQ(back, d[2]);
}

}  // namespace
}  // namespace eraid
