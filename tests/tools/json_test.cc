// The tools' JSON helpers (tools/json.h): figures as shown, and numbers read by place.
#include "tools/json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace eraid {
namespace {

TEST(JsonTest, FiguresKeepSixDigitsAndNotMeasuredIsNull) {
  EXPECT_EQ(Json(Figure(1.0 / 3)).dump(), "0.333333");
  EXPECT_EQ(Json(Figure(123456789.0)).dump(), "123457000.0");
  EXPECT_EQ(Json(Figure(std::numeric_limits<double>::quiet_NaN())).dump(), "null");
}

TEST(JsonTest, NumbersAreReadByPlaceNotByTheFirstKeyThatMatches) {
  const std::string status =
      R"({"wa":{"log":1.5,"raid":null},"wa_since_open":{"log":2.5},"name":"a \"b\"","n":7})";
  EXPECT_EQ(JsonNumberAt(status, "/wa/log"), 1.5);
  EXPECT_EQ(JsonNumberAt(status, "/wa_since_open/log"), 2.5);
  EXPECT_EQ(JsonNumberAt(status, "/n"), 7);
  EXPECT_EQ(JsonNumberAt(status, "/wa/raid", -1), -1) << "null is no number";
  EXPECT_EQ(JsonNumberAt(status, "/name", -1), -1) << "a string is no number";
  EXPECT_EQ(JsonNumberAt(status, "/wa/device", -1), -1) << "missing";
  EXPECT_EQ(JsonNumberAt("not json", "/n", -2), -2);
  EXPECT_EQ(JsonNumberAt("", "/n", -3), -3);
}

TEST(JsonTest, WrittenTextIsQuotedAndKeysKeepTheirOrder) {
  const Json j = Json::object({{"z", "quote \" and \\ and \x01"}, {"a", 1}});
  EXPECT_EQ(j.dump(), R"({"z":"quote \" and \\ and \u0001","a":1})");
  EXPECT_EQ(Json::parse(j.dump())["z"], "quote \" and \\ and \x01");
}

}  // namespace
}  // namespace eraid
