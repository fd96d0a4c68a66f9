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
  EXPECT_EQ(Status::IoError("eio").WithContext("read lba 7").ToString(), "IoError: read lba 7: eio");
}

TEST(StatusTest, ResultPropagation) {
  int q = 0;
  EXPECT_TRUE(Quarter(8, &q).ok());
  EXPECT_EQ(q, 2);
  Status s = Quarter(6, &q);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Half(3).status().message(), "odd");
}

}  // namespace
}  // namespace eraid
