// Background work — conversion, rebuild, scrub — runs below user I/O in priority: the
// thread that does it lowers its own CPU priority (Linux keeps a nice value per thread),
// so on a busy machine the scheduler of the kernel gives user requests the cores first
// and background work the rest, without stopping it (nice 10 weighs ~1/10 of nice 0).
#pragma once

namespace eraid {

inline constexpr int kBackgroundNice = 10;

// Lowers the calling thread to kBackgroundNice above its current nice value (at most
// 19). Returns the new value, or the unchanged one if the system refused.
int LowerThisThreadPriority();

// The calling thread's nice value.
int ThisThreadNice();

// Names the calling thread (at most 15 characters are kept), so that top -H, perf and
// /proc/PID/task/*/comm tell the stack's threads from nbdkit's own.
void NameThisThread(const char* name);

}  // namespace eraid
