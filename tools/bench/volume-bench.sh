#!/usr/bin/env bash
# What trims and named volumes do for users, measured over NBD on file-backed emulated
# drives (4 drives, `--policy manual`: the log and its GC alone):
#  1. WA and valid bytes under a file-system-like workload — the volume filled to 60%
#     with 64 KiB random writes, then rounds of "deleting" 20% of it (fio randtrim) and
#     writing 20% anew (randwrite, 64 KiB) — with the deletes sent as trims, and
#     without (a file system mounted without discard: deleted blocks stay valid).
#  2. 4 KiB random write and read IOPS, QD 16 each, on one named volume alone and on two
#     side by side (each half the array).
# Usage: tools/bench/volume-bench.sh [--quick] [--build DIR] [--dir TMPDIR] [--drive-model SPEC]
#   --drive-model: the drives' timing model (default none: figures against nbdkit's memory plugin)
#   full run rewrites the volume-bench section of docs/benchmarks.md; --quick prints only.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BENCH_DRIVE_MODEL=${BENCH_DRIVE_MODEL:-none}  # before lib.sh, whose default is a model
. "$ROOT/tools/bench/lib.sh"
BUILD=$ROOT/build
QUICK=0
TMPBASE=${TMPDIR:-/tmp}
bench_args volume-bench '--quick=QUICK! --build=BUILD --dir=TMPBASE --drive-model=BENCH_DRIVE_MODEL' "$@"
ERAID=$BUILD/tools/eraid
[ -x "$ERAID" ] || { echo "volume-bench: $ERAID not built (run tools/eraid.sh build)" >&2; exit 1; }
need fio nbdkit
DEVSIZE=$([ "$QUICK" = 1 ] && echo 128M || echo 512M)
ROUNDS=$([ "$QUICK" = 1 ] && echo 6 || echo 10)
RUNTIME=$([ "$QUICK" = 1 ] && echo 5 || echo 15)
WORK=$(mktemp -d "$TMPBASE/eraid-volume-bench.XXXXXX")
cleanup() {
  for a in "$WORK"/*/; do "$ERAID" stop --dir "$a" >/dev/null 2>&1 || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)

# fs_like trims|notrims: prints "log_wa valid_mib written_mib gc_mib trimmed_mib"
fs_like() {
  local mode=$1 a=$WORK/$1 uri
  array_up "$ERAID" "$a" --devices 4 --device-size "$DEVSIZE" --policy manual
  uri="nbd+unix:///?socket=$a/nbd.sock"
  local cap
  cap=$(json_num "$("$ERAID" status --dir "$a" --json)" capacity_bytes)
  local chunk=$((cap / 5 / 65536 * 65536))
  fio --name=fill --ioengine=nbd --uri="$uri" --rw=randwrite --bs=64k --iodepth=16 --io_size=$((chunk * 3)) \
      --buffer_compress_percentage=50 --refill_buffers --randrepeat=0 >/dev/null 2>&1
  for ((r = 0; r < ROUNDS; r++)); do
    if [ "$mode" = trims ]; then
      fio --name=delete --ioengine=nbd --uri="$uri" --rw=randtrim --bs=64k --iodepth=16 --io_size=$chunk \
          --randrepeat=0 >/dev/null 2>&1
    fi
    fio --name=write --ioengine=nbd --uri="$uri" --rw=randwrite --bs=64k --iodepth=16 --io_size=$chunk \
        --buffer_compress_percentage=50 --refill_buffers --randrepeat=0 >/dev/null 2>&1
  done
  local st
  st=$("$ERAID" status --dir "$a" --json)
  array_down "$ERAID" "$a"
  echo "$st" | python3 -c '
import json, sys
d = json.load(sys.stdin); c = d["counters"]; m = 1 << 20
print("%.3f %d %d %d %d" % (d["wa"]["log"], d["valid_bytes"] / m, c["user_written_bytes"] / m, c["gc_written_bytes"] / m, c["trimmed_bytes"] / m))'
}
say volume-bench "file-system-like workload, deletes as trims"
read -r wa_t valid_t written_t gc_t trimmed_t < <(fs_like trims)
say volume-bench "file-system-like workload, deletes not sent"
read -r wa_n valid_n written_n gc_n trimmed_n < <(fs_like notrims)

# Two volumes side by side vs one.
A=$WORK/vols
array_up "$ERAID" "$A" --devices 4 --device-size "$DEVSIZE" --policy manual
CAP=$(json_num "$("$ERAID" status --dir "$A" --json)" capacity_bytes)
HALF=$((CAP / 2 / 4096 * 4096))
"$ERAID" volume create --dir "$A" --name v1 --size $HALF >/dev/null
"$ERAID" volume create --dir "$A" --name v2 --size $HALF >/dev/null
u() { echo "nbd+unix:///$1?socket=$A/nbd.sock"; }
for v in v1 v2; do
  fio --name=fill --ioengine=nbd --uri="$(u $v)" --rw=write --bs=256k --iodepth=8 \
      --buffer_compress_percentage=50 --refill_buffers >/dev/null 2>&1
done
# run RW QD VOLUME...: total IOPS of one fio process with a job per volume, all at once
# (QD each, RUNTIME s; one process either way, so fio's own CPU is alike).
run() {
  local rw=$1 qd=$2; shift 2
  local jobs=() v
  for v in "$@"; do jobs+=(--name="$v" --uri="$(u "$v")"); done
  terse_iops "$(fio --ioengine=nbd --rw="$rw" --bs=4k --iodepth="$qd" --refill_buffers --buffer_compress_percentage=50 \
      --randrepeat=0 --time_based --runtime="$RUNTIME" --group_reporting "${jobs[@]}" \
      --output-format=terse --terse-version=3 2>/dev/null | grep '^3;' | tail -1)"
}
# The log fills during the first random writes and GC starts: warm up first, so every
# run measures the same steady state rather than the first one a log with free room.
say volume-bench "warm-up: random writes on both volumes until GC runs steadily"
run randwrite 16 v1 v2 >/dev/null
declare -A one two one32
for rw in randwrite randread; do
  say volume-bench "$rw: one volume, two side by side, one at QD 32"
  one[$rw]=$(run $rw 16 v1)
  two[$rw]=$(run $rw 16 v1 v2)
  one32[$rw]=$(run $rw 32 v1)
done
array_down "$ERAID" "$A"
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", (b > 0 ? a / b : 0)}'; }

OUT=$WORK/section.md
{
  echo "## Trims and named volumes (log/volumes, NBD)"
  echo
  echo "Command: \`tools/bench/volume-bench.sh$([ "$QUICK" = 1 ] && echo " --quick")\` — $(date -u +%Y-%m-%d), $(nproc) cores, fio $(fio --version | sed 's/fio-//'), nbdkit $(nbdkit --version | awk '{print $2}')."
  echo "4 emulated drives of $DEVSIZE flash, \`--policy manual\`, 50% compressible data."
  echo "Load average (1, 5, 15 min) before: $LOAD_BEFORE; after: $LOAD_AFTER (the run's own fio and nbdkit)."
  echo
  echo "**File-system-like workload**: the volume filled to 60% with 64 KiB random writes, then"
  echo "$ROUNDS rounds of deleting 20% of it (64 KiB random trims) and writing 20% anew (64 KiB"
  echo "random writes). Without trims the deleted blocks stay valid, as under a file system"
  echo "mounted without discard and never \`fstrim\`-ed."
  echo
  echo "| deletes | log WA | valid at the end (MiB) | user writes (MiB) | GC writes (MiB) | trimmed (MiB) |"
  echo "|---|---|---|---|---|---|"
  echo "| sent as trims | **$wa_t** | $valid_t | $written_t | $gc_t | $trimmed_t |"
  echo "| not sent | **$wa_n** | $valid_n | $written_n | $gc_n | $trimmed_n |"
  echo
  echo "**Two volumes side by side** (each half the array, written full first, then ${RUNTIME} s of random"
  echo "writes on both so GC is running in every measured run; one fio process,"
  echo "4 KiB, QD 16 on each volume, ${RUNTIME} s): total IOPS of both against one volume alone,"
  echo "and one volume at the same total queue depth (32), which tells the volumes apart from the"
  echo "deeper queue."
  echo
  echo "| | one volume, QD 16 | two volumes, QD 16 each | two / one | one volume, QD 32 |"
  echo "|---|---|---|---|---|"
  for rw in randwrite randread; do
    echo "| $rw | ${one[$rw]} | ${two[$rw]} | $(ratio "${two[$rw]}" "${one[$rw]}")× | ${one32[$rw]} |"
  done
} > "$OUT"
if [ "$QUICK" = 1 ]; then cat "$OUT"; else write_section volume-bench "$OUT"; fi
