#include "common/status.h"

#include <gtest/gtest.h>

namespace eraid {
namespace {

Result<int> Half(int x) {
  if (x % 2 != 0) return Status::InvalidArgument("odd");
  return x / 2;
}

Status Quarter(int x, int* out) {
  ERAID_ASSIGN_OR_RETURN(int h, Half(x));
  ERAID_ASSIGN_OR_RETURN(*out, Half(h));
  return Status::Ok();
}

TEST(StatusTest, CodesAndFlags) {
  EXPECT_TRUE(Status::Ok().ok());
  EXPECT_TRUE(Status::Busy("queue full").retryable());
  EXPECT_FALSE(Status::IoError("eio").retryable());
  EXPECT_TRUE(Status::DataLoss("gone").data_lost());
  EXPECT_FALSE(Status::Corruption("crc").data_lost());
  EXPECT_EQ(Status::NoSpace("full").ToString(), "NoSpace: full");
  EXPECT_EQ(Status::IoError("eio").WithContext("read lba 7").ToString(),
            "IoError: read lba 7: eio");
}

TEST(StatusTest, ResultPropagation) {
  int q = 0;
  EXPECT_TRUE(Quarter(8, &q).ok());
  EXPECT_EQ(q, 2);
  Status s = Quarter(6, &q);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Half(3).status().message(), "odd");
}

// An error is held behind a pointer (an OK status is a null one): copies are deep, moves
// leave an OK status behind, and OK has an empty message.
TEST(StatusTest, CopiesAndMovesKeepCodeAndMessage) {
  EXPECT_EQ(Status::Ok().message(), "");
  EXPECT_EQ(Status::Ok().code(), StatusCode::kOk);
  EXPECT_EQ(sizeof(Status), sizeof(void*));
  Status a = Status::Corruption("crc");
  Status b = a;  // NOLINT: the copy is what is tested
  EXPECT_EQ(b.code(), StatusCode::kCorruption);
  EXPECT_EQ(b.message(), "crc");
  a = Status::IoError("eio");
  EXPECT_EQ(b.message(), "crc") << "a copy shares nothing with its source";
  b = a;
  EXPECT_EQ(b.ToString(), "IoError: eio");
  const Status& same = b;
  b = same;  // self-assignment keeps it
  EXPECT_EQ(b.ToString(), "IoError: eio");
  Status c = std::move(a);
  EXPECT_EQ(c.ToString(), "IoError: eio");
  b = Status::Ok();
  EXPECT_TRUE(b.ok());
  EXPECT_EQ(b.message(), "");
}

}  // namespace
}  // namespace eraid
