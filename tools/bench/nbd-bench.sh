#!/usr/bin/env bash
# The block device over NBD (issue: block device). In one run, fio 4 KiB random reads and
# writes (ioengine=nbd, 50% compressible data) at QD 1, 16 and 64 against:
#   - nbdkit's memory plugin, the ceiling: the same nbdkit, fio and socket, no storage;
#   - eraid with its 4 emulated drives' flash files in RAM (tmpfs, --ram-dir): like the
#     ceiling, nothing below the stack but memory;
#   - eraid with its flash files on the disk's filesystem (--dir), as the demo runs.
# Each is preconditioned by one sequential pass over the region, so reads find data.
# Each point's time is split into rounds that alternate the targets (their order rotating),
# so a ratio compares runs seconds apart: this machine's speed drifts by ±10% over
# minutes, the memory plugin's too.
# Reports IOPS, the ratios to the memory plugin, and latency percentiles.
# Usage: tools/bench/nbd-bench.sh [--quick] [--build DIR] [--dir TMPDIR] [--ram-dir DIR]
#                                 [--runtime S] [--rounds N]
#   --ram-dir defaults to /dev/shm (skipped, with a note, if it is not tmpfs); a full run
#   rewrites the nbd section of docs/benchmarks.md; --quick prints only.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
. "$ROOT/tools/bench/lib.sh"
BUILD=$ROOT/build
QUICK=0
RUNTIME=20
ROUNDS=4
TMPBASE=${TMPDIR:-/tmp}
RAMBASE=/dev/shm
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1; RUNTIME=3; ROUNDS=1 ;;
    --build) BUILD=$2; shift ;;
    --dir) TMPBASE=$2; shift ;;
    --ram-dir) RAMBASE=$2; shift ;;
    --runtime) RUNTIME=$2; shift ;;
    --rounds) ROUNDS=$2; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "nbd-bench: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
case "$RUNTIME$ROUNDS" in *[!0-9]*) echo "nbd-bench: --runtime and --rounds take whole numbers" >&2; exit 2 ;; esac
[ "$ROUNDS" -ge 1 ] && [ "$RUNTIME" -ge "$ROUNDS" ] || { echo "nbd-bench: need 1 <= --rounds <= --runtime" >&2; exit 2; }
ERAID=$BUILD/tools/eraid
[ -x "$ERAID" ] || { echo "nbd-bench: $ERAID not built (run tools/eraid.sh build)" >&2; exit 1; }
for tool in fio nbdkit; do
  command -v $tool >/dev/null || { echo "nbd-bench: $tool missing (tools/install-deps.sh)" >&2; exit 1; }
done
DEVSIZE=$([ "$QUICK" = 1 ] && echo 128M || echo 512M)
REGION=$([ "$QUICK" = 1 ] && echo 64M || echo 512M)
fstype() { df -T "$1" 2>/dev/null | awk 'NR==2{print $2}'; }
RAMNOTE=""
if [ "$(fstype "$RAMBASE")" != tmpfs ]; then
  RAMNOTE="No tmpfs at $RAMBASE: the flash-in-RAM column was not measured."
  RAMBASE=""
