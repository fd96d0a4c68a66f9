#!/usr/bin/env bash
# Array-layer benchmarks (issue: elastic RAID). In one run:
#   write throughput of RAID5 (full stripes) and RAID10 on memory devices, as a ratio to
#   memcpy bandwidth measured in the same process; degraded read amplification; and
#   conversion throughput each way on memory and on file (io_uring) devices.
# Usage: tools/bench/raid-bench.sh [--quick] [--build DIR] [--dir TMPDIR]
#   full run rewrites the raid section of docs/benchmarks.md; --quick prints only.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
. "$ROOT/tools/bench/lib.sh"
BUILD=$ROOT/build
QUICK=0
TMPBASE=${TMPDIR:-/tmp}
bench_args raid-bench '--quick=QUICK! --build=BUILD --dir=TMPBASE' "$@"
BENCH=$BUILD/tools/bench/eraid-raid-bench
[ -x "$BENCH" ] || { echo "raid-bench: $BENCH not built (run tools/eraid.sh build)" >&2; exit 1; }
SEGS=$([ "$QUICK" = 1 ] && echo 8 || echo 64)
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
kv() { sed -n "s/.*[[:space:]]$1=\([^[:space:]]*\).*/\1/p"; }

echo "raid-bench: write throughput" >&2
W=$("$BENCH" write --segments "$SEGS")
echo "raid-bench: degraded reads" >&2
D=$("$BENCH" degraded)
echo "raid-bench: conversions (memory, file)" >&2
CM=$("$BENCH" convert --backend mem --segments "$SEGS")
CF=$("$BENCH" convert --backend file --segments "$SEGS" --dir "$TMPBASE")
{
  echo "## Array layer (raid/)"
  echo
  echo "Command: \`tools/bench/raid-bench.sh$([ "$QUICK" = 1 ] && echo " --quick")\` — $(date -u +%Y-%m-%d), $(nproc) cores."
  echo "4 devices (n = 3), 64 KiB chunks, 16 rows per slot, $SEGS segments of 3 MiB user data, 50% compressible data."
  echo
  echo "| measurement | RAID5 | RAID10 | ceiling / expectation |"
  echo "|---|---|---|---|"
  echo "| append throughput, memory devices (GB/s) | $(echo "$W" | grep raid5 | kv gbps) | $(echo "$W" | grep raid10 | kv gbps) | memcpy $(echo "$W" | head -1 | kv memcpy_gbps) GB/s |"
  echo "| ... as a ratio to memcpy | $(echo "$W" | grep raid5 | kv ratio) | $(echo "$W" | grep raid10 | kv ratio) | RAID5 writes (n+1)/n of the data, RAID10 2× |"
  echo "| degraded: device reads per read of a block on the failed device | $(echo "$D" | grep raid5 | kv reads_per_lost_block) | $(echo "$D" | grep raid10 | kv reads_per_lost_block) | n = 3 and 1 |"
  echo "| degraded: device reads per user read, all blocks | $(echo "$D" | grep raid5 | kv reads_per_user_read) | $(echo "$D" | grep raid10 | kv reads_per_user_read) | 2n/(n+1) = 1.5 and 1 |"
  echo
  echo "| conversion throughput (MB/s of user data) | to RAID10 | to RAID5 |"
  echo "|---|---|---|"
  echo "| memory devices | $(echo "$CM" | grep "to=raid10" | kv mbps) | $(echo "$CM" | grep "to=raid5" | kv mbps) |"
  echo "| file devices (io_uring, buffered, $(df -T "$TMPBASE" | awk 'NR==2{print $2}')) | $(echo "$CF" | grep "to=raid10" | kv mbps) | $(echo "$CF" | grep "to=raid5" | kv mbps) |"
  echo
  echo "Conversion reads every block through the CRC-checked path and writes only the new"
  echo "redundancy (RAID5→RAID10: n chunks of copies per row; RAID10→RAID5: one parity chunk),"
  echo "flushes, journals the flip on every device, then trims the old redundancy."
} > "$OUT"
if [ "$QUICK" = 1 ]; then
  cat "$OUT"
else
  write_section raid-bench "$OUT"
fi
