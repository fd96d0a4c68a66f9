#include "common/check.h"

#include <cstdio>
#include <cstdlib>

namespace eraid {

void CheckFailed(const char* condition, const char* file, int line) {
  std::fprintf(stderr, "%s:%d: ERAID_CHECK failed: %s\n", file, line, condition);
  std::fflush(stderr);
  std::abort();
}

}  // namespace eraid
