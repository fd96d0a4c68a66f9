#!/usr/bin/env bash
# tools/bench/model-validate.sh [--quick] [--docs] [--seconds S]
# The drive timing model's validation (docs/compressed-drive.md, "Timing model"): one
# modeled drive alone (eraid-drive-bench model: an emulated drive over memory between the
# model's two layers, 4 KiB random I/O from QD threads, incompressible data), each profile
# at queue depths 1..64, against the model's own curve: for reads, the model run on a
# virtual clock with no host cost (SimulateRandomReads); for writes, the closed form of the
# host side or the rate at which the NAND would be busy all the time, whichever is less.
# So the ratio says what the real-time emulation (threads, sleeps, the drive's own work)
# loses against the timing it is meant to deliver. The closed form (ExpectedIops, mean
# value analysis) is reported beside it. Also the host CPU per I/O and the model's own
# arithmetic per I/O. The time scales keep the modeled latencies far above this host's
# own cost per I/O (tens of us of CPU and a wake-up), as an evaluation would run them.
#   --quick     nvme-tlc reads at QD 1 and 16 only, 1 s each (the suite's smoke run)
#   --docs      rewrite the "drive-model" section of docs/benchmarks.md
#   --seconds S per cell (default 4)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/tools/bench/lib.sh"
QUICK=0 DOCS=0 SECONDS_PER=4
quick_defaults() { SECONDS_PER=1; }
bench_args model-validate "--quick=QUICK! --docs=DOCS! --seconds=SECONDS_PER" "$@"
BENCH=${ERAID_BUILD:-$ROOT/build}/tools/bench/eraid-drive-bench
[ -x "$BENCH" ] || { echo "model-validate: build first ($BENCH missing)" >&2; exit 1; }

cells=()
if [ "$QUICK" = 1 ]; then
  cells=("nvme-tlc,time_scale=50 randread 1" "nvme-tlc,time_scale=50 randread 16")
else
  for p in "nvme-tlc,time_scale=50" "csd,time_scale=50" "sata-ssd,time_scale=20"; do
    for qd in 1 4 16 64; do cells+=("$p randread $qd"); done
  done
  # Writes complete into the buffer in 2 modeled us: a large scale (4 ms then) keeps that
  # far above the host's own cost of a write (~50 us of CPU and a wake-up).
  for qd in 1 4 16; do cells+=("nvme-tlc,time_scale=2000 randwrite $qd"); done
fi
load=$(cut -d' ' -f1-3 /proc/loadavg)
out=$(mktemp)
trap 'rm -f "$out" "$out.md"' EXIT
for c in "${cells[@]}"; do
  set -- $c
  "$BENCH" model --drive-model "$1" --rw "$2" --qd "$3" --seconds "$SECONDS_PER" --flash-mib 256 | tee -a "$out"
done
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }
{
  echo "## Drive timing model: one drive against its profile (tools/bench/model-validate.sh)"
  echo
  echo "One modeled drive alone, in process (\`eraid-drive-bench model\`: QD threads of synchronous 4 KiB"
  echo "random I/O on incompressible data, the drive half full), against the model's own curve: reads"
  echo "against the model run on a virtual clock with no host cost (\`SimulateRandomReads\`), writes against"
  echo "the host side's closed form or the rate that keeps the NAND busy all the time, whichever is less."
  echo "The ratio columns are measured / curve; the closed form (\`DriveProfile::ExpectedIops\`, mean value"
  echo "analysis, which assumes random service times) is beside them."
  echo "Host CPU and context switches per I/O are the whole in-process stack's (getrusage of the process);"
  echo "model ns per I/O is the model's own arithmetic"
  echo "(a read's flash and host parts, at QD 16)."
  echo
  echo "Measured $(date -u +%Y-%m-%d), load average before: $load. Command: \`tools/bench/model-validate.sh --docs\`."
  echo
  echo "| profile | I/O | QD | IOPS | curve IOPS | ratio | mean latency µs | curve µs | ratio | closed form IOPS | ratio | NAND busy | p99 µs | host CPU µs/IO | switches/IO | model ns/IO |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
  while read -r line; do
    echo "| $(field profile "$line") | $(field rw "$line") | $(field qd "$line") | $(field iops "$line") | $(field profile_iops "$line") | **$(field iops_ratio "$line")** | $(field lat_mean_us "$line") | $(field profile_lat_us "$line") | $(field lat_ratio "$line") | $(field mva_iops "$line") | $(field mva_ratio "$line") | $(field nand_busy "$line") | $(field p99_us "$line") | $(field cpu_us_per_io "$line") | $(field switches_per_io "$line") | $(field model_ns_per_io "$line") |"
  done < "$out"
} > "$out.md"
cat "$out.md"
# Every cell ran.
n=$(grep -c '^model ' "$out")
[ "$n" = "${#cells[@]}" ] || { echo "model-validate: $n of ${#cells[@]} cells ran" >&2; exit 1; }
[ "$DOCS" = 1 ] && write_section drive-model "$out.md"
exit 0
