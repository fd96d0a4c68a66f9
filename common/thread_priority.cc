#include "common/thread_priority.h"

#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

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

void NameThisThread(const char* name) {
  const std::string n(name, ::strnlen(name, 15));
  (void)::pthread_setname_np(::pthread_self(), n.c_str());
}

}  // namespace eraid
