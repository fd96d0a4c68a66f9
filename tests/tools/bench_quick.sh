#!/usr/bin/env bash
# Runs one evaluation workflow (tools/bench/NAME) with --quick against a build and checks
# what it produced: the CSV has the expected rows and plausible values (not timings), the
# plots are PNGs, the table is there. Usage: bench_quick.sh NAME BUILD_DIR
set -euo pipefail
NAME=$1 BUILD=$2
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=$(mktemp -d "${TMPDIR:-/tmp}/eraid-bench-quick.XXXXXX")
trap 'rm -rf "$OUT"' EXIT
EXTRA=()
[ "$NAME" = degraded ] && EXTRA=(--rounds 2)  # its rounds, medians and spreads too
"$ROOT/tools/bench/$NAME" --quick --build "$BUILD" --out "$OUT" "${EXTRA[@]}"
fail() { echo "bench_quick $NAME: $*" >&2; exit 1; }
# rows FILE N: the CSV has a header and N rows.
rows() { local n; n=$(($(wc -l < "$1") - 1)); [ "$n" -eq "$2" ] || fail "$(basename "$1"): $n rows, expected $2"; }
# check FILE AWK_CONDITION WHAT: every data row satisfies the condition.
check() {
  awk -F, -v what="$3" "NR > 1 && !($2) { print \"bench_quick: row \" NR \" fails: \" what \": \" \$0; bad = 1 } END { exit bad }" "$1" ||
    fail "$3"
}
png() { for p in "$@"; do [ "$(head -c 4 "$OUT/$p" | tail -c 3)" = PNG ] || fail "$p is not a PNG"; done; }
case "$NAME" in
  fio-matrix)
    C=$OUT/fio-matrix.csv
    rows "$C" 14  # memory: 2 patterns; eraid: 3 policies × 2 states × 2 patterns
    check "$C" '$7 > 0 && $9 >= $8' "IOPS > 0 and p99 >= p50"
    check "$C" '$1 == "memory" || ($10 > 0 && $10 < 10)' "a ratio to the memory plugin"
    check "$C" '$2 != "raid5" || $11 == 0' "raid5 policy: no RAID10"
    check "$C" '$2 != "raid10" || $11 >= 0.9' "raid10 policy: RAID10 coverage >= 90%"
    png fio-matrix.png ;;
  degraded)
    C=$OUT/degraded.csv
    rows "$C" 6  # 3 shares × 2 rounds
    check "$C" '$9 == 1 || $9 == 2' "the round is recorded"
    # The table: a row per share, medians with their spread, ratios to the all-RAID5 row.
    [ "$(grep -c '^| [0-9]*% | [0-9]*% | [0-9]* ±[0-9.]*% |' "$OUT/degraded.md")" -eq 3 ] ||
      fail "degraded.md: no row per share with its spread"
    grep -q '^| 0% | .* | 1.00× | 1.00× |$' "$OUT/degraded.md" || fail "degraded.md: the all-RAID5 row is not 1.00×"
    check "$C" '$3 > 0 && $4 > 0 && $6 > 0 && $8 > 0' "IOPS and rebuild time > 0"
    check "$C" '($1 == 0 && $2 == 0) || ($1 == 100 && $2 >= 0.9) || ($1 == 50 && $2 > 0.3 && $2 < 0.7)' \
      "RAID10 coverage follows the share"
    rows "$OUT/rebuild.csv" 2
    check "$OUT/rebuild.csv" '$3 > 0 && $4 > 0' "a rebuild under load, with reads served"
    png degraded.png ;;
  compression-sweep)
    C=$OUT/compression-sweep.csv
    rows "$C" 3
    check "$C" '$8 > 0 && $9 > 0 && $5 >= 0 && $5 <= 1 && $6 > 0 && $6 <= 1 && $7 >= 1' "IOPS, coverage, use, WAF in range"
    check "$C" '$10 > 0 && $11 == 1' "degraded 80/20 reads served, the round recorded"
    grep -q '^| 0% | 1.4 | 0.9 | .* | 1.00× |$' "$OUT/compression-sweep.md" ||
      fail "compression-sweep.md: the least compressible row is not 1.00× of itself"
    check "$C" '($1 == 0 && $4 < 1.3) || ($1 == 50 && $4 > 1.5 && $4 < 3) || ($1 == 90 && $4 > 4)' \
      "the drives' compression follows the data's"
    awk -F, 'NR > 1 { if (NR > 2 && $6 > last) bad = 1; last = $6 } END { exit bad }' "$C" ||
      fail "physical use must fall as compressibility rises"
    png compression-sweep.png compression-sweep-iops.png ;;
  wa)
    C=$OUT/wa.csv
    rows "$C" 12  # 2 schemes × (2 selections + 2 sizes + 2 GPs)
    check "$C" '$7 >= 1 && $7 < 20' "WA in [1, 20)"
    awk -F, '$1 == 1 { w[$3, $4] = $7 } END { exit !(w["sepbit", "greedy"] < w["nosep", "greedy"] &&
              w["sepbit", "cost-benefit"] < w["nosep", "cost-benefit"]) }' "$C" ||
      fail "SepBIT must beat NoSep on a Zipf 1.0 trace"
    png wa-exp1.png wa-exp2.png wa-exp3.png ;;
  hot-zones)
    C=$OUT/hot-zones.csv
    rows "$C" 10  # 2 cases × 5 fifths
    check "$C" '$5 > 0 && $4 >= 0.9 && $4 <= 1.7' "IOPS > 0, device reads per read between RAID10's 1 and RAID5's 1.5"
    check "$C" '$2 != 4 || ($3 >= 0.9 && $4 <= 1.15)' "the hot fifth mirrored: <= 1.15 device reads per read degraded"
    check "$C" '$1 != "manual" || $2 >= 3 || $4 >= 1.3' "manual: the cold fifths stay RAID5"
    [ "$(wc -l < "$OUT/hot-zones-timeline.csv")" -gt 5 ] || fail "the timeline has no samples"
    png hot-zones.png ;;
  elastic-matrix)
    C=$OUT/elastic-matrix.csv
    rows "$C" 4  # elastic and raid5 x randwrite and read8020, one cell
    check "$C" '$8 > 0 && $10 >= $9' "IOPS > 0 and p99.9 >= p99"
    check "$C" '$7 != "raid5" || ($16 == 0 && $11 == 0)' "raid5 policy: no RAID10, no conversions"
    check "$C" '$6 != "randwrite" || $14 > 0' "a write workload writes"
    rows "$OUT/elastic-matrix-cells.csv" 2
    check "$OUT/elastic-matrix-cells.csv" '$7 == "raid5" && $9 > 0' "elastic against raid5, as a ratio"
    png elastic-matrix.png ;;
  *) fail "unknown workflow" ;;
esac
grep -q '|' "$OUT/$NAME.md" || fail "no table in $NAME.md"
echo "bench_quick $NAME: ok"
