#!/usr/bin/env bash
# The block device over NBD (issues 5 and 16). In one run, fio 4 KiB random reads and
# writes (ioengine=nbd, 50% compressible data) at QD 1, 16 and 64 against:
#   - nbdkit's memory plugin started with --threads 1, the ceiling: the same nbdkit, fio
#     and socket, no storage (with nbdkit's default 16 threads its writes are slower);
#   - eraid with its 4 emulated drives' flash files in RAM (tmpfs, --ram-dir): like the
#     ceiling, nothing below the stack but memory;
#   - eraid with its flash files on the disk's filesystem (--dir), as the demo runs.
# Each is preconditioned by one sequential pass over the region, so reads find data.
# Each point's time is split into rounds that alternate the targets (their order rotating),
# so a ratio compares runs seconds apart: this machine's speed drifts by ±10% over
# minutes, the memory plugin's too.
# Reports IOPS, the ratios to the memory plugin, latency percentiles, and each server's
# CPU time and context switches per I/O (perf stat on the nbdkit process; without perf,
# CPU from /proc/PID/stat and no switches): these do not drift with the machine's speed.
# Run it on an otherwise idle machine; the load average before and after is recorded.
#
# Usage: tools/bench/nbd-bench.sh [--quick] [--build DIR] [--dir TMPDIR] [--ram-dir DIR]
#                                 [--runtime S] [--rounds N]
#   --ram-dir defaults to /dev/shm (skipped, with a note, if it is not tmpfs); a full run
#   rewrites the nbd section of docs/benchmarks.md; --quick prints only.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
. "$ROOT/tools/bench/lib.sh"
ARGS="$*"  # for the Command: line, so a figure says how it was made
BUILD=$ROOT/build
QUICK=0
RUNTIME=20
ROUNDS=4
TMPBASE=${TMPDIR:-/tmp}
RAMBASE=/dev/shm
quick_defaults() { RUNTIME=3; ROUNDS=1; }  # --quick
bench_args nbd-bench '--quick=QUICK! --build=BUILD --dir=TMPBASE --ram-dir=RAMBASE --runtime=RUNTIME
  --rounds=ROUNDS' "$@"
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
nbdkit -f --exit-with-parent --threads 1 -P "$WORK/mem.pid" --unix "$WORK/mem.sock" memory 2G &
MEMPID=$!
for _ in $(seq 100); do [ -s "$WORK/mem.pid" ] && break; sleep 0.05; done  # written once it listens
# The process that serves each target: the memory plugin's nbdkit, and the nbdkit that
# each `eraid serve` daemon runs (its child).
declare -A SPID=([memory]=$MEMPID)
[ -n "$RAMWORK" ] && SPID[ram]=$(serve_pid "$RAMWORK/array")
SPID[disk]=$(serve_pid "$WORK/array")
for t in "${TARGETS[@]}"; do
  [ -n "${SPID[$t]}" ] || { echo "nbd-bench: cannot find the nbdkit process serving $t" >&2; exit 1; }
done
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)

