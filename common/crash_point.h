// Crash points: a test's way to kill the process at an exact step of an on-disk protocol,
// where a kill at a random moment would land there only by luck.
//
// ERAID_CRASH_POINT=NAME:N arms the point NAME: its Nth pass in this process (counted from
// 1) is due, and the caller does what a crash there would have left done — e.g. half of a
// write — then calls CrashNow(), which SIGKILLs the process. Unset (every real use), a pass
// costs a load of a flag read once.
//
// Points: "drive-checkpoint" (compress/drive_log.cc: a drive dies with its checkpoint's
// header and half its payload written; eraid-crash --at-checkpoint).
#pragma once

namespace eraid {

bool CrashPointDue(const char* name);
[[noreturn]] void CrashNow(const char* name);

}  // namespace eraid
