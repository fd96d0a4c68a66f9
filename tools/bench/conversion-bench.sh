#!/usr/bin/env bash
# Conversion under load (issue: scheduler): user IOPS while segments are converted in the
# background at 100, 200 and 400 MB/s, as a ratio to no conversion — the Elastic RAID
# paper's Figures 12 and 13 on this stack. The array (4 file-backed emulated drives,
# policy `manual` so the scheduler stays out of it) is filled once and written over once
# at random (so GC is under way); then fio 4 KiB random reads and writes at QD 16 over
# NBD run while a loop of `eraid convert --to raid10|raid5 --rate R` converts every
# sealed segment one way, then back, paced to R user bytes/s.
# Usage: tools/bench/conversion-bench.sh [--quick] [--build DIR] [--dir TMPDIR] [--runtime S]
#   [--rates L] conversion rates in MB/s (default 100,200,400), in the drives' own time: on a
#     model slowed by time_scale=S the throttle is R/S MB/s of this host's time, as the
#     paper's rates are against its drives' speed (converted MB/s are reported both ways)
#   [--rounds N] the patterns and rates N times over on the same array; the table gives
#     each figure's median and its spread (default 1)
#   [--drive-model SPEC] (the drives' timing model, default csd,time_scale=50; none: untimed; --quick: none unless given after it)
#   full run rewrites the conversion-bench section of docs/benchmarks.md; --quick prints only.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
. "$ROOT/tools/bench/lib.sh"
BUILD=$ROOT/build
QUICK=0
RUNTIME=20 RATES=100,200,400 ROUNDS=1
TMPBASE=${TMPDIR:-/tmp}
quick_defaults() { RUNTIME=3; BENCH_DRIVE_MODEL=none; }  # --quick: small, on the untimed drives
bench_args conversion-bench '--quick=QUICK! --build=BUILD --dir=TMPBASE --runtime=RUNTIME --rates=RATES
  --rounds=ROUNDS --drive-model=BENCH_DRIVE_MODEL' "$@"
