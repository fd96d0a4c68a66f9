#!/usr/bin/env bash
# Drives with a timing model, end to end with the user's commands: `eraid create
# --drive-model csd --time-scale S` keeps the profile in the manifest; served, fio writes
# and verifies (verify=crc32c) through the modeled drives, a drive fails and the data
# verifies degraded, and `eraid status --json` shows each drive's model figures (its
# I/Os, NAND reads, programs); the model changes only on a stopped array (`eraid set
# --drive-model`, refused while served), and `none` serves the same data untimed.
# Usage: drive_model.sh BUILD_DIR
set -euo pipefail
BUILD=$1
for tool in nbdkit fio python3; do
  command -v $tool >/dev/null || { echo "drive_model: $tool missing (tools/install-deps.sh installs it)"; exit 1; }
done
ERAID=$BUILD/tools/eraid
WORK=$(mktemp -d "${TMPDIR:-/tmp}/eraid-model.XXXXXX")
A=$WORK/array
cleanup() {
  "$ERAID" stop --dir "$A" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
step() { echo "drive_model: $*"; }
fail() { echo "drive_model: FAIL: $*"; exit 1; }
URI="nbd+unix:///?socket=$A/nbd.sock"
json() { "$ERAID" status --dir "$A" --json | python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
fio_job() {  # fio_job NAME RW [extra...]
  local name=$1 rw=$2; shift 2
  fio --name="$name" --ioengine=nbd --uri="$URI" --rw="$rw" --bs=4k --size=24M --iodepth=8 \
      --verify=crc32c --verify_fatal=1 --buffer_compress_percentage=50 --refill_buffers \
      --randseed=7 --output="$WORK/$name.log" "$@" || { cat "$WORK/$name.log"; fail "fio $name"; }
}

"$ERAID" create --dir "$A" --devices 4 --device-size 64M --drive-model csd,read_us=80 --time-scale 2 >/dev/null
grep -qx 'drive_model=csd,read_us=80,time_scale=2' "$A/eraid.conf" || fail "manifest: $(grep drive_model "$A/eraid.conf")"
"$ERAID" serve --dir "$A" --daemon >/dev/null
[ "$(json 'd["drive_model"]')" = "csd,read_us=80,time_scale=2" ] || fail "status drive_model"
fio_job write randwrite
step "fio wrote and verified 24 MiB through csd drives"
for d in 0 1 2 3; do
  ops=$(json "d['devices'][$d]['model']['ops']")
  programs=$(json "d['devices'][$d]['model']['flash_programs']")
  reads=$(json "d['devices'][$d]['model']['flash_reads']")
  [ "$ops" -gt 0 ] && [ "$programs" -gt 0 ] && [ "$reads" -gt 0 ] ||
    fail "device $d model figures: ops $ops programs $programs reads $reads"
done
"$ERAID" status --dir "$A" | grep -q "^drive model: csd,read_us=80,time_scale=2" || fail "status text: no drive model line"
"$ERAID" status --dir "$A" | grep -q "model: NAND busy" || fail "status text: no per-drive model line"
step "status: each drive's I/Os, NAND reads and programs counted"

# Served: the model does not change under the server.
if "$ERAID" set --dir "$A" --drive-model none 2> "$WORK/set.err"; then fail "set --drive-model while served"; fi
grep -q "stopped array" "$WORK/set.err" || fail "set while served said: $(cat "$WORK/set.err")"

# Degraded reads through the model: every block verifies with a drive failed.
"$ERAID" fail --dir "$A" --device 1 >/dev/null
fio_job verify-degraded randwrite --verify_only
[ "$(json 'd["health"]')" = degraded ] || fail "health after fail: $(json 'd["health"]')"
step "a drive failed: every block verified degraded"
"$ERAID" replace --dir "$A" --device 1 >/dev/null
"$ERAID" stop --dir "$A" >/dev/null

# Stopped: the model changes, and the data is the same untimed.
"$ERAID" set --dir "$A" --drive-model none | grep -q "drive model none" || fail "set none"
"$ERAID" serve --dir "$A" --daemon >/dev/null
[ "$(json 'd["drive_model"]')" = none ] || fail "drive_model after set none"
[ "$(json "'model' in d['devices'][0]")" = False ] || fail "an untimed drive reports model figures"
fio_job verify-untimed randwrite --verify_only
step "set to none while stopped: same data, untimed"
echo "drive_model: ok"
