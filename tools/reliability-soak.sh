#!/usr/bin/env bash
# The reliability suite at soak size (docs/reliability.md): the same tests as the default
# suite, longer. Needs a build (tools/eraid.sh build) and, for the fuzzers, the fuzzing
# build the test command makes (build-fuzz). Prints each part's summary line.
# Usage: tools/reliability-soak.sh [--quick] [--fuzz-seconds S]
#   --quick  a few minutes instead of about half an hour
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
B=$ROOT/build
FUZZ_SECONDS=300 KILLS=200 CKPT_KILLS=100 ARRAY=5000 DRIVE=160 VOLUME=100 SCHED=300 ROT=40 FAULTS=20
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) FUZZ_SECONDS=30 KILLS=40 CKPT_KILLS=12 ARRAY=500 DRIVE=24 VOLUME=12 SCHED=16 ROT=10 FAULTS=3 ;;
    --fuzz-seconds) FUZZ_SECONDS=$2; shift ;;
    -h|--help) awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"; exit 0 ;;
    *) echo "reliability-soak: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[ -x "$B/tools/eraid-crash" ] || { echo "reliability-soak: build first (tools/eraid.sh build)" >&2; exit 1; }
step() { echo "== $*" >&2; }

step "NBD server SIGKILLed $KILLS times under writes"
"$B/tools/eraid-crash" --kills "$KILLS" --max-ms 800 | tail -1
step "NBD server killed halfway through a drive checkpoint, $CKPT_KILLS times"
"$B/tools/eraid-crash" --kills "$CKPT_KILLS" --at-checkpoint --max-ms 5000 | tail -2
step "array power cuts: $ARRAY seeds x 4 (conversions, rebuilds)"
ERAID_RAID_CRASH_SEEDS=$ARRAY "$B/tests/raid/raid_array_crash_test" | grep '^crashes='
step "drive power cuts: $DRIVE seeds"
ERAID_CRASH_SEEDS=$DRIVE "$B/tests/compress/compress_drive_crash_test" | grep -iE '^(cuts|crashes|power)|verified' | tail -1
step "volume power cuts across GC: $VOLUME seeds"
ERAID_VOLUME_CRASH_SEEDS=$VOLUME "$B/tests/log/log_volume_test" --gtest_filter='VolumeCrashTest.*' | grep -E 'OK|FAILED' | tail -1
step "scheduler converting through power cuts: $SCHED seeds"
ERAID_SCHEDULER_CRASH_SEEDS=$SCHED "$B/tests/scheduler/scheduler_test" --gtest_filter='SchedulerCrashTest.*' |
  grep -E '^power_cuts=|FAILED'
step "bit rot: $ROT rounds each"
ERAID_BIT_ROT_ROUNDS=$ROT "$B/tests/reliability/reliability_bit_rot_test" | grep -E 'all rounds|refused'
step "device faults: $FAULTS runs"
for ((i = 0; i < FAULTS; i++)); do
  "$B/tests/reliability/reliability_device_faults_test" > /tmp/eraid-faults.$$ 2>&1 ||
    { cat /tmp/eraid-faults.$$; rm -f /tmp/eraid-faults.$$; exit 1; }
done
grep 'after the second failure' /tmp/eraid-faults.$$; rm -f /tmp/eraid-faults.$$
echo "device faults: $FAULTS runs of 5 tests passed"
if [ -x "$ROOT/build-fuzz/tests/fuzz/fuzz_decoders" ]; then
  for t in fuzz_decoders fuzz_trace; do
    step "libFuzzer $t for $FUZZ_SECONDS s"
    corpus=$ROOT/build-fuzz/tests/fuzz/corpus-$t
    mkdir -p "$corpus"
    "$ROOT/build-fuzz/tests/fuzz/$t" -max_total_time="$FUZZ_SECONDS" -print_final_stats=1 "$corpus" 2>&1 |
      grep -E 'number_of_executed_units|ERROR' | sed "s/^/$t: /"
  done
else
  echo "fuzzers: no build-fuzz (tools/eraid.sh test makes it)" >&2
fi
