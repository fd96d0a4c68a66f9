# Shared by the benchmark scripts (sourced, not run). Expects ROOT (the checkout).

# write_section NAME FILE: replaces docs/benchmarks.md's part between
# <!-- NAME:begin --> and <!-- NAME:end --> with FILE (appending the markers if absent).
write_section() {
  local name=$1 section=$2 doc=$ROOT/docs/benchmarks.md
  grep -q "$name:begin" "$doc" || printf '\n<!-- %s:begin -->\n<!-- %s:end -->\n' "$name" "$name" >> "$doc"
  awk -v sec="$section" -v b="<!-- $name:begin -->" -v e="<!-- $name:end -->" '
    $0 == b {print; while ((getline l < sec) > 0) print l; skip=1; next}
    $0 == e {skip=0}
    !skip {print}' "$doc" > "$section.doc" && mv "$section.doc" "$doc"
  echo "$name: wrote $doc" >&2
}

# usage_from_header SCRIPT: prints the script's leading comment block (after the #! line),
# without the comment marks: its --help, however long the block grows.
usage_from_header() { awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$1"; }

# bench_args NAME 'SPEC' "$@": a bench script's command line. SPEC names its options, one
# per word: "--runtime=RUNTIME" takes a value into RUNTIME, "--trace=TRACES[]" appends one
# to the array TRACES, "--docs=DOCS!" is a flag (DOCS=1). "--quick=QUICK!" is a flag too,
# and then also calls the script's quick_defaults function, if it has one, where it stands
# among the options (a later option still overrides what the quick run set). -h/--help
# prints the script's header comment. An unknown option, or one without its value, exits
# 2 with a message that names the script.
bench_args() {
  local bench_name=$1 bench_spec=$2 bench_word bench_var
  shift 2
  while [ $# -gt 0 ]; do
    case "$1" in -h|--help) usage_from_header "$0"; exit 0 ;; esac
    bench_var=""
    for bench_word in $bench_spec; do
      if [ "${bench_word%%=*}" = "$1" ]; then bench_var=${bench_word#*=}; break; fi
    done
    [ -n "$bench_var" ] || { echo "$bench_name: unknown option $1 (see --help)" >&2; exit 2; }
    case "$bench_var" in
      *!)
        printf -v "${bench_var%!}" 1
        if [ "$1" = --quick ] && declare -F quick_defaults >/dev/null; then quick_defaults; fi ;;
      *)
        [ $# -ge 2 ] || { echo "$bench_name: $1 needs a value (see --help)" >&2; exit 2; }
        case "$bench_var" in
          *'[]') eval "${bench_var%[]}+=(\"\$2\")" ;;
          *) printf -v "$bench_var" '%s' "$2" ;;
        esac
        shift ;;
    esac
    shift
  done
}

# ---- a served array's own cost per I/O (nbd-bench, gc-bench)

# serve_pid DIR: the nbdkit process `eraid serve --dir DIR` runs (its child).
serve_pid() { pgrep -P "$(pgrep -f "eraid serve --dir $1" | head -1)" -x nbdkit | head -1; }

