#!/usr/bin/env bash
# Drive-layer benchmarks (issue: foundation). Measures, on this machine, in one run:
#   (a) zstd 4 KiB compression MB/s on one core, per level and compressibility;
#   (b) FileBackend 4 KiB random write/read IOPS at QD 16 as a ratio to
#       fio --ioengine=io_uring on the same file, alternating runs, medians;
#   (c) device WAF of six object streams with different lifetimes at 85% fullness,
#       with and without FlashAlloc.
# Usage: tools/bench/drive-bench.sh [--quick] [--build DIR] [--dir TMPDIR]
#   full run (~3 min) rewrites the drive section of docs/benchmarks.md;
#   --quick (~30 s) prints the same tables and writes nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
. "$ROOT/tools/bench/lib.sh"
BUILD=$ROOT/build
QUICK=0
TMPBASE=${TMPDIR:-/tmp}
bench_args drive-bench '--quick=QUICK! --build=BUILD --dir=TMPBASE' "$@"
BENCH=$BUILD/tools/bench/eraid-drive-bench
[ -x "$BENCH" ] || { echo "drive-bench: $BENCH not built (run tools/eraid.sh build)" >&2; exit 1; }
command -v fio >/dev/null || { echo "drive-bench: fio missing (tools/install-deps.sh)" >&2; exit 1; }

if [ "$QUICK" = 1 ]; then
  ZSTD_SECS=0.05; FILE_MIB=256; RUN_SECS=2; ROUNDS=1; WAF_FLASH=64; WAF_WRITES=2
else
  ZSTD_SECS=0.3; FILE_MIB=1024; RUN_SECS=5; ROUNDS=3; WAF_FLASH=256; WAF_WRITES=4
fi
WORK=$(mktemp -d "$TMPBASE/eraid-drive-bench.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
OUT=$WORK/section.md
log() { echo "drive-bench: $*" >&2; }
kv() { sed -n "s/.*[[:space:]]$1=\([^[:space:]]*\).*/\1/p"; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

{
  echo "## Drive layer (compress/)"
  echo
  echo "Command: \`tools/bench/drive-bench.sh$([ "$QUICK" = 1 ] && echo " --quick")\` — $(date -u +%Y-%m-%d), $(nproc) cores, $(uname -r), $(fio --version)."
  echo
  echo "### (a) zstd, one 4 KiB block at a time, one core"
  echo
  echo "Data of known compressibility (fio's \`buffer_compress_percentage\` meaning). MB/s of input."
  echo
  echo "| compressible | level -5 | level -3 | level -1 | level 1 | level 3 | ratio (-3 / 3) |"
  echo "|---|---|---|---|---|---|---|"
} > "$OUT"
log "zstd levels"
"$BENCH" zstd --seconds "$ZSTD_SECS" > "$WORK/zstd.txt"
for pct in 0 25 50 75 90; do
  row="| $pct% |"
  for level in -5 -3 -1 1 3; do
    row="$row $(grep "pct=$pct level=$level " "$WORK/zstd.txt" | kv mbps) |"
  done
  r1=$(grep "pct=$pct level=-3 " "$WORK/zstd.txt" | kv ratio)
  r3=$(grep "pct=$pct level=3 " "$WORK/zstd.txt" | kv ratio)
  echo "$row $r1 / $r3 |" >> "$OUT"
done

log "FileBackend vs fio io_uring (${FILE_MIB} MiB file, QD 16, ${RUN_SECS}s x $ROUNDS rounds each)"
IMG=$WORK/bench.img
fio --name=fill --filename="$IMG" --size=${FILE_MIB}M --rw=write --bs=1M --direct=1 \
    --ioengine=io_uring --iodepth=4 >/dev/null
{
  echo
  echo "### (b) FileBackend (io_uring) vs fio, 4 KiB random, QD 16, O_DIRECT"
  echo
  echo "A ${FILE_MIB} MiB file on $(df -T "$WORK" | awk 'NR==2{print $2}'); fio and eraid alternate, $ROUNDS × ${RUN_SECS}s each; medians."
  echo
  echo "| workload | fio io_uring IOPS | FileBackend IOPS | ratio (target ≥ 0.8) |"
  echo "|---|---|---|---|"
} >> "$OUT"
for rw in randwrite randread; do
  field=$([ "$rw" = randread ] && echo 8 || echo 49)
  : > "$WORK/fio.$rw"; : > "$WORK/ours.$rw"
  for _ in $(seq "$ROUNDS"); do
    fio --name=x --filename="$IMG" --size=${FILE_MIB}M --rw=$rw --bs=4k --direct=1 \
        --ioengine=io_uring --iodepth=16 --time_based --runtime="$RUN_SECS" --minimal \
        | awk -F';' -v f="$field" '{print $f}' >> "$WORK/fio.$rw"
    "$BENCH" file-iops --file "$IMG" --rw $rw --qd 16 --seconds "$RUN_SECS" | kv iops >> "$WORK/ours.$rw"
  done
  f=$(median < "$WORK/fio.$rw"); o=$(median < "$WORK/ours.$rw")
  echo "| $rw | $f | $o | $(awk -v a="$o" -v b="$f" 'BEGIN{printf "%.2f", a/b}') |" >> "$OUT"
done

log "device WAF with and without FlashAlloc (${WAF_FLASH} MiB flash, ${WAF_WRITES}x writes)"
{
  echo
  echo "### (c) Device WAF: six object streams, different lifetimes, 85% full"
  echo
  echo "Emulated drive over memory, ${WAF_FLASH} MiB flash, 256 KiB erase units, data 50% compressible,"
  echo "host writes = ${WAF_WRITES}× flash. Six streams write objects interleaved block by block; stream k's"
  echo "objects live ~(1+3k) time units (±50%), and when space runs short the next to die go early."
  echo "WAF = flash bytes written (pages, EU headers, checkpoints) / record bytes the host produced."
  echo
  echo "| object | FlashAlloc | device WAF | GC-relocated MiB | checkpoint MiB | erased EUs |"
  echo "|---|---|---|---|---|---|"
} >> "$OUT"
for ob in 256 1024; do
  for fa in on off; do
    line=$("$BENCH" waf --flashalloc $fa --fullness 0.85 --flash-mib "$WAF_FLASH" \
             --writes "$WAF_WRITES" --object-blocks $ob)
    echo "| $((ob * 4 / 1024)) MiB | $fa | $(echo "$line" | kv waf) | $(echo "$line" | kv relocated_mib) | $(echo "$line" | kv ckpt_mib) | $(echo "$line" | kv erased_eus) |" >> "$OUT"
  done
done

if [ "$QUICK" = 1 ]; then
  cat "$OUT"
else
  write_section drive-bench "$OUT"
  cat "$OUT"
fi
