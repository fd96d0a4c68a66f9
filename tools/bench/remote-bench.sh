#!/usr/bin/env bash
# Drives on other hosts (issue 18): an array whose four drives' flash is exported by
# nbdkit (`file` plugin) on loopback TCP, against the same array on local files, in one
# run. fio 4 KiB random reads and writes at QD 16 (ioengine=nbd, 50% compressible data)
# over the served volume, in rounds that rotate the two arrays and nbdkit's memory plugin
# (--threads 1: the transport's ceiling, as in nbd-bench), with each server's CPU and context
# switches per I/O; then, on the remote
# one: random reads with one drive host killed (degraded), and the time of a re-add after
# an outage in which 5% of the volume was written, against a full rebuild (replace) of
# the same drive. Run it on an otherwise idle machine; the load average is recorded.
# Reads also rotate a fourth target: fio reading drive host 0's export directly, the cost
# of one remote round trip alone, from which a bound on the remote array's reads follows
# (each array read is a local-array read plus one such round trip, on the same cores).
#
# Usage: tools/bench/remote-bench.sh [--quick] [--build DIR] [--dir TMPDIR] [--runtime S] [--rounds N] [--drive-model SPEC]
#                                    [--host-threads N]
#   --host-threads: each drive host's nbdkit --threads (default 1: its file is in the page
#   cache, so a request is a copy and a hand-off to a worker thread costs more than it).
#   --drive-model SPEC: the drives' timing model (default none: this bench measures the NBD
#   path's CPU and round trips against nbdkit's memory plugin, which a model would hide).
#   a full run rewrites the remote-bench section of docs/benchmarks.md; --quick prints only.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BENCH_DRIVE_MODEL=${BENCH_DRIVE_MODEL:-none}  # before lib.sh, whose default is a model
. "$ROOT/tools/bench/lib.sh"
BUILD=$ROOT/build
QUICK=0
RUNTIME=20
ROUNDS=4
HOST_THREADS=1
TMPBASE=${TMPDIR:-/tmp}
quick_defaults() { RUNTIME=4; ROUNDS=1; }  # --quick
bench_args remote-bench '--quick=QUICK! --build=BUILD --dir=TMPBASE --runtime=RUNTIME --rounds=ROUNDS --host-threads=HOST_THREADS --drive-model=BENCH_DRIVE_MODEL' "$@"
case "$RUNTIME$ROUNDS$HOST_THREADS" in *[!0-9]*) echo "remote-bench: --runtime, --rounds and --host-threads take whole numbers" >&2; exit 2 ;; esac
[ "$ROUNDS" -ge 1 ] && [ "$RUNTIME" -ge "$ROUNDS" ] || { echo "remote-bench: need 1 <= --rounds <= --runtime" >&2; exit 2; }
ERAID=$BUILD/tools/eraid
[ -x "$ERAID" ] || { echo "remote-bench: $ERAID not built (run tools/eraid.sh build)" >&2; exit 1; }
need fio nbdkit
DEVSIZE=$([ "$QUICK" = 1 ] && echo 128M || echo 512M)
WORK=$(mktemp -d "$TMPBASE/eraid-remote-bench.XXXXXX")
declare -a HOSTPIDS
MEMPID=""
cleanup() {
  [ -n "$MEMPID" ] && kill "$MEMPID" 2>/dev/null || true
  array_down "$ERAID" "$WORK/local"
  array_down "$ERAID" "$WORK/remote"
  for p in "${HOSTPIDS[@]:-}"; do [ -n "$p" ] && kill -KILL "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
PORT0=$((30000 + $$ % 20000))
# host K: nbdkit serving WORK/hostK (DEVSIZE, sparse) on 127.0.0.1:PORT0+K
start_host() {
  local k=$1
  [ -e "$WORK/host$k" ] || truncate -s "$DEVSIZE" "$WORK/host$k"
  nbdkit -f --threads "$HOST_THREADS" -p $((PORT0 + k)) -i 127.0.0.1 file "$WORK/host$k" 2>>"$WORK/hosts.log" &
  HOSTPIDS[$k]=$!
  for _ in $(seq 100); do nbdinfo --size "nbd://127.0.0.1:$((PORT0 + k))/" >/dev/null 2>&1 && return 0; sleep 0.05; done
  echo "remote-bench: drive host $k did not come up" >&2; exit 1
}
for k in 0 1 2 3; do start_host $k; done
say remote-bench "arrays: 4 drives of $DEVSIZE, local files and nbdkit on loopback TCP"
array_up "$ERAID" "$WORK/local" --devices 4 --device-size "$DEVSIZE"
DEVICES=()
for k in 0 1 2 3; do DEVICES+=(--device "nbd://127.0.0.1:$((PORT0 + k))/"); done
array_up "$ERAID" "$WORK/remote" --io-timeout 5 "${DEVICES[@]}"
# The transport's ceiling, as in nbd-bench: nbdkit's memory plugin with one thread.
nbdkit -f --exit-with-parent --threads 1 -P "$WORK/mem.pid" --unix "$WORK/mem.sock" memory 2G &
MEMPID=$!
for _ in $(seq 100); do [ -s "$WORK/mem.pid" ] && break; sleep 0.05; done  # written once it listens
# direct: drive host 0's export read by fio itself (reads only: it is drive 0's flash).
declare -A URI=([memory]="nbd+unix:///?socket=$WORK/mem.sock" [local]="nbd+unix:///?socket=$WORK/local/nbd.sock"
                [remote]="nbd+unix:///?socket=$WORK/remote/nbd.sock" [direct]="nbd://127.0.0.1:$PORT0/")
declare -A SPID=([memory]=$MEMPID [local]=$(serve_pid "$WORK/local") [remote]=$(serve_pid "$WORK/remote"))
CAP=$(json_num "$("$ERAID" status --dir "$WORK/remote" --json)" capacity_bytes)
REGION=$(( CAP * 3 / 4 / 1048576 ))M
for t in memory local remote; do
  say remote-bench "precondition $t ($REGION sequential)"
  fio_terse "${URI[$t]}" write 16 1 --bs=1M --size="$REGION" --buffer_compress_percentage=50 >/dev/null
done
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)

ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", (b > 0 ? a / b : 0)}'; }
hosts_ms() { local p sum=0; for p in "${HOSTPIDS[@]}"; do sum=$(awk -v a="$sum" -v b="$(cost_proc_ms "$p")" 'BEGIN {print a + b}'); done; echo "$sum"; }
ROWS=""
for rw in randread randwrite; do
  declare -A SUM=() CPU=() IOS=() P50=() SW=() HCPU=()
  if [ $rw = randread ]; then TARGETS=(memory local remote direct); else TARGETS=(memory local remote); fi
  SPID[direct]=${HOSTPIDS[0]}
  for ((round = 0; round < ROUNDS; round++)); do
    for ((k = 0; k < ${#TARGETS[@]}; k++)); do  # the targets' order rotates from round to round
      t=${TARGETS[$(((k + round) % ${#TARGETS[@]}))]}
      say remote-bench "$t $rw QD 16, round $((round + 1))/$ROUNDS ($((RUNTIME / ROUNDS)) s)"
      size=$REGION; [ $t = direct ] && size=$DEVSIZE
      h0=$(hosts_ms)
      cost_begin "${SPID[$t]}" "$WORK/perf.out"
      line=$(fio_terse "${URI[$t]}" "$rw" 16 1 --size="$size" --buffer_compress_percentage=50 \
             --time_based --runtime=$((RUNTIME / ROUNDS)) --randrepeat=0)
      cost_end
      HCPU[$t]=$(awk -v a="${HCPU[$t]:-0}" -v b="$h0" -v c="$(hosts_ms)" 'BEGIN {print a + c - b}')
      iops=$(terse_iops "$line")
      SUM[$t]=$(( ${SUM[$t]:-0} + ${iops%.*} ))
      IOS[$t]=$(( ${IOS[$t]:-0} + ${iops%.*} * (RUNTIME / ROUNDS) ))
      CPU[$t]=$(awk -v a="${CPU[$t]:-0}" -v b="$COST_CPU_MS" 'BEGIN {print a + b}')
      [ -n "$COST_CS" ] && SW[$t]=$(( ${SW[$t]:-0} + COST_CS ))
      P50[$t]=$(( ${P50[$t]:-0} + $(terse_p "$line" "$([ $rw = randread ] && echo read || echo write)" 50) ))
    done
  done
  m=$(( SUM[memory] / ROUNDS )); l=$(( SUM[local] / ROUNDS )); r=$(( SUM[remote] / ROUNDS ))
  us() { per_io "$(awk -v ms="${CPU[$1]}" 'BEGIN {print ms * 1000}')" "${IOS[$1]}" "%.1f"; }
  cs() { per_io "${SW[$1]:-}" "${IOS[$1]}" "%.2f"; }
  hus() { per_io "$(awk -v ms="${HCPU[$1]}" 'BEGIN {print ms * 1000}')" "${IOS[$1]}" "%.1f"; }
  ROWS+="| $rw | $m | $l | $r | **$(ratio $r $l)×** | $(ratio $l $m)× / $(ratio $r $m)× | $(( P50[memory] / ROUNDS )) / $(( P50[local] / ROUNDS )) / $(( P50[remote] / ROUNDS )) | $(us memory) / $(us local) / $(us remote) | $(cs memory) / $(cs local) / $(cs remote) | $(hus remote) |"$'\n'
  if [ $rw = randread ]; then
    DIRECT=$(( SUM[direct] / ROUNDS )); DIRECT_HOST_US=$(us direct); READ_LOCAL=$l; READ_REMOTE=$r
    # Costs add on shared cores: 1 / bound = 1 / local + 1 / direct.
    BOUND=$(awk -v l="$l" -v d="$DIRECT" 'BEGIN {printf "%d", (l > 0 && d > 0 ? 1 / (1 / l + 1 / d) : 0)}')
  fi
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# Degraded: drive host 3 killed; reads go on from the others.
say remote-bench "degraded reads: drive host 3 killed"
kill -KILL "${HOSTPIDS[3]}"; wait "${HOSTPIDS[3]}" 2>/dev/null || true
fio_terse "${URI[remote]}" randwrite 16 1 --size=16M --buffer_compress_percentage=50 >/dev/null  # finds it gone
line=$(fio_terse "${URI[remote]}" randread 16 1 --size="$REGION" --time_based --runtime=$((RUNTIME / ROUNDS)) --randrepeat=0)
DEGRADED=$(terse_iops "$line"); DEGRADED=${DEGRADED%.*}
start_host 3
say remote-bench "full rebuild of drive 3 (replace onto its host)"
T0=$(date +%s.%N)
"$ERAID" replace --dir "$WORK/remote" --device 3 --with "nbd://127.0.0.1:$((PORT0 + 3))/" >/dev/null
FULL_S=$(awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}')
# An outage of drive host 2 while 5% of the volume is written, then a re-add.
say remote-bench "outage of drive host 2 while 5% of the volume is written, then re-add"
kill -STOP "${HOSTPIDS[2]}"
fio_terse "${URI[remote]}" randwrite 16 1 --size="$REGION" --io_size=$(( CAP / 20 / 1048576 ))M \
  --buffer_compress_percentage=50 >/dev/null
kill -CONT "${HOSTPIDS[2]}"
sleep 1
READD=$("$ERAID" re-add --dir "$WORK/remote" --device 2 --json)
READD_S=$(awk -v s="$(json_num "$READD" seconds)" 'BEGIN {printf "%.2f", s}'); RESYNC=$(json_num "$READD" resynced_bytes); TOTAL=$(json_num "$READD" total_bytes)
OUT=$WORK/section.md
{
  echo "## Drives on other hosts (issue 18)"
  echo
  echo "Command: \`tools/bench/remote-bench.sh$([ "$QUICK" = 1 ] && echo " --quick")\` — $(date -u +%Y-%m-%d), $(nproc) cores, fio $(fio --version | sed 's/fio-//'), nbdkit $(nbdkit --version | awk '{print $2}')."
  echo "Two arrays of 4 emulated drives (${DEVSIZE} of flash each, drive model ${BENCH_DRIVE_MODEL}, defaults otherwise), served by \`eraid serve\`:"
  echo "one over local files, one whose drives' flash is four \`nbdkit file\` exports on loopback TCP (\`--device nbd://127.0.0.1:PORT/\`),"
  echo "the files of both on the same file system ($(df -T "$TMPBASE" | awk 'NR==2{print $2}')). fio ioengine=nbd over the"
  echo "served volume's Unix socket, 4 KiB, QD 16, \`buffer_compress_percentage=50\`, over a $REGION region written once first,"
  echo "${RUNTIME} s per pattern and target in $ROUNDS round(s) that rotate the targets (IOPS: the rounds' means)."
  echo "The drive hosts (\`nbdkit --threads $HOST_THREADS file\`) run on the same $(nproc) cores as everything else. Load average before: $LOAD_BEFORE; after: $LOAD_AFTER."
  echo
  echo "| QD 16 | memory plugin IOPS | local files IOPS | remote (NBD, loopback TCP) IOPS | remote / local | local, remote / memory | p50 µs memory / local / remote | server CPU µs/IO memory / local / remote | switches/IO memory / local / remote | drive hosts' CPU µs/IO, remote |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  printf '%s' "$ROWS"
  echo
  echo "Ceiling: nbdkit's memory plugin (\`nbdkit --threads 1 memory\`), in the same rounds. Server CPU and"
  echo "context switches are the serving nbdkit process's$([ "$COST_PERF" = 1 ] && echo " (\`perf stat -p\`)" || echo " (switches not measured: no perf)"):"
  echo "for the arrays, not the drive hosts' (which share the cores; their CPU is the last column, from /proc). Target: remote ≥ 0.7× local."
  echo
  echo "Reads' bound on these cores: fio reading drive host 0's export directly (4 KiB, QD 16, in the same rounds) did"
  echo "$DIRECT IOPS, $DIRECT_HOST_US µs of the host's CPU per read: one remote round trip with nothing else. A remote array read is a"
  echo "local-array read plus such a round trip (its client side in the array's server instead of fio), and on shared"
  echo "cores their CPU adds up: 1 / (1/$READ_LOCAL + 1/$DIRECT) = **$BOUND IOPS = $(ratio "$BOUND" "$READ_LOCAL")× local** for an array whose side"
  echo "of the round trip cost no more than fio's; measured $READ_REMOTE ($(ratio "$READ_REMOTE" "$BOUND")× that)."
  echo
  echo "| remote array | figure |"
  echo "|---|---|"
  echo "| random reads, drive host 3 killed (degraded), QD 16 | $DEGRADED IOPS |"
  echo "| full rebuild of drive 3 (replace onto its host) | $FULL_S s |"
  echo "| re-add of drive 2 after an outage in which 5% of the volume was written | $READD_S s: $(( RESYNC / 1048576 )) of $(( TOTAL / 1048576 )) MiB resynced |"
  echo "| re-add / full rebuild | **$(ratio "$READD_S" "$FULL_S")×** (target ≤ 0.15×) |"
} > "$OUT"
if [ "$QUICK" = 1 ]; then
  cat "$OUT"
else
  write_section remote-bench "$OUT"
fi
