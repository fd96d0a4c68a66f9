#include "common/crash_point.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace eraid {
namespace {

struct Armed {
  std::string name;  // empty: nothing armed
  unsigned long pass = 0;
  std::atomic<unsigned long> seen{0};
};

Armed& TheArmed() {
  static Armed* armed = [] {
    auto* a = new Armed;  // never freed: a point may be passed while the process exits
    const char* env = std::getenv("ERAID_CRASH_POINT");
    if (env == nullptr) return a;
    const char* colon = std::strrchr(env, ':');
    char* end = nullptr;
    const unsigned long n = colon ? std::strtoul(colon + 1, &end, 10) : 0;
    if (colon == nullptr || colon == env || n == 0 || end == colon + 1 || *end != '\0') {
      std::fprintf(stderr, "eraid: ERAID_CRASH_POINT=%s ignored: expected NAME:N, N >= 1\n", env);
      return a;
    }
    a->name.assign(env, static_cast<size_t>(colon - env));
    a->pass = n;
    return a;
  }();
  return *armed;
}

}  // namespace

bool CrashPointDue(const char* name) {
  Armed& a = TheArmed();
  if (a.name.empty() || a.name != name) return false;
  return a.seen.fetch_add(1, std::memory_order_relaxed) + 1 == a.pass;
}

void CrashNow(const char* name) {
  std::fprintf(stderr, "eraid: crash point %s reached: SIGKILL\n", name);
  std::fflush(stderr);
  ::kill(::getpid(), SIGKILL);
  std::abort();  // not reached
}

}  // namespace eraid