fi
WORK=$(mktemp -d "$TMPBASE/eraid-nbd-bench.XXXXXX")
RAMWORK=""
[ -n "$RAMBASE" ] && RAMWORK=$(mktemp -d "$RAMBASE/eraid-nbd-bench.XXXXXX")
MEMPID=""
cleanup() {
  "$ERAID" stop --dir "$WORK/array" >/dev/null 2>&1 || true
  [ -n "$RAMWORK" ] && { "$ERAID" stop --dir "$RAMWORK/array" >/dev/null 2>&1 || true; rm -rf "$RAMWORK"; }
  [ -n "$MEMPID" ] && kill "$MEMPID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

declare -A URI=([memory]="nbd+unix:///?socket=$WORK/mem.sock")
TARGETS=(memory)
if [ -n "$RAMWORK" ]; then
  TARGETS+=(ram)
  URI[ram]="nbd+unix:///?socket=$RAMWORK/array/nbd.sock"
fi
TARGETS+=(disk)
URI[disk]="nbd+unix:///?socket=$WORK/array/nbd.sock"
for dir in "$RAMWORK" "$WORK"; do
  [ -n "$dir" ] || continue
  "$ERAID" create --dir "$dir/array" --devices 4 --device-size "$DEVSIZE" >/dev/null
  "$ERAID" serve --dir "$dir/array" --daemon >/dev/null
done
nbdkit -f --exit-with-parent --unix "$WORK/mem.sock" memory 2G &
MEMPID=$!
for _ in $(seq 100); do [ -S "$WORK/mem.sock" ] && break; sleep 0.05; done

# fio_run TARGET RW QD [extra...] -> the terse line
fio_run() {
  local target=$1 rw=$2 qd=$3; shift 3
  fio --name=bench --ioengine=nbd --uri="${URI[$target]}" --rw="$rw" --bs=4k --iodepth="$qd" \
      --size="$REGION" --buffer_compress_percentage=50 --refill_buffers "$@" \
      --output-format=terse --terse-version=3 2>/dev/null | grep '^3;'
}
for t in "${TARGETS[@]}"; do
  echo "nbd-bench: precondition $t ($REGION sequential)" >&2
  fio_run "$t" write 16 >/dev/null
done
# field(LINE, N): terse field N; pct(LINE, FIRST, P): the P percentile among 20 fields
field() { echo "$1" | cut -d';' -f"$2"; }
pct() { echo "$1" | cut -d';' -f"$2-$(($2 + 19))" | tr ';' '\n' | sed -n "s/^$3%=//p" | head -1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", (b > 0 ? a / b : 0)}'; }
ROWS=""
for qd in 1 16 64; do
  for rw in randread randwrite; do
    declare -A IOPS=([ram]="–") LAT=([ram]="–") SUM=() P50=() P99=()
    if [ "$rw" = randread ]; then i=8; p=18; else i=49; p=59; fi
    n=${#TARGETS[@]}
    for ((round = 0; round < ROUNDS; round++)); do
      for ((k = 0; k < n; k++)); do
        t=${TARGETS[$(((k + round) % n))]}
        echo "nbd-bench: $t $rw QD $qd, round $((round + 1))/$ROUNDS ($((RUNTIME / ROUNDS))s)" >&2
        line=$(fio_run "$t" $rw $qd --time_based --runtime="$((RUNTIME / ROUNDS))" --randrepeat=0)
        SUM[$t]=$(( ${SUM[$t]:-0} + $(field "$line" $i) ))
        P50[$t]=$(( ${P50[$t]:-0} + $(pct "$line" $p 50.000000) ))
        P99[$t]=$(( ${P99[$t]:-0} + $(pct "$line" $p 99.000000) ))
      done
    done
    for t in "${TARGETS[@]}"; do  # means over the rounds
      IOPS[$t]=$(( SUM[$t] / ROUNDS ))
      LAT[$t]="$(( P50[$t] / ROUNDS )) / $(( P99[$t] / ROUNDS ))"
    done
    ram_ratio="–"
    [ -n "$RAMWORK" ] && ram_ratio="**$(ratio "${IOPS[ram]}" "${IOPS[memory]}")×**"
    ROWS+="| $rw | $qd | ${IOPS[memory]} | ${IOPS[ram]} | $ram_ratio | ${IOPS[disk]} | **$(ratio "${IOPS[disk]}" "${IOPS[memory]}")×** | ${LAT[memory]} | ${LAT[ram]} | ${LAT[disk]} |"$'\n'
  done
done
STATUS=$("$ERAID" status --dir "$WORK/array")
OUT=$WORK/section.md
{
  echo "## Block device over NBD (tools/)"
  echo
  echo "Command: \`tools/bench/nbd-bench.sh$([ "$QUICK" = 1 ] && echo " --quick")\` — $(date -u +%Y-%m-%d), $(nproc) cores, fio $(fio --version | sed 's/fio-//'), nbdkit $(nbdkit --version | awk '{print $2}')."
  echo "eraid: 4 emulated drives of $DEVSIZE flash (2× expansion, zstd −3, FlashAlloc), served by \`eraid serve\`,"
  echo "twice: with the drives' flash files in RAM (tmpfs) and on the disk ($(fstype "$TMPBASE")). Ceiling: nbdkit's"
  echo "memory plugin, in the same run. fio ioengine=nbd over a Unix socket, 4 KiB, ${RUNTIME} s per point and target,"
  echo "in $ROUNDS round(s) that alternate the targets (IOPS and latencies: the rounds' means),"
  echo "over a $REGION region written once first, \`buffer_compress_percentage=50\`. fio and nbdkit"
  echo "share the machine's $(nproc) cores. Latencies are fio's completion latency p50 / p99 in µs."
  [ -n "$RAMNOTE" ] && { echo; echo "$RAMNOTE"; }
  echo
  echo "| pattern | QD | memory plugin IOPS | eraid, flash in RAM | / memory | eraid, flash on disk | / memory | memory lat | RAM lat | disk lat |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  printf '%s' "$ROWS"
  echo
  echo "Targets (issue 5), at QD 16: randread ≥ 0.8×, randwrite ≥ 0.5× the memory plugin."
  echo
  echo "The disk-backed array after the run (\`eraid status\`):"
  echo
  echo '```'
  echo "$STATUS" | sed -n '1,8p'
  echo '```'
} > "$OUT"
if [ "$QUICK" = 1 ]; then
  cat "$OUT"
else
  write_section nbd-bench "$OUT"
fi
