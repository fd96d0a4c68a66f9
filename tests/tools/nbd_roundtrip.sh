#!/usr/bin/env bash
# End to end through real NBD: `eraid create`, nbdkit with the eraid plugin on a Unix
# socket, nbdcopy of random data in and back out (cmp), then a server restart and the
# data read back again. Usage: nbd_roundtrip.sh BUILD_DIR
set -euo pipefail
BUILD=$1
for tool in nbdkit nbdcopy; do
  command -v $tool >/dev/null || { echo "nbd_roundtrip: $tool missing (tools/install-deps.sh installs it)"; exit 1; }
done
WORK=$(mktemp -d "${TMPDIR:-/tmp}/eraid-nbd.XXXXXX")
PIDFILE=$WORK/pid
SOCK=$WORK/sock
cleanup() {
  [ -f "$PIDFILE" ] && kill "$(cat "$PIDFILE")" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
PLUGIN="$BUILD/tools/nbdkit-eraid-plugin.so"
# A sanitizer build of the plugin needs its runtime loaded first into nbdkit.
PRELOAD=$(ldd "$PLUGIN" | awk '/lib(asan|ubsan|tsan)\.so/ {print $3}' | paste -sd: -)
serve() {
  rm -f "$SOCK" "$PIDFILE"
  LD_PRELOAD="$PRELOAD" ASAN_OPTIONS="detect_leaks=0:${ASAN_OPTIONS:-}" nbdkit --unix "$SOCK" --pidfile "$PIDFILE" "$PLUGIN" dir="$WORK/array"
  for _ in $(seq 100); do [ -S "$SOCK" ] && [ -f "$PIDFILE" ] && return 0; sleep 0.1; done
  echo "nbd_roundtrip: nbdkit did not start"; exit 1
}
stop() {
  local pid; pid=$(cat "$PIDFILE")
  kill "$pid"
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  echo "nbd_roundtrip: nbdkit did not stop"; exit 1
}
"$BUILD/tools/eraid" create --dir "$WORK/array" --devices 4 --device-size 64M
head -c $((32 << 20)) /dev/urandom > "$WORK/img"
URI="nbd+unix:///?socket=$SOCK"
serve
nbdcopy "$WORK/img" "$URI"
nbdcopy "$URI" "$WORK/out"
cmp -n $((32 << 20)) "$WORK/img" "$WORK/out"
stop
serve
nbdcopy "$URI" "$WORK/out2"
cmp -n $((32 << 20)) "$WORK/img" "$WORK/out2"
stop
echo "nbd_roundtrip: 32 MiB in and out over NBD, equal before and after a restart"
