// `eraid demo`: the README's first command. Creates a 4-drive array of emulated
// compressing drives under a temporary folder, serves it with nbdkit, runs fio 4 KiB
// random writes (ioengine=nbd, verify=crc32c), fails a drive mid-run, verifies every block
// degraded, rebuilds onto a fresh drive, verifies again, scrubs, and prints a summary
// (IOPS, latency, log WA, device WAF, compression, RAID10 coverage, rebuild time).
#pragma once

namespace eraid {

int RunDemo(int argc, char** argv);

}  // namespace eraid
