#!/usr/bin/env bash
# Sustained random writes on a full volume, with the log's GC running: fio 4 KiB random
# writes at QD 16 over NBD, Zipf 1.1, for a minute, over a volume written full once —
# IOPS second by second (fio write_iops_log), its sustained level against the first
# seconds', and the write latency's p50 / p99 / p99.9 / max. The array: 4 file-backed
# emulated drives, `--policy manual` (the scheduler converts nothing, so what is measured
# is the log and its GC).
# Usage: tools/bench/gc-bench.sh [--quick] [--build DIR] [--dir TMPDIR] [--runtime S]
#   full run rewrites the gc-bench section of docs/benchmarks.md and its plot
#   (docs/data/gc-bench.svg, .csv); --quick (small drives, 15 s) prints only.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
. "$ROOT/tools/bench/lib.sh"
BUILD=$ROOT/build
QUICK=0
RUNTIME=60
TMPBASE=${TMPDIR:-/tmp}
quick_defaults() { RUNTIME=15; }  # --quick
bench_args gc-bench '--quick=QUICK! --build=BUILD --dir=TMPBASE --runtime=RUNTIME' "$@"
ERAID=$BUILD/tools/eraid
[ -x "$ERAID" ] || { echo "gc-bench: $ERAID not built (run tools/eraid.sh build)" >&2; exit 1; }
need fio nbdkit
DEVSIZE=$([ "$QUICK" = 1 ] && echo 128M || echo 512M)
WORK=$(mktemp -d "$TMPBASE/eraid-gc-bench.XXXXXX")
A=$WORK/array
cleanup() {
  "$ERAID" stop --dir "$A" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
"$ERAID" create --dir "$A" --devices 4 --device-size "$DEVSIZE" --policy manual >/dev/null
"$ERAID" serve --dir "$A" --daemon >/dev/null
URI="nbd+unix:///?socket=$A/nbd.sock"
echo "gc-bench: filling the volume once (sequential 64 KiB writes)" >&2
fio --name=fill --ioengine=nbd --uri="$URI" --rw=write --bs=64k --iodepth=16 \
    --buffer_compress_percentage=50 --refill_buffers >/dev/null 2>&1
echo "gc-bench: random 4 KiB writes, QD 16, Zipf 1.1, ${RUNTIME}s" >&2
cost_begin "$(serve_pid "$A")" "$WORK/perf.out"
line=$(fio --name=gc --ioengine=nbd --uri="$URI" --rw=randwrite --bs=4k --iodepth=16 \
           --random_distribution=zipf:1.1 --buffer_compress_percentage=50 --refill_buffers \
           --time_based --runtime="$RUNTIME" --randrepeat=0 --percentile_list=50:99:99.9 \
           --write_iops_log="$WORK/gc" --log_avg_msec=1000 \
           --output-format=terse --terse-version=3 2>/dev/null | grep '^3;')
cost_end
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
STATUS=$("$ERAID" status --dir "$A" --json)
wa=$(echo "$STATUS" | grep -o '"wa":{"log":[0-9.]*' | head -1 | sed 's/.*://' | xargs printf '%.2f')
iops=$(echo "$line" | cut -d';' -f49)
maxlat=$(echo "$line" | cut -d';' -f56)
lat() { echo "$line" | cut -d';' -f59-78 | tr ';' '\n' | sed -n "s/^$1%=//p" | head -1; }
p50=$(lat 50.000000)
p99=$(lat 99.000000)
p999=$(lat 99.900000)
ios=$(( $(echo "$line" | cut -d';' -f47) / 4 ))  # KiB written / 4
cpu_us=$(per_io "$(awk -v ms="$COST_CPU_MS" 'BEGIN {print ms * 1000}')" "$ios" "%.1f")
cs=$(per_io "$COST_CS" "$ios" "%.2f")
# Seconds of IOPS: column 1 is the end of the interval in ms, column 2 the IOPS in it.
CSV=$WORK/gc.csv
echo "second,iops" > "$CSV"
awk -F', *' '{printf "%d,%d\n", ($1 + 500) / 1000, $2}' "$WORK"/gc_iops*.log >> "$CSV"
read -r first sustained worst < <(awk -F, -v rt="$RUNTIME" 'NR > 1 {
    n++; v[n] = $2 }
  END {
    f = 0; for (i = 1; i <= 5 && i <= n; i++) f += v[i]; f /= (n < 5 ? n : 5)
    s = 0; c = 0; w = -1
    for (i = int(n / 2) + 1; i <= n; i++) { s += v[i]; c++ }
    for (i = 6; i <= n; i++) if (w < 0 || v[i] < w) w = v[i]
    printf "%d %d %d\n", f, (c ? s / c : 0), (w < 0 ? 0 : w) }' "$CSV")
ratio=$(awk -v s="$sustained" -v f="$first" 'BEGIN {printf "%.2f", (f > 0 ? s / f : 0)}')
# The plot: IOPS over time as an SVG polyline (no plotting package needed).
SVG=$WORK/gc.svg
awk -F, -v title="4 KiB random writes on a full volume (QD 16, Zipf 1.1): IOPS per second" 'NR > 1 {
    n++; x[n] = $1; y[n] = $2; if ($2 > m) m = $2; if ($1 > t) t = $1 }
  END {
    W = 720; H = 320; L = 60; B = 40; T = 30; R = 20
    top = 10000 * int(m / 10000 + 1)
    printf "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" font-size=\"12\">\n", W, H
    printf "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n<text x=\"%d\" y=\"18\">%s</text>\n", L, title
    for (k = 0; k <= 4; k++) {
      v = top * k / 4; yy = H - B - (H - B - T) * k / 4
      printf "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/><text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%gk</text>\n", L, yy, W - R, yy, L - 6, yy + 4, v / 1000
    }
    for (k = 0; k <= 6; k++) {
      s = t * k / 6; xx = L + (W - L - R) * k / 6
      printf "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%ds</text>\n", xx, H - B + 18, s
    }
    printf "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\""
    for (i = 1; i <= n; i++) printf "%.1f,%.1f ", L + (W - L - R) * x[i] / (t ? t : 1), H - B - (H - B - T) * y[i] / top
    printf "\"/>\n</svg>\n" }' "$CSV" > "$SVG"

