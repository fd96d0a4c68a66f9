#include "common/encoding.h"

#include <gtest/gtest.h>

#include <array>

namespace eraid {
namespace {

TEST(EncodingTest, LittleEndianBytes) {
  std::array<std::byte, 8> b{};
  PutLe32(b.data(), 0x11223344u);
  EXPECT_EQ(std::to_integer<int>(b[0]), 0x44);
  EXPECT_EQ(std::to_integer<int>(b[3]), 0x11);
  PutLe64(b.data(), 0x0102030405060708ull);
  EXPECT_EQ(std::to_integer<int>(b[0]), 0x08);
  EXPECT_EQ(GetLe64(b.data()), 0x0102030405060708ull);
  PutLe16(b.data(), 0xBEEF);
  EXPECT_EQ(GetLe16(b.data()), 0xBEEF);
}

TEST(EncodingTest, WriterReaderRoundTripAndBounds) {
  std::array<std::byte, 15> buf{};
  Writer w(buf);
  w.U8(7);
  w.U16(513);
  w.U32(70000);
  w.U64(1ull << 40);
  EXPECT_TRUE(w.ok());
  EXPECT_EQ(w.position(), 15u);
  w.U8(1);
  EXPECT_FALSE(w.ok()) << "writing past the end must be reported";

  Reader r(buf);
  EXPECT_EQ(r.U8(), 7);
  EXPECT_EQ(r.U16(), 513);
  EXPECT_EQ(r.U32(), 70000u);
  EXPECT_EQ(r.U64(), 1ull << 40);
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.U32(), 0u);
  EXPECT_FALSE(r.ok()) << "reading past the end must be reported";
}

}  // namespace
}  // namespace eraid
