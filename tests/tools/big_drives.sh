#!/usr/bin/env bash
# Drives as users with big drives give them (issue 22): sparse multi-GiB files and loop
# devices. What must hold, whatever the machine's speed:
#  - four 16 GiB sparse drives serve with at most 128 MiB resident (anonymous and file
#    pages: the open reads checkpoints and summaries, not the flash), also after a clean
#    stop and after kill -9, and their data reads back whole each time;
#  - the server's log says which open was a crash recovery, and `eraid status` agrees;
#  - loop devices (block devices over sparse 2 GiB files) are taken as drives, sized by
#    the device, and their data survives a restart.
# Usage: big_drives.sh BUILD_DIR
set -euo pipefail
BUILD=$1
for tool in nbdkit nbdcopy losetup python3; do
  command -v $tool >/dev/null || { echo "big_drives: $tool missing (tools/install-deps.sh installs it)"; exit 1; }
done
ERAID=$BUILD/tools/eraid
WORK=$(mktemp -d "${TMPDIR:-/tmp}/eraid-big.XXXXXX")
LOOPS=()
cleanup() {
  local rc=$?
  set +e
  "$ERAID" stop --dir "$WORK/files" >/dev/null 2>&1
  "$ERAID" stop --dir "$WORK/loops" >/dev/null 2>&1
  for l in "${LOOPS[@]}"; do losetup -d "$l" 2>/dev/null; done
  rm -rf "$WORK"
  exit $rc
}
trap cleanup EXIT
step() { echo "big_drives: $*"; }

# Resident memory of the array's server, in KiB (anonymous + file-backed).
rss_kib() {
  local pid
  pid=$(pgrep -f "nbdkit.*dir=$1" | head -1)
  [ -n "$pid" ] || { echo "big_drives: no server for $1" >&2; exit 1; }
  awk '/^RssAnon|^RssFile/ { s += $2 } END { print s }' /proc/$pid/status
}
check_rss() {  # DIR WHEN
  local kib
  kib=$(rss_kib "$1")
  step "$2: $((kib / 1024)) MiB resident"
  # A sanitizer's shadow memory and quarantine are not the stack's: no bound under one.
  [ -z "${ERAID_NBDKIT_PRELOAD:-}" ] || return 0
  [ "$kib" -le $((128 * 1024)) ] || { echo "big_drives: $2: $kib KiB resident, over 128 MiB" >&2; exit 1; }
}
last_open() { grep "^eraid: opened " "$1/serve.log" | tail -1; }
# The image's 64 MiB at the volume's start (cmp stops reading there; nbdcopy then ends on
# the closed pipe, which is not a failure: the status is cmp's).
verify() { (set +o pipefail; nbdcopy "$1" - 2>/dev/null | cmp -n $((64 << 20)) - "$WORK/img"); }

A=$WORK/files
URI="nbd+unix:///?socket=$A/nbd.sock"
head -c $((64 << 20)) /dev/urandom > "$WORK/img"
step "four 16 GiB sparse drives"
"$ERAID" create --dir "$A" --devices 4 --device-size 16G >/dev/null
for k in 0 1 2 3; do
  # Sparse: the drive's files take next to no disk until written.
  [ "$(du -k "$A/drive$k" | cut -f1)" -lt $((64 * 1024)) ] ||
    { du -k "$A/drive$k"; echo "big_drives: drive$k is not sparse" >&2; exit 1; }
done
"$ERAID" serve --dir "$A" --daemon >/dev/null
check_rss "$A" "fresh start"
nbdcopy "$WORK/img" "$URI"
"$ERAID" stop --dir "$A" >/dev/null
"$ERAID" serve --dir "$A" --daemon >/dev/null
check_rss "$A" "after a clean stop"
last_open "$A" | grep -q "after a clean stop" || { last_open "$A"; echo "big_drives: not a clean open" >&2; exit 1; }
verify "$URI"
pkill -KILL -f "nbdkit.*dir=$A"
for _ in $(seq 100); do pgrep -f "nbdkit.*dir=$A" >/dev/null || break; sleep 0.1; done
# The array's lock goes with the last process that held it, which may outlive nbdkit by a
# moment (under ASan, exits are slow): a serve refused as "already served" is tried again.
for try in $(seq 50); do
  "$ERAID" serve --dir "$A" --daemon >/dev/null 2>"$WORK/serve.err" && break
  grep -q "already served or open" "$WORK/serve.err" && [ "$try" -lt 50 ] || { cat "$WORK/serve.err" >&2; exit 1; }
  sleep 0.2
done
check_rss "$A" "after kill -9"
last_open "$A" | grep -q "a crash recovery of 4 drive(s)" ||
  { last_open "$A"; echo "big_drives: the log does not call it a crash recovery" >&2; exit 1; }
"$ERAID" status --dir "$A" --json | python3 -c '
import json, sys
o = json.load(sys.stdin)["open"]
assert o["crashed_drives"] == 4 and o["seconds"] > 0, o'
verify "$URI"
"$ERAID" stop --dir "$A" >/dev/null

step "four loop devices over sparse 2 GiB files"
B=$WORK/loops
mkdir -p "$WORK/backing"
DEVS=()
for k in 0 1 2 3; do
  truncate -s 2G "$WORK/backing/$k"
  l=$(losetup --find --show "$WORK/backing/$k")
  LOOPS+=("$l")
  DEVS+=(--device "$l")
done
"$ERAID" create --dir "$B" --devices 4 "${DEVS[@]}" >/dev/null
URI="nbd+unix:///?socket=$B/nbd.sock"
"$ERAID" serve --dir "$B" --daemon >/dev/null
"$ERAID" status --dir "$B" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
devs = d["devices"]
assert len(devs) == 4 and all(x["path"].startswith("/dev/loop") for x in devs), devs
# Sized by the device (2 GiB each), not by --device-size (256M by default).
assert d["capacity_bytes"] > 3 * 1024**3, d["capacity_bytes"]' || {
  "$ERAID" status --dir "$B" --json | head -c 2000; exit 1; }
nbdcopy "$WORK/img" "$URI"
"$ERAID" stop --dir "$B" >/dev/null
"$ERAID" serve --dir "$B" --daemon >/dev/null
check_rss "$B" "loop devices, after a clean stop"
verify "$URI"
"$ERAID" stop --dir "$B" >/dev/null
step "ok"