OUT=$WORK/section.md
{
  echo "## Sustained writes with GC on a full volume (log/)"
  echo
  echo "Command: \`tools/bench/gc-bench.sh$([ "$QUICK" = 1 ] && echo " --quick")\` — $(date -u +%Y-%m-%d), $(nproc) cores, fio $(fio --version | sed 's/fio-//'), nbdkit $(nbdkit --version | awk '{print $2}')."
  echo "4 emulated drives of $DEVSIZE flash, \`--policy manual\`; the volume written full once with"
  echo "64 KiB sequential writes, then fio 4 KiB random writes at QD 16, Zipf 1.1, 50% compressible,"
  echo "for ${RUNTIME} s. Sustained = mean IOPS of the second half; first = the first 5 s."
  echo "Load average (1, 5, 15 min) before the run: $LOAD_BEFORE; after: $LOAD_AFTER (the run's own fio and nbdkit)."
  echo
  echo "The server's cost: CPU time of the serving nbdkit process (all its threads) and its context"
  echo "switches, per write, over the random-write run$([ "$COST_PERF" = 1 ] && echo " (\`perf stat -p\`)" || echo " (switches not measured: no perf)")."
  echo
  echo "| IOPS (mean) | first 5 s | sustained | sustained / first | lowest second | p50 / p99 / p99.9 / max latency (µs) | WA | server CPU µs / write | switches / write |"
  echo "|---|---|---|---|---|---|---|---|---|"
  echo "| $iops | $first | $sustained | **$ratio×** | $worst | $p50 / $p99 / **$p999** / $maxlat | $wa | $cpu_us | $cs |"
  echo
  echo "IOPS second by second: ![IOPS over time](data/gc-bench.svg) (data: \`docs/data/gc-bench.csv\`)."
} > "$OUT"
if [ "$QUICK" = 1 ]; then
  cat "$OUT"
  cat "$CSV"
else
  mkdir -p "$ROOT/docs/data"
  cp "$CSV" "$ROOT/docs/data/gc-bench.csv"
  cp "$SVG" "$ROOT/docs/data/gc-bench.svg"
  write_section gc-bench "$OUT"
fi
