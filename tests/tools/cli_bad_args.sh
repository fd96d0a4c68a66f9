#!/usr/bin/env bash
# Every eraid subcommand's bad-argument paths: a non-zero exit and one line on stderr that
# names the subcommand and says what is wrong; nothing is created or changed.
# Usage: cli_bad_args.sh BUILD_DIR
set -uo pipefail
ERAID=$1/tools/eraid
WORK=$(mktemp -d "${TMPDIR:-/tmp}/eraid-cli.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
failures=0
# expect_fail SUBCOMMAND PATTERN ARGS... : exits non-zero, one stderr line "eraid SUB: ...PATTERN..."
expect_fail() {
  local sub=$1 pattern=$2; shift 2
  local err rc
  err=$("$ERAID" "$@" 2>&1 >/dev/null); rc=$?
  if [ $rc -eq 0 ]; then
    echo "FAIL: eraid $* exited 0"; failures=$((failures + 1)); return
  fi
  if [ "$(printf '%s\n' "$err" | wc -l)" -ne 1 ] || ! printf '%s' "$err" | grep -q "^eraid $sub: .*$pattern"; then
    echo "FAIL: eraid $* (exit $rc) printed: $err"; failures=$((failures + 1)); return
  fi
  echo "ok   eraid $* -> $err"
}

A=$WORK/a
expect_fail create "required" create
expect_fail create "unrecognised\|unrecognized" create --dir "$A" --bogus
expect_fail create "size" create --dir "$A" --device-size 1Q
expect_fail create "32M" create --dir "$A" --device-size 1M
expect_fail create "devices" create --dir "$A" --devices 2
expect_fail create "devices" create --dir "$A" --devices 17
expect_fail create "chunk" create --dir "$A" --chunk 3K
expect_fail create "expansion" create --dir "$A" --expansion 0.5
expect_fail create "zstd\|compression" create --dir "$A" --compression lz4
expect_fail create "flashalloc" create --dir "$A" --flashalloc maybe
expect_fail create "gc must" create --dir "$A" --gc sometimes
expect_fail create "policy must" create --dir "$A" --policy raid6
expect_fail create "beta" create --dir "$A" --beta 1.5
expect_fail create "convert-rate" create --dir "$A" --convert-rate fast
expect_fail create "hot-half-life" create --dir "$A" --hot-half-life 1
expect_fail create "hot-half-life" create --dir "$A" --hot-half-life 7200
expect_fail create "conversion-share" create --dir "$A" --conversion-share 1.5
expect_fail create "conversion-share" create --dir "$A" --conversion-share -0.1
expect_fail create "no profile 'optane'" create --dir "$A" --drive-model optane
expect_fail create "no key 'speed'" create --dir "$A" --drive-model csd,speed=3
expect_fail create "bad value for read_us" create --dir "$A" --drive-model csd,read_us=x
expect_fail create "time-scale needs a --drive-model" create --dir "$A" --time-scale 5
expect_fail create "time-scale must be" create --dir "$A" --drive-model csd --time-scale 0
expect_fail create "io-timeout" create --dir "$A" --io-timeout 0
expect_fail create "nbd+unix:///?socket=$WORK/none.sock" create --dir "$A" --devices 3 \
  --device "nbd+unix:///?socket=$WORK/none.sock" --device "$WORK/d1" --device "$WORK/d2"
expect_fail create "nbd://127.0.0.1:1/.*refused" create --dir "$A" --devices 3 --device "$WORK/d0" --device "nbd://127.0.0.1:1/" --device "$WORK/d2"
[ -e "$WORK/d0" ] && { echo "FAIL: a failed create left $WORK/d0 behind"; failures=$((failures + 1)); }
expect_fail set "give --io-timeout or --drive-model" set --dir "$A"
expect_fail set "required" set --io-timeout 5
expect_fail set "no profile 'hdd'" set --dir "$A" --drive-model hdd
expect_fail set "time-scale needs a --drive-model" set --dir "$A" --time-scale 3
expect_fail set "apart" set --dir "$A" --drive-model csd --io-timeout 5
expect_fail set "io-timeout" set --dir "$A" --io-timeout 0
expect_fail set "no array" set --dir "$A" --io-timeout 5
expect_fail create "placement\|fk\|unknown" create --dir "$A" --placement fk
expect_fail create "oracle.*future" create --dir "$A" --placement oracle
expect_fail create "invalid\|devices" create --dir "$A" --devices x
expect_fail create "device paths" create --dir "$A" --devices 4 --device "$WORK/x0" --device "$WORK/x1"
[ -z "$(ls -A "$A" 2>/dev/null | grep -v eraid.lock)" ] || { echo "FAIL: a bad create left files behind: $(ls "$A")"; failures=$((failures + 1)); }

"$ERAID" create --dir "$A" --device-size 32M >/dev/null || { echo "FAIL: create"; exit 1; }
expect_fail create "already holds an array" create --dir "$A" --device-size 32M

for sub in status inspect scrub; do
  expect_fail $sub "required" $sub
  expect_fail $sub "no array" $sub --dir "$WORK/none"
  expect_fail $sub "unrecognised\|unrecognized" $sub --dir "$A" --bogus
done
expect_fail status "interval" status --dir "$A" --interval 0
expect_fail status "interval" status --dir "$A" --interval 7200
expect_fail status "count needs --interval" status --dir "$A" --count 3
expect_fail status "needs the array served" status --dir "$A" --interval 1 --count 1
expect_fail inspect "bins" inspect --dir "$A" --bins 0
expect_fail inspect "bins" inspect --dir "$A" --bins 1001
expect_fail fail "required" fail --dir "$A"
expect_fail fail "bad device" fail --dir "$A" --device 9
expect_fail fail "invalid\|device" fail --dir "$A" --device x
expect_fail replace "required" replace --dir "$A"
expect_fail replace "bad device" replace --dir "$A" --device 4
expect_fail replace "rate" replace --dir "$A" --device 1 --rate 5Q
expect_fail convert "required" convert --dir "$A"
expect_fail convert "raid5 or raid10" convert --dir "$A" --to raid6
expect_fail convert "bad segment" convert --dir "$A" --to raid10 --segment 100000
expect_fail convert "not sealed" convert --dir "$A" --to raid10 --segment 0
expect_fail convert "rate" convert --dir "$A" --to raid10 --rate 5Q
expect_fail serve "required" serve
expect_fail serve "no array" serve --dir "$WORK/none"
expect_fail serve "TLS" serve --dir "$A" --tcp 127.0.0.1:10809
expect_fail serve "ADDR:PORT" serve --dir "$A" --tcp localhost --tls-psk "$WORK/psk"
expect_fail serve "not both" serve --dir "$A" --socket "$WORK/s" --tcp 127.0.0.1:1 --tls-psk "$WORK/psk"
expect_fail serve "with --tcp" serve --dir "$A" --tls-psk "$WORK/psk"
expect_fail serve "threads" serve --dir "$A" --threads 2000
expect_fail stop "required" stop
expect_fail stop "nothing serves" stop --dir "$A"
expect_fail demo "compressibility\|iodepth" demo --compressibility 99
expect_fail demo "unrecognised\|unrecognized" demo --bogus
# The array is unchanged by all of that.
"$ERAID" scrub --dir "$A" >/dev/null || { echo "FAIL: the array does not scrub clean"; failures=$((failures + 1)); }
out=$("$ERAID" 2>&1); [ $? -ne 0 ] && printf '%s' "$out" | grep -q "usage" || { echo "FAIL: bare eraid"; failures=$((failures + 1)); }
"$ERAID" nosuch >/dev/null 2>&1 && { echo "FAIL: unknown subcommand exited 0"; failures=$((failures + 1)); }
for sub in create serve stop status fail replace scrub convert inspect demo; do
  "$ERAID" $sub --help | grep -q "eraid $sub" || { echo "FAIL: eraid $sub --help"; failures=$((failures + 1)); }
done
# eraid-tracegen: an unknown pattern or an impossible one is refused, exit 2, nothing written.
GEN=$1/tools/eraid-tracegen
for args in "--pattern nope" "--pattern mixed --wss-blocks 100 --seq-blocks 100" "--seq-percent 101"; do
  # shellcheck disable=SC2086  # words
  out=$("$GEN" $args --writes 10 2>"$WORK/err"); rc=$?
  if [ $rc -ne 2 ] || [ -n "$out" ] || ! grep -q "^eraid-tracegen: " "$WORK/err"; then
    echo "FAIL: eraid-tracegen $args (exit $rc): $(cat "$WORK/err")"; failures=$((failures + 1))
  else
    echo "ok   eraid-tracegen $args -> $(cat "$WORK/err")"
  fi
done
# The bench scripts' shared parser (tools/bench/lib.sh bench_args): an unknown option or a
# missing value exits 2 with one line naming the script; --help prints its header.
BENCH=$(cd "$(dirname "$0")/../../tools/bench" && pwd)
for script in nbd-bench.sh scale-bench.sh fio-matrix wa; do
  name=${script%.sh}
  for args in "--bogus" "--build"; do
    # shellcheck disable=SC2086  # words
    out=$("$BENCH/$script" $args 2>"$WORK/err"); rc=$?
    if [ $rc -ne 2 ] || [ -n "$out" ] || [ "$(wc -l < "$WORK/err")" -ne 1 ] || ! grep -q "^$name: " "$WORK/err"; then
      echo "FAIL: $script $args (exit $rc): $(cat "$WORK/err")"; failures=$((failures + 1))
    else
      echo "ok   $script $args -> $(cat "$WORK/err")"
    fi
  done
  "$BENCH/$script" --help | grep -qi "usage" || { echo "FAIL: $script --help"; failures=$((failures + 1)); }
done
[ $failures -eq 0 ] && echo "cli_bad_args: all bad arguments refused cleanly" || echo "cli_bad_args: $failures failures"
exit $((failures > 0))
