// ERAID_CHECK(cond): an invariant of the code (not of its input) that must hold on the hot
// path. Checked in Debug and sanitizer builds and wherever ERAID_CHECKS is defined
// (cmake -DERAID_CHECKS=ON); compiled out otherwise (the condition is still parsed, so it
// cannot rot). A failed check prints the condition and where, then aborts: it is a bug,
// and a core dump or a sanitizer's stack is the most useful thing to leave behind.
//
// Input a caller can get wrong (a bad LBA, a short buffer) is answered with a Status,
// never checked with this.
#pragma once

namespace eraid {

[[noreturn]] void CheckFailed(const char* condition, const char* file, int line);

}  // namespace eraid

#if defined(ERAID_CHECKS)
#define ERAID_CHECK(cond) \
  (__builtin_expect(!!(cond), 1) ? (void)0 : ::eraid::CheckFailed(#cond, __FILE__, __LINE__))
#else
#define ERAID_CHECK(cond) ((void)sizeof(!(cond)))
#endif