# fio_run TARGET RW QD [extra...] -> the terse line
fio_run() {
  local target=$1 rw=$2 qd=$3; shift 3
  fio --name=bench --ioengine=nbd --uri="${URI[$target]}" --rw="$rw" --bs=4k --iodepth="$qd" \
      --size="$REGION" --buffer_compress_percentage=50 --refill_buffers "$@" \
      --output-format=terse --terse-version=3 2>/dev/null | grep '^3;'
}
# measured_run TARGET RW QD SECONDS: one timed fio run, with the server's CPU ms and
# context switches over it. Sets LINE, CPU_MS, CS (CS empty without perf).
# Also adds the serving process's CPU per I/O by thread to $WORK/threads.TARGET.RW.QD:
# nbdkit's worker threads live only as long as the client's connection, so the threads
# are read 1 s into the run and 1 s before its end, and the I/Os in between counted at
# the run's mean rate.
measured_run() {
  cost_begin "${SPID[$1]}" "$WORK/perf.out"
  fio_run "$1" "$2" "$3" --time_based --runtime="$4" --randrepeat=0 > "$WORK/fio.line" &
  local fio=$! t0 t1
  sleep 1; threads_snapshot "${SPID[$1]}" "$WORK/threads.before"; t0=$(date +%s.%N)
  sleep $(( $4 > 2 ? $4 - 2 : 0 )); threads_snapshot "${SPID[$1]}" "$WORK/threads.after"; t1=$(date +%s.%N)
  wait $fio
  cost_end
  LINE=$(cat "$WORK/fio.line")
  local ios
  ios=$(awk -v r="$(field "$LINE" $([ "$2" = randread ] && echo 8 || echo 49))" -v a="$t0" -v b="$t1" 'BEGIN {print int(r * (b - a))}')
  threads_split "$WORK/threads.before" "$WORK/threads.after" "$ios" >> "$WORK/threads.$1.$2.$3"
  CPU_MS=$COST_CPU_MS CS=$COST_CS
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
COSTS=""
SPLIT=""
for qd in 1 16 64; do
  for rw in randread randwrite; do
    declare -A IOPS=([ram]="–") LAT=([ram]="–") SUM=() P50=() P99=() IOS=() CPU=() SW=() US=([ram]="–") CSW=([ram]="–")
    # terse v3: IOPS, total KiB, first latency percentile field (reads, then writes)
    if [ "$rw" = randread ]; then i=8; kb=6; p=18; else i=49; kb=47; p=59; fi
    n=${#TARGETS[@]}
    for ((round = 0; round < ROUNDS; round++)); do
      for ((k = 0; k < n; k++)); do
        t=${TARGETS[$(((k + round) % n))]}
        echo "nbd-bench: $t $rw QD $qd, round $((round + 1))/$ROUNDS ($((RUNTIME / ROUNDS))s)" >&2
        measured_run "$t" $rw $qd "$((RUNTIME / ROUNDS))"
        SUM[$t]=$(( ${SUM[$t]:-0} + $(field "$LINE" $i) ))
        IOS[$t]=$(( ${IOS[$t]:-0} + $(field "$LINE" $kb) / 4 ))
        P50[$t]=$(( ${P50[$t]:-0} + $(pct "$LINE" $p 50.000000) ))
        P99[$t]=$(( ${P99[$t]:-0} + $(pct "$LINE" $p 99.000000) ))
        CPU[$t]=$(awk -v a="${CPU[$t]:-0}" -v b="$CPU_MS" 'BEGIN {print a + b}')
        [ -n "$CS" ] && SW[$t]=$(( ${SW[$t]:-0} + CS ))
      done
    done
    for t in "${TARGETS[@]}"; do  # means over the rounds
      IOPS[$t]=$(( SUM[$t] / ROUNDS ))
      LAT[$t]="$(( P50[$t] / ROUNDS )) / $(( P99[$t] / ROUNDS ))"
      US[$t]=$(per_io "$(awk -v ms="${CPU[$t]}" 'BEGIN {print ms * 1000}')" "${IOS[$t]}" "%.1f")
      CSW[$t]=$(per_io "${SW[$t]:-}" "${IOS[$t]}" "%.2f")
    done
    if [ "$qd" = 16 ]; then  # where the servers' CPU goes, per thread: the ceiling's, eraid's (flash in RAM, else on disk)
      for st in memory $([ -n "$RAMWORK" ] && echo ram || echo disk); do
      SPLIT+="| $rw | $st | $(awk -v n="$ROUNDS" '{C[$1] += $2; S[$1] += $3}
        END {for (k in C) if (C[k] / n >= 0.05) printf "%s %.1f %.2f\n", k, C[k] / n, S[k] / n}' \
        "$WORK/threads.$st.$rw.$qd" | sort -k2 -nr | awk '{printf "%s%s %s µs, %s cs", (NR > 1 ? "; " : ""), $1, $2, $3}') |"$'\n'
      done
    fi
    ram_ratio="–"
    [ -n "$RAMWORK" ] && ram_ratio="**$(ratio "${IOPS[ram]}" "${IOPS[memory]}")×**"
    ROWS+="| $rw | $qd | ${IOPS[memory]} | ${IOPS[ram]} | $ram_ratio | ${IOPS[disk]} | **$(ratio "${IOPS[disk]}" "${IOPS[memory]}")×** | ${LAT[memory]} | ${LAT[ram]} | ${LAT[disk]} |"$'\n'
    COSTS+="| $rw | $qd | ${US[memory]} | ${US[ram]} | ${US[disk]} | ${CSW[memory]} | ${CSW[ram]} | ${CSW[disk]} | $(ratio "$(( P50[ram] / ROUNDS ))" "$(( P50[memory] / ROUNDS ))")× | $(ratio "$(( P50[disk] / ROUNDS ))" "$(( P50[memory] / ROUNDS ))")× |"$'\n'
  done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
STATUS=$("$ERAID" status --dir "$WORK/array")
OUT=$WORK/section.md
{
  echo "## Block device over NBD (tools/)"
  echo
  echo "Command: \`tools/bench/nbd-bench.sh${ARGS:+ $ARGS}\` — $(date -u +%Y-%m-%d), $(nproc) cores, fio $(fio --version | sed 's/fio-//'), nbdkit $(nbdkit --version | awk '{print $2}')."
  echo "eraid: 4 emulated drives of $DEVSIZE flash (2× expansion, zstd −3, FlashAlloc), served by \`eraid serve\`,"
  echo "twice: with the drives' flash files in RAM (tmpfs) and on the disk ($(fstype "$TMPBASE")). Ceiling: nbdkit's"
  echo "memory plugin (\`nbdkit --threads 1 memory\`), in the same run. fio ioengine=nbd over a Unix socket, 4 KiB, ${RUNTIME} s per point and target,"
  echo "in $ROUNDS round(s) that alternate the targets (IOPS and latencies: the rounds' means),"
  echo "over a $REGION region written once first, \`buffer_compress_percentage=50\`. fio and nbdkit"
  echo "share the machine's $(nproc) cores. Latencies are fio's completion latency p50 / p99 in µs."
  echo "Load average (1, 5, 15 min) before the run: $LOAD_BEFORE; after: $LOAD_AFTER (the run's own fio and nbdkit)."
  [ -n "$RAMNOTE" ] && { echo; echo "$RAMNOTE"; }
  echo
  echo "| pattern | QD | memory plugin IOPS | eraid, flash in RAM | / memory | eraid, flash on disk | / memory | memory lat | RAM lat | disk lat |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  printf '%s' "$ROWS"
  echo
  echo "The servers' costs: CPU time of the serving nbdkit process (all its threads: the plugin,"
  echo "the drives' workers, io_uring) per I/O in µs, and its context switches per I/O$([ "$COST_PERF" = 1 ] && echo " (\`perf stat -p\`)" || echo " (not measured: no perf)");"
  echo "and eraid's p50 latency over the memory plugin's."
  echo
  echo "| pattern | QD | µs/IO memory | µs/IO RAM | µs/IO disk | cs/IO memory | cs/IO RAM | cs/IO disk | p50 RAM / memory | p50 disk / memory |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  printf '%s' "$COSTS"
  echo
  echo "Where the server's CPU goes at QD 16, per I/O, by thread (\`/proc/PID/task\`, summed over the"
  echo "rounds): \`nbdkit\` is nbdkit's own threads running the plugin (socket, volume, array"
  echo "append), \`eraid-rows\` compresses full rows and appends them to the drives, \`iou-wrk\` is"
  echo "io_uring's workers copying into the flash files; io_uring workers that exited within a"
  echo "round are not counted."
  echo
  echo "| pattern | server | threads: CPU µs and context switches per I/O |"
  echo "|---|---|---|"
  printf '%s' "$SPLIT"
  echo
  echo "Targets (issue 16), at QD 16: randwrite ≥ 0.6× the memory plugin with flash in RAM and"
  echo "≥ 0.45× on disk; randread ≥ 0.9×; ≤ 10 µs of server CPU and ≤ 0.3 context switches per"
  echo "write; at QD 1, write p50 ≤ 1.3× the memory plugin's."
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