# cost_begin PID FILE / cost_end: the process's CPU time (all its threads, exited ones
# too) and context switches in between, as COST_CPU_MS and COST_CS (empty without a
# usable perf: CPU then from /proc, switches not measured).
COST_PERF=""
cost_begin() {
  COST_PID=$1 COST_FILE=$2 COST_CS="" COST_PERFPID=""
  if [ -z "$COST_PERF" ]; then
    COST_PERF=0
    if command -v perf >/dev/null && perf stat -e task-clock -p "$COST_PID" -x, -o /dev/null sleep 0.1 2>/dev/null; then
      COST_PERF=1
    else
      echo "bench: no usable perf: CPU per I/O from /proc, context switches not measured" >&2
    fi
  fi
  if [ "$COST_PERF" = 1 ]; then
    perf stat -e task-clock,context-switches -p "$COST_PID" -x, -o "$COST_FILE" &
    COST_PERFPID=$!
    sleep 0.2  # attached before the first I/O
  else
    COST_BEFORE=$(cost_proc_ms "$COST_PID")
  fi
}
cost_end() {
  if [ "$COST_PERF" = 1 ]; then
    # perf may have exited already: attaching races with the process's threads (one that
    # exits while perf attaches fails it with "No such process"); the figures are then
    # missing (per_io prints –), and the run goes on.
    kill -INT "$COST_PERFPID" 2>/dev/null || true
    wait "$COST_PERFPID" 2>/dev/null || true
    COST_CPU_MS=$(awk -F, '/task-clock/ {print $1}' "$COST_FILE" 2>/dev/null || true)
    COST_CS=$(awk -F, '/context-switches/ {print $1}' "$COST_FILE" 2>/dev/null || true)
  else
    COST_CPU_MS=$(awk -v a="$COST_BEFORE" -v b="$(cost_proc_ms "$COST_PID")" 'BEGIN {print b - a}')
  fi
}
cost_proc_ms() { awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) * 1000 / hz}' "/proc/$1/stat"; }
# threads_snapshot PID FILE: one line per live thread of PID: its name (a trailing -NUMBER,
# as io_uring's iou-wrk-TID, cut off), CPU ticks, voluntary and involuntary switches.
threads_snapshot() {
  local t name
  for t in /proc/"$1"/task/*; do
    name=$(cat "$t/comm" 2>/dev/null) || continue
    echo "$(basename "$t") ${name// /_} $(awk '{print $14 + $15}' "$t/stat" 2>/dev/null || echo 0)" \
         "$(awk '/^voluntary_ctxt/ {v=$2} /^nonvoluntary_ctxt/ {n=$2} END {print v + 0, n + 0}' "$t/status" 2>/dev/null)"
  done > "$2"
}
# threads_split BEFORE AFTER IOS: per thread name, CPU µs and switches per I/O between two
# snapshots, as "name µs cs" lines, costliest first. Threads that ended in between (io_uring
# workers come and go) are not counted: the total can be below the process's.
threads_split() {
  awk -v ios="$3" -v hz="$(getconf CLK_TCK)" '
    FNR == NR { cpu[$1] = $3; cs[$1] = $4 + $5; next }
    { name = $2; sub(/-[0-9]+$/, "", name); C[name] += $3 - cpu[$1]; S[name] += $4 + $5 - cs[$1] }
    END { for (k in C) if (ios > 0 && C[k] > 0) printf "%s %.1f %.2f\n", k, C[k] * 1e6 / hz / ios, S[k] / ios }' \
    "$1" "$2" | sort -k2 -nr
}
# per_io TOTAL N FORMAT: TOTAL / N, or – when either is missing.
per_io() { awk -v a="$1" -v n="$2" -v f="$3" 'BEGIN {if (a == "" || n <= 0) print "–"; else printf f, a / n}'; }

# ---- the evaluation workflows (fio-matrix, degraded, compression-sweep, wa)

BENCH_T0=$(date +%s)
# say NAME TEXT...: a progress line on stderr, with the seconds since the start.
say() {
  local name=$1; shift
  printf '%s [%4ds] %s\n' "$name" "$(($(date +%s) - BENCH_T0))" "$*" >&2
}

# need TOOL...: exits with a clear message if a tool is missing.
need() {
  local t
  for t in "$@"; do
    command -v "$t" >/dev/null || { echo "bench: $t missing (tools/install-deps.sh installs it)" >&2; exit 1; }
  done
}

# fio_terse URI RW QD JOBS [fio options...]: one terse v3 line (jobs reported as a group).
fio_terse() {
  local uri=$1 rw=$2 qd=$3 jobs=$4; shift 4
  fio --name=bench --ioengine=nbd --uri="$uri" --rw="$rw" --bs=4k --iodepth="$qd" --numjobs="$jobs" \
      --group_reporting --refill_buffers "$@" --output-format=terse --terse-version=3 2>/dev/null | grep '^3;' | tail -1
}
# terse_iops LINE: read + write IOPS. terse_p LINE rw|read|write P: the P (50, 99) latency
# percentile in µs of completions (reads for read patterns, writes for write patterns).
terse_iops() { echo "$1" | awk -F';' '{print $8 + $49}'; }
terse_p() {
  local first=18
  [ "$2" = write ] && first=59
  echo "$1" | cut -d';' -f"$first-$((first + 19))" | tr ';' '\n' | sed -n "s/^$3.000000%=//p" | head -1
}

# json_num JSON KEY: the first number under "KEY" in a JSON text (status and inspect).
json_num() { echo "$1" | grep -o "\"$2\":[-0-9.e+]*" | head -1 | cut -d: -f2; }

# The drives' timing model the evaluation workflows create their arrays with: their
# --drive-model option (docs/compressed-drive.md, "Timing model"). By default the paper's
# kind of drive, slowed until four of them, not this host's two cores, bound the array;
# `none` runs on the untimed drives, bound by the CPU.
BENCH_DRIVE_MODEL=${BENCH_DRIVE_MODEL:-csd,time_scale=50}

# array_up ERAID DIR [create options...]: creates and serves an array (a daemon), its
# drives timed by BENCH_DRIVE_MODEL.
array_up() {
  local eraid=$1 dir=$2; shift 2
  "$eraid" create --dir "$dir" --drive-model "$BENCH_DRIVE_MODEL" "$@" >/dev/null
  "$eraid" serve --dir "$dir" --daemon >/dev/null
}
array_down() { "$1" stop --dir "$2" >/dev/null 2>&1 || true; }

# wait_settled ERAID DIR [MAX_S]: waits until the array's conversions have not moved for
# 12 s, counted from when the scheduler's traffic window says the writes are over (a write
# share of at most 20%: after a fill, the first window with no traffic, which closes up to
# 10 s after its start; before it the scheduler treats the array as under write churn and
# promotes nothing idle, so an unchanged reading then said nothing), at most MAX_S seconds
# (default 120).
wait_settled() {
  local eraid=$1 dir=$2 max=${3:-120} last="" now i still=0 s quiet
  for ((i = 0; i < max; i += 2)); do
    s=$("$eraid" status --dir "$dir" --json)
    now="$(json_num "$s" to_raid10),$(json_num "$s" to_raid5)"
    quiet=$(awk -v w="$(json_num "$s" write_share)" 'BEGIN { print (w == "" || w <= 0.2) }')
    if [ "$quiet" = 1 ] && [ "$now" = "$last" ]; then
      still=$((still + 2))
      ((still >= 12)) && return 0
    else
      still=0
    fi
    last=$now
    sleep 2
  done
}

# round_medians CSV NKEYS FIRST LAST: a workflow run in rounds, summed up per point. A point
# is a distinct value of the CSV's first NKEYS columns (in the order they first appear); for
# each of the columns FIRST..LAST it prints the median over the rounds and the spread: the
# largest distance of a round's value from that median, in percent of it (0 with one round
# or a median of 0). Lines: "key columns...,median FIRST,spread FIRST,...,median LAST,spread LAST".
round_medians() {
  awk -F, -v nk="$2" -v first="$3" -v last="$4" 'FNR == 1 { next }
    { key = $1; for (i = 2; i <= nk; i++) key = key "," $i
      if (!(key in seen)) { seen[key] = 1; order[++n] = key }
      for (c = first; c <= last; c++) v[key, c, ++cnt[key, c]] = $c }
    function median(s, c,   k, i, j, t, a) {
      k = cnt[s, c]; for (i = 1; i <= k; i++) a[i] = v[s, c, i] + 0
      for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
      return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
    }
    END {
      for (i = 1; i <= n; i++) {
        s = order[i]; printf "%s", s
        for (c = first; c <= last; c++) {
          m = median(s, c); d = 0
          for (r = 1; r <= cnt[s, c]; r++) { x = v[s, c, r] - m; if (x < 0) x = -x; if (x > d) d = x }
          printf ",%.10g,%.6g", m, (m > 0 ? 100 * d / m : 0)
        }
        printf "\n"
      }
    }' "$1"
}

# plot PNG GNUPLOT_COMMANDS: renders a PNG with gnuplot (pngcairo, 800×500).
plot() {
  local png=$1 cmds=$2
  gnuplot <<EOF 2>/dev/null || echo "bench: gnuplot failed for $png" >&2
set terminal pngcairo noenhanced size 800,500 font "sans,10"
set output "$png"
set datafile separator ","
set key outside right top
set grid ytics
$cmds
EOF
}
