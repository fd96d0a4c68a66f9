#!/usr/bin/env bash
# Placement classes for several volumes: shared by all volumes (one SepBIT over every
# block, what log/named_volumes.h does) or one set per volume (a SepBIT of its own for each,
# twice the classes, one segment pool)? eraid-tenants-bench replays two tenants of
# 2^18 LBAs (1 GiB) each — one hot (80% of its writes to 20% of its LBAs), one uniform —
# through the log engine with the live volume's free-space GC trigger, at three shares
# of the writes for the hot tenant, and prints the WA in all and per tenant.
# Usage: tools/bench/tenants-bench.sh [--build DIR] [--print]
#   rewrites the tenants-bench section of docs/benchmarks.md (--print: prints only).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
. "$ROOT/tools/bench/lib.sh"
BUILD=$ROOT/build
PRINT=0
bench_args tenants-bench '--build=BUILD --print=PRINT!' "$@"
BENCH=$BUILD/tools/bench/eraid-tenants-bench
[ -x "$BENCH" ] || { echo "tenants-bench: $BENCH not built (run tools/eraid.sh build)" >&2; exit 1; }
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
{
  echo "## Placement classes for two volumes: shared or per volume (log/)"
  echo
  echo "Command: \`tools/bench/tenants-bench.sh\` — $(date -u +%Y-%m-%d) (a replay: the figures do not depend"
  echo "on the machine). Two tenants of 1 GiB each in one log (CountingStore, segments of 1,024"
  echo "blocks, data 75% of the room, free-space GC as the live volume), filled once, then 10"
  echo "writes per LBA: tenant *hot* writes 80% of its blocks to 20% of its LBAs, tenant *uniform*"
  echo "writes all its LBAs alike. SepBIT shared by both (6 classes) against a SepBIT per tenant"
  echo "(12 classes, one segment pool). WA = (user + GC writes) / user writes, of the workload."
  echo
  echo "| writes to the hot tenant | classes | WA | WA of the hot tenant | WA of the uniform tenant |"
  echo "|---|---|---|---|---|"
  for hs in 0.2 0.5 0.8; do
    "$BENCH" --hot-share $hs | awk -F, -v hs="$hs" '$1 == "shared" || $1 == "per-volume" {
      printf "| %d%% | %s | %s | %s | %s |\n", hs * 100, $1, $2, $3, $4 }'
  done
} > "$OUT"
if [ "$PRINT" = 1 ]; then cat "$OUT"; else write_section tenants-bench "$OUT"; fi
