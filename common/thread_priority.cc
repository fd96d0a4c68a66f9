#include "common/thread_priority.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace eraid {

namespace {
id_t ThreadId() { return static_cast<id_t>(::syscall(SYS_gettid)); }
}  // namespace

int ThisThreadNice() {
  errno = 0;
  const int nice = ::getpriority(PRIO_PROCESS, ThreadId());
  return errno == 0 ? nice : 0;
}

int LowerThisThreadPriority() {
  const int now = ThisThreadNice();
  const int want = std::min(19, now + kBackgroundNice);
  if (::setpriority(PRIO_PROCESS, ThreadId(), want) != 0) return now;
  return want;
}

}  // namespace eraid
