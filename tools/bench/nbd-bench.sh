#!/usr/bin/env bash
# The block device over NBD (issue: block device). In one run, fio 4 KiB random reads and
# writes (ioengine=nbd, 50% compressible data) at QD 1, 16 and 64 against:
#   - the eraid volume: `eraid serve` on 4 file-backed emulated drives;
#   - nbdkit's memory plugin, the ceiling: the same nbdkit, fio and socket, no storage.
# Both are preconditioned by one sequential pass over the region, so reads find data.
# Reports IOPS, the ratio to the memory plugin, and eraid's latency percentiles.
# Usage: tools/bench/nbd-bench.sh [--quick] [--build DIR] [--dir TMPDIR] [--runtime S]
#   full run rewrites the nbd section of docs/benchmarks.md; --quick prints only.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
. "$ROOT/tools/bench/lib.sh"
BUILD=$ROOT/build
QUICK=0
RUNTIME=20
TMPBASE=${TMPDIR:-/tmp}
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1; RUNTIME=3 ;;
    --build) BUILD=$2; shift ;;
    --dir) TMPBASE=$2; shift ;;
    --runtime) RUNTIME=$2; shift ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "nbd-bench: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
ERAID=$BUILD/tools/eraid
[ -x "$ERAID" ] || { echo "nbd-bench: $ERAID not built (run tools/eraid.sh build)" >&2; exit 1; }
for tool in fio nbdkit; do
  command -v $tool >/dev/null || { echo "nbd-bench: $tool missing (tools/install-deps.sh)" >&2; exit 1; }
done
DEVSIZE=$([ "$QUICK" = 1 ] && echo 128M || echo 512M)
REGION=$([ "$QUICK" = 1 ] && echo 64M || echo 512M)
WORK=$(mktemp -d "$TMPBASE/eraid-nbd-bench.XXXXXX")
MEMPID=""
cleanup() {
  "$ERAID" stop --dir "$WORK/array" >/dev/null 2>&1 || true
  [ -n "$MEMPID" ] && kill "$MEMPID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

"$ERAID" create --dir "$WORK/array" --devices 4 --device-size "$DEVSIZE" >/dev/null
"$ERAID" serve --dir "$WORK/array" --daemon >/dev/null
nbdkit -f --exit-with-parent --unix "$WORK/mem.sock" memory 2G &
MEMPID=$!
for _ in $(seq 100); do [ -S "$WORK/mem.sock" ] && break; sleep 0.05; done

declare -A URI=([eraid]="nbd+unix:///?socket=$WORK/array/nbd.sock" [memory]="nbd+unix:///?socket=$WORK/mem.sock")
# fio_run TARGET RW QD [extra...] -> the terse line
fio_run() {
  local target=$1 rw=$2 qd=$3; shift 3
  fio --name=bench --ioengine=nbd --uri="${URI[$target]}" --rw="$rw" --bs=4k --iodepth="$qd" \
      --size="$REGION" --buffer_compress_percentage=50 --refill_buffers "$@" \
      --output-format=terse --terse-version=3 2>/dev/null | grep '^3;'
}
for t in memory eraid; do
  echo "nbd-bench: precondition $t ($REGION sequential)" >&2
  fio_run $t write 16 >/dev/null
done
# field(LINE, N): terse field N; pct(LINE, FIRST, P): the P percentile among 20 fields
field() { echo "$1" | cut -d';' -f"$2"; }
pct() { echo "$1" | cut -d';' -f"$2-$(($2 + 19))" | tr ';' '\n' | sed -n "s/^$3%=//p" | head -1; }
ROWS=""
for qd in 1 16 64; do
  for rw in randread randwrite; do
    declare -A IOPS=() P50=() P99=()
    for t in memory eraid; do
      echo "nbd-bench: $t $rw QD $qd (${RUNTIME}s)" >&2
      line=$(fio_run $t $rw $qd --time_based --runtime="$RUNTIME" --randrepeat=0)
      if [ "$rw" = randread ]; then i=8; p=18; else i=49; p=59; fi
      IOPS[$t]=$(field "$line" $i)
      P50[$t]=$(pct "$line" $p 50.000000)
      P99[$t]=$(pct "$line" $p 99.000000)
    done
    ratio=$(awk -v a="${IOPS[eraid]}" -v b="${IOPS[memory]}" 'BEGIN {printf "%.2f", (b > 0 ? a / b : 0)}')
    ROWS+="| $rw | $qd | ${IOPS[memory]} | ${IOPS[eraid]} | **$ratio×** | ${P50[eraid]} / ${P99[eraid]} | ${P50[memory]} / ${P99[memory]} |"$'\n'
  done
done
STATUS=$("$ERAID" status --dir "$WORK/array")
OUT=$WORK/section.md
{
  echo "## Block device over NBD (tools/)"
  echo
  echo "Command: \`tools/bench/nbd-bench.sh$([ "$QUICK" = 1 ] && echo " --quick")\` — $(date -u +%Y-%m-%d), $(nproc) cores, fio $(fio --version | sed 's/fio-//'), nbdkit $(nbdkit --version | awk '{print $2}')."
  echo "eraid: 4 emulated drives of $DEVSIZE flash (2× expansion, zstd −3, FlashAlloc) on $(df -T "$TMPBASE" | awk 'NR==2{print $2}'), served by \`eraid serve\`;"
  echo "ceiling: nbdkit's memory plugin in the same run. fio ioengine=nbd over a Unix socket, 4 KiB,"
  echo "${RUNTIME} s per point over a $REGION region written once first, \`buffer_compress_percentage=50\`."
  echo "fio and nbdkit share the machine's $(nproc) cores."
  echo
  echo "| pattern | QD | memory plugin IOPS | eraid IOPS | eraid / memory | eraid p50 / p99 (µs) | memory p50 / p99 (µs) |"
  echo "|---|---|---|---|---|---|---|"
  printf '%s' "$ROWS"
  echo
  echo "Targets (issue 5), at QD 16: randread ≥ 0.8×, randwrite ≥ 0.5× the memory plugin."
  echo
  echo "The array after the run (\`eraid status\`):"
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
