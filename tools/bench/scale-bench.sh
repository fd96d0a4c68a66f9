#!/usr/bin/env bash
# How the served stack's memory and start-up grow with the size of its drives (issue 22):
# for each drive size, four emulated drives over sparse files, and
#  - the start time and resident memory of a fresh array (`eraid serve --daemon` returns
#    once the array answers),
#  - anonymous memory grown per 4 KiB block written, over random 64 KiB writes (50%
#    compressible, QD 16) of 4 GiB or half the volume, whichever is less (the growth over
#    the last three quarters: the first is a warm-up for what is allocated once; and over
#    the whole run, which also counts what the warm-up allocated),
#  - the start time after a clean stop and after a SIGKILL of the server, each with the
#    page cache dropped first (root only; otherwise noted), and the resident memory then;
# and eraid-sim's peak memory per LBA it tracks, over uniform random traces of working
# sets of 1, 4, 16 and 64 GiB (--quick: 1 and 4).
# Memory is the serving nbdkit process's RssAnon and RssFile (/proc/PID/status).
# Usage: tools/bench/scale-bench.sh [--quick] [--sizes "1G 4G 16G 64G"] [--build DIR]
#                                   [--dir TMPDIR] [--crc-cache SIZE]
#   --quick: sizes 256M and 1G, printed only; a full run rewrites the scale-bench section
#   of docs/benchmarks.md. TMPDIR must hold the sparse files' written part (~1.5× the
#   bytes written per size).
#   --crc-cache: the served array's CRC cache (eraid serve --crc-cache), 1M by default:
#   a fixed cache the figures per block leave out, held small so that they show the cost
#   per block beyond it (the default 32M would hold every CRC of these runs).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
. "$ROOT/tools/bench/lib.sh"
BUILD=$ROOT/build
QUICK=0
SIZES=""
TMPBASE=${TMPDIR:-/tmp}
CRC_CACHE=1M
bench_args scale-bench '--quick=QUICK! --sizes=SIZES --build=BUILD --dir=TMPBASE --crc-cache=CRC_CACHE' "$@"
ERAID=$BUILD/tools/eraid
[ -x "$ERAID" ] || { echo "scale-bench: $ERAID not built (run tools/eraid.sh build)" >&2; exit 1; }
need fio nbdkit python3
[ -n "$SIZES" ] || SIZES=$([ "$QUICK" = 1 ] && echo "256M 1G" || echo "1G 4G 16G 64G")
WORK=$(mktemp -d "$TMPBASE/eraid-scale-bench.XXXXXX")
cleanup() {
  for a in "$WORK"/*/; do [ -d "$a" ] && "$ERAID" stop --dir "${a%/}" >/dev/null 2>&1 || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)

drop_caches() {
  sync
  if [ -w /proc/sys/vm/drop_caches ]; then echo 3 > /proc/sys/vm/drop_caches; return 0; fi
  return 1
}
# kib FIELD PID: a field of /proc/PID/status, in KiB.
kib() { awk -v f="$1:" '$1 == f {print $2}' "/proc/$2/status"; }
# start DIR: serves DIR; prints "seconds rss_anon_kib rss_file_kib".
start() {
  local t0 t1 pid
  t0=$(date +%s.%N)
  # On a failure, the server's log goes with the message (the work folder is removed).
  "$ERAID" serve --dir "$1" --daemon --crc-cache "$CRC_CACHE" >/dev/null ||
    { tail -20 "$1/serve.log" >&2; exit 1; }
  t1=$(date +%s.%N)
  pid=$(serve_pid "$1")
  echo "$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}') $(kib RssAnon "$pid") $(kib RssFile "$pid")"
}

CACHE_NOTE="page cache dropped before each restart"
drop_caches || CACHE_NOTE="page cache NOT dropped (not root): restarts read warm files"
ROWS=""
for size in $SIZES; do
  A=$WORK/$size
  say scale-bench "$size drives: create"
  "$ERAID" create --dir "$A" --devices 4 --device-size "$size" >/dev/null
  read -r fresh_s fresh_anon fresh_file < <(start "$A")
  cap=$(json_num "$("$ERAID" status --dir "$A" --json)" capacity_bytes)
  bytes=$((cap / 2 < 4 << 30 ? cap / 2 : 4 << 30))
  bytes=$((bytes / 65536 * 65536))
  pid=$(serve_pid "$A")
  # A quarter first, as a warm-up: what is allocated once (checkpoint images, erase-unit
  # buffers, the first touch of each drive's map) is not a cost per block. The figure is
  # the growth over the other three quarters.
  fill() {
    fio --name=fill --ioengine=nbd --uri="nbd+unix:///?socket=$A/nbd.sock" --rw=randwrite --bs=64k \
        --iodepth=16 --io_size="$1" --size="$cap" --buffer_compress_percentage=50 --refill_buffers \
        --randrepeat=0 >/dev/null 2>&1 || { echo "scale-bench: fio failed on $A" >&2; exit 1; }
  }
  say scale-bench "$size drives: $((bytes >> 20)) MiB of random 64 KiB writes"
  warm=$((bytes / 4 / 65536 * 65536))
  fill "$warm"
  anon0=$(kib RssAnon "$pid")
  s0=$("$ERAID" status --dir "$A" --json)
  fill $((bytes - warm))
  anon1=$(kib RssAnon "$pid")
  s1=$("$ERAID" status --dir "$A" --json)
  per_block=$(awk -v a="$anon0" -v b="$anon1" -v n="$((bytes - warm))" 'BEGIN {printf "%.1f", (b - a) * 1024 / (n / 4096)}')
  # The same growth as each layer counts its own state (status --json "memory").
  layers=""
  for k in log_bytes array_bytes crc_cache_bytes drive_map_bytes; do
    layers+="${layers:+ / }$(awk -v a="$(json_num "$s0" $k)" -v b="$(json_num "$s1" $k)" \
      -v n="$((bytes - warm))" 'BEGIN {printf "%.1f", (b - a) / (n / 4096)}')"
  done
  # And over the whole run from the fresh start: with what the warm-up allocated, which
  # for random writes includes the log's map over every LBA they reach (dense: 12 bytes
  # per LBA of the volume, written or not).
  per_block_all=$(awk -v a="$fresh_anon" -v b="$anon1" -v n="$bytes" 'BEGIN {printf "%.1f", (b - a) * 1024 / (n / 4096)}')
  "$ERAID" stop --dir "$A" >/dev/null
  drop_caches || true
  say scale-bench "$size drives: restart after a clean stop"
  read -r clean_s clean_anon clean_file < <(start "$A")
  pkill -KILL -f -- "dir=$A" 2>/dev/null || true
  pkill -KILL -f -- "serve --dir $A" 2>/dev/null || true
  sleep 1
  drop_caches || true
  say scale-bench "$size drives: restart after SIGKILL"
  read -r kill_s kill_anon kill_file < <(start "$A")
  "$ERAID" stop --dir "$A" >/dev/null
  ROWS+="| 4 × $size | $((cap >> 20)) | $fresh_s | $((fresh_anon >> 10)) / $((fresh_file >> 10)) | $((bytes >> 20)) | $per_block | $layers | $per_block_all | $clean_s | $((clean_anon >> 10)) / $((clean_file >> 10)) | $kill_s | $((kill_anon >> 10)) / $((kill_file >> 10)) |"$'\n'
  rm -rf "$A"
done

# eraid-sim: peak memory of a replay per LBA it tracks, for uniform random traces of 3×
# the working set (so ~95% of it is written), less the peak of a 1,024-block one.
SIM=$BUILD/tools/eraid-sim
TRACEGEN=$BUILD/tools/eraid-tracegen
SIM_ROWS=""
sim_peak() {  # sim_peak WSS_BLOCKS: prints "peak_kib wss_blocks seconds"
  local t=$WORK/trace-$1.csv.zst j
  "$TRACEGEN" --alpha 0 --wss-blocks "$1" --writes $(($1 * 3)) --read-percent 0 \
    --max-request-blocks 1 | zstd -q -1 > "$t"
  j=$("$SIM" --trace "$t" --segment-blocks 16384 --quiet --json)
  rm -f "$t"
  echo "$(json_num "$j" peak_rss_kib) $(json_num "$j" wss_blocks) $(json_num "$j" replay_seconds)"
}
if [ -x "$SIM" ] && [ -x "$TRACEGEN" ] && command -v zstd >/dev/null; then
  read -r base_kib _ _ < <(sim_peak 1024)
  for wss in $([ "$QUICK" = 1 ] && echo "262144 1048576" || echo "262144 1048576 4194304 16777216"); do
    say scale-bench "eraid-sim: working set of $wss blocks"
    read -r peak tracked secs < <(sim_peak "$wss")
    SIM_ROWS+="| $((wss >> 8)) MiB | $tracked | $((peak >> 10)) | $(awk -v p="$peak" -v b="$base_kib" -v n="$tracked" 'BEGIN {printf "%.1f", (p - b) * 1024 / n}') | $(awk -v s="$secs" 'BEGIN {printf "%.2f", s}') |"$'\n'
  done
fi

SECTION=$WORK/section.md
{
  echo "Command: \`tools/bench/scale-bench.sh${SIZES:+ --sizes \"$SIZES\"} --crc-cache $CRC_CACHE\` ($(date -u +%Y-%m-%d), load average before: $LOAD_BEFORE; $CACHE_NOTE)."
  echo "Resident memory is the serving nbdkit process's, anonymous / file-backed, in MiB."
  echo
  echo "| drives | volume MiB | fresh start s | RSS at start | MiB written | anon bytes / block written (last ¾) | of it, as the layers count: log / array / CRC cache / drive maps | (whole run) | start after clean stop s | RSS then | start after SIGKILL s | RSS then |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
  printf '%s' "$ROWS"
  if [ -n "$SIM_ROWS" ]; then
    echo
    echo "eraid-sim (sepbit, cost-benefit, 64 MiB segments), uniform random 4 KiB writes of 3× the working set; peak RSS less that of a 1,024-block replay ($((base_kib >> 10)) MiB), per LBA tracked:"
    echo
    echo "| working set | LBAs tracked | peak RSS MiB | bytes / tracked LBA | replay s |"
    echo "|---|---|---|---|---|"
    printf '%s' "$SIM_ROWS"
  fi
} > "$SECTION"
cat "$SECTION"
[ "$QUICK" = 1 ] || write_section scale-bench "$SECTION"