[[ "$ROUNDS" =~ ^[0-9]+$ && "$ROUNDS" -gt 0 ]] || { echo "conversion-bench: --rounds takes a whole number > 0" >&2; exit 2; }
for r in ${RATES//,/ }; do
  [[ "$r" =~ ^[0-9]+$ && "$r" -gt 0 ]] || { echo "conversion-bench: a rate is a whole number of MB/s > 0, not '$r'" >&2; exit 2; }
done
# The model's slowdown: rates are in its drives' time, the throttle in this host's.
SCALE=$(echo "$BENCH_DRIVE_MODEL" | { grep -o 'time_scale=[0-9.]*' || true; } | cut -d= -f2)
SCALE=${SCALE:-1}
ERAID=$BUILD/tools/eraid
[ -x "$ERAID" ] || { echo "conversion-bench: $ERAID not built (run tools/eraid.sh build)" >&2; exit 1; }
need fio nbdkit
DEVSIZE=$([ "$QUICK" = 1 ] && echo 128M || echo 512M)
REGION=$([ "$QUICK" = 1 ] && echo 96M || echo 512M)
WORK=$(mktemp -d "$TMPBASE/eraid-conversion-bench.XXXXXX")
A=$WORK/array
LOOP=""
stop_loop() {
  [ -n "$LOOP" ] || return 0
  touch "$WORK/stop"
  pkill -P "$LOOP" 2>/dev/null || true  # the convert in flight: the server stops at its next segment
  wait "$LOOP" 2>/dev/null || true
  LOOP=""
  rm -f "$WORK/stop"
}
cleanup() {
  stop_loop
  "$ERAID" stop --dir "$A" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
"$ERAID" create --dir "$A" --devices 4 --device-size "$DEVSIZE" --policy manual \
  --drive-model "$BENCH_DRIVE_MODEL" >/dev/null
"$ERAID" serve --dir "$A" --daemon >/dev/null
URI="nbd+unix:///?socket=$A/nbd.sock"
SPID=$(serve_pid "$A")
[ -n "$SPID" ] || { echo "conversion-bench: cannot find the nbdkit process serving $A" >&2; exit 1; }
fio_run() {
  local rw=$1; shift
  fio --name=bench --ioengine=nbd --uri="$URI" --rw="$rw" --bs=4k --iodepth=16 --size="$REGION" \
      --buffer_compress_percentage=50 --refill_buffers "$@" --output-format=terse --terse-version=3 2>/dev/null |
    grep '^3;'
}
echo "conversion-bench: precondition ($REGION sequential)" >&2
fio_run write >/dev/null
# The array's conversion counters (the first "to_raid10"/"to_raid5" in status are the array's).
conversions() {
  "$ERAID" status --dir "$A" --json | grep -o '"to_raid\(10\|5\)":[0-9]*' | head -2 | cut -d: -f2 | paste -sd+ | bc
}
SEGMENT_BYTES=$("$ERAID" inspect --dir "$A" --json | grep -o '"segment_positions":[0-9]*' | head -1 | cut -d: -f2)
SEGMENT_BYTES=$((SEGMENT_BYTES * 4096))
conv_loop() {
  while [ ! -e "$WORK/stop" ]; do
    "$ERAID" convert --dir "$A" --to raid10 --rate "$1" >/dev/null 2>&1 || true
    [ -e "$WORK/stop" ] && break
    "$ERAID" convert --dir "$A" --to raid5 --rate "$1" >/dev/null 2>&1 || true
  done
}
# Reference: unthrottled conversion of everything, both ways, with no user I/O.
IDLE=""
for to in raid10 raid5; do
  echo "conversion-bench: unthrottled conversion to $to, idle" >&2
  out=$("$ERAID" convert --dir "$A" --to $to --json 2>/dev/null)
  b=$(echo "$out" | grep -o '"bytes":[0-9]*' | cut -d: -f2)
  t=$(echo "$out" | grep -o '"seconds":[0-9.e+-]*' | cut -d: -f2)
  IDLE+="$(awk -v b="$b" -v t="$t" -v to="$to" 'BEGIN {printf "to %s %.0f MB/s; ", to, (t > 0 ? b / t / 1048576 : 0)}')"
done
# Random writes over the whole region once: every round's write points then run with the
# log's GC going (round 1's ran before it had started: 13.1k IOPS without conversion,
# against 5.0k in the rounds after it, on the model).
echo "conversion-bench: random writes over the region once (GC under way before the first round)" >&2
fio_run randwrite --io_size="$REGION" --randrepeat=0 >/dev/null
CSV=$WORK/conversion-bench.csv
echo "rw,rate_mb_s,iops,ratio,converted_mb_s,p50_us,p99_us,server_cpu_us_per_io,switches_per_io,round" > "$CSV"
for ((round = 1; round <= ROUNDS; round++)); do
for rw in randread randwrite; do
  BASE=0
  for rate in 0 ${RATES//,/ }; do
    throttle=$(awk -v r="$rate" -v s="$SCALE" 'BEGIN {printf "%.0fK", r * 1024 / s}')
    echo "conversion-bench: round $round of $ROUNDS, $rw with conversion at ${rate} MB/s (throttle $throttle/s here, ${RUNTIME}s)" >&2
    if [ "$rate" != 0 ]; then
      conv_loop "$throttle" &
      LOOP=$!
      sleep 1  # the first convert is under way
    fi
    before=$(conversions)
    t0=$(date +%s.%N)
    cost_begin "$SPID" "$WORK/perf.out"
    line=$(fio_run "$rw" --time_based --runtime="$RUNTIME" --randrepeat=0)
    cost_end
    t1=$(date +%s.%N)
    after=$(conversions)
    stop_loop
    if [ "$rw" = randread ]; then i=8; p=18; else i=49; p=59; fi
    iops=$(echo "$line" | cut -d';' -f$i)
    lat() { echo "$line" | cut -d';' -f"$p-$((p + 19))" | tr ';' '\n' | sed -n "s/^$1%=//p" | head -1; }
    p50=$(lat 50.000000)
    p99=$(lat 99.000000)
    [ "$rate" = 0 ] && BASE=$iops
    ratio=$(awk -v a="$iops" -v b="$BASE" 'BEGIN {printf "%.3f", (b > 0 ? a / b : 0)}')
    moved=$(awk -v n="$((after - before))" -v s="$SEGMENT_BYTES" -v t0="$t0" -v t1="$t1" \
            'BEGIN {printf "%.2f", n * s / (t1 - t0) / 1048576}')
    ios=$(awk -v i="$iops" -v t="$RUNTIME" 'BEGIN {printf "%.0f", i * t}')
    us=$(per_io "$(awk -v ms="$COST_CPU_MS" 'BEGIN {print ms * 1000}')" "$ios" "%.1f")
    cs=$(per_io "$COST_CS" "$ios" "%.2f")
    echo "$rw,$rate,$iops,$ratio,$moved,$p50,$p99,$us,$cs,$round" >> "$CSV"
  done
done
done
# Per pattern and rate, over the rounds: medians and spreads (the CSV's column c has its
# median in column 2c-3 and its spread in 2c-2).
ROWS=$(round_medians "$CSV" 2 3 9 | awk -F, -v rounds="$ROUNDS" -v scale="$SCALE" '
  function pm(c) { return rounds > 1 && $(2 * c - 3) > 0 ? sprintf(" ±%.1f%%", $(2 * c - 2)) : "" }
  { label = ($2 == 0 ? "none" : $2 " MB/s")
    moved = scale != 1 ? sprintf("%.1f (%.0f)", $7, $7 * scale) : sprintf("%.0f", $7)
    printf "| %s | %s | %s | %d%s | **%.2f×**%s | %d / %d | %s / %s |\n", $1, label, moved, $3, pm(3),
      $5, pm(4), $9, $11, ($13 > 0 ? sprintf("%.1f", $13) : "–"), ($15 > 0 ? sprintf("%.2f", $15) : "–") }')
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
OUT=$WORK/section.md
{
  echo "## User I/O under background conversion (scheduler/)"
  echo
  echo "Command: \`tools/bench/conversion-bench.sh $*\` — $(date -u +%Y-%m-%d), $(nproc) cores, fio $(fio --version | sed 's/fio-//'), nbdkit $(nbdkit --version | awk '{print $2}')."
  echo "4 emulated drives of $DEVSIZE flash, \`--policy manual\`, $REGION written once with 50% compressible"
  echo "data; fio 4 KiB at QD 16 over NBD for ${RUNTIME} s per point while \`eraid convert --rate R\` turns"
  echo "every sealed segment to RAID10 and back in a loop. \"converted\" is what the array actually"
  echo "converted during the fio run (segments × segment size / time). (The paper's Figures 12–13.)"
  if [ "$SCALE" != 1 ]; then
    echo "Drive model \`$BENCH_DRIVE_MODEL\`: the rates are the drives' own (the throttle here is R/$SCALE MB/s of"
    echo "host time); \"converted\" gives host MB/s and, in brackets, the drives' own."
  fi
  if [ "$ROUNDS" -gt 1 ]; then
    echo "Each figure is the median of $ROUNDS rounds; ± its spread: the largest distance of a round's"
    echo "figure from that median, as a share of it."
  fi
  echo "Unthrottled, with no user I/O, one conversion thread converts: ${IDLE%; }."
  echo "Load average (1, 5, 15 min) before the run: $LOAD_BEFORE; after: $LOAD_AFTER (the run's own fio, nbdkit and conversions)."
  echo
  echo "Server CPU and switches: the serving nbdkit process's over the fio run$([ "$COST_PERF" = 1 ] && echo " (\`perf stat -p\`)" || echo " (switches not measured: no perf)"), conversions"
  echo "included, per user I/O."
  echo
  echo "| pattern | throttle | converted (MB/s) | IOPS | vs no conversion | p50 / p99 (µs) | server CPU µs / switches per I/O |"
  echo "|---|---|---|---|---|---|---|"
  echo "$ROWS"
} > "$OUT"
if [ "$QUICK" = 1 ]; then
  cat "$OUT"
  cat "$CSV"
else
  mkdir -p "$ROOT/docs/data"
  cp "$CSV" "$ROOT/docs/data/conversion-bench.csv"
  write_section conversion-bench "$OUT"
fi
