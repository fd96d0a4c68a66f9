#include "common/thread_priority.h"

#include <gtest/gtest.h>

#include <thread>

namespace eraid {
namespace {

// A background thread lowers its own priority only: the thread that started it keeps
// its own.
TEST(ThreadPriority, ABackgroundThreadRunsBelowTheOthers) {
  const int before = ThisThreadNice();
  int inside = before, after_lowering = before;
  std::thread t([&] {
    after_lowering = LowerThisThreadPriority();
    inside = ThisThreadNice();
  });
  t.join();
  if (before >= 19) GTEST_SKIP() << "already at the lowest priority";
  EXPECT_EQ(inside, after_lowering);
  EXPECT_EQ(inside, std::min(19, before + kBackgroundNice));
  EXPECT_EQ(ThisThreadNice(), before);
}

}  // namespace
}  // namespace eraid
