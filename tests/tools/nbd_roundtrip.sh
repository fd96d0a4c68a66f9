#!/usr/bin/env bash
# End to end through real NBD with the user's commands: `eraid create`, `eraid serve
# --daemon`, nbdcopy of a random image into the volume and back out (cmp), then `eraid
# stop`, a new server, and the image read back again. The image is 256 MiB less 1,535
# bytes: not a multiple of 4 KiB, so its last request is unaligned, as a tar file's often
# is. Usage: nbd_roundtrip.sh BUILD_DIR [MiB]
set -euo pipefail
BUILD=$1
MIB=${2:-256}
for tool in nbdkit nbdcopy; do
  command -v $tool >/dev/null || { echo "nbd_roundtrip: $tool missing (tools/install-deps.sh installs it)"; exit 1; }
done
ERAID=$BUILD/tools/eraid
WORK=$(mktemp -d "${TMPDIR:-/tmp}/eraid-nbd.XXXXXX")
cleanup() {
  "$ERAID" stop --dir "$WORK/array" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
"$ERAID" create --dir "$WORK/array" --devices 4 --device-size 160M
BYTES=$(((MIB << 20) - 1535))
head -c $BYTES /dev/urandom > "$WORK/img"
URI="nbd+unix:///?socket=$WORK/array/nbd.sock"
"$ERAID" serve --dir "$WORK/array" --daemon
nbdcopy "$WORK/img" "$URI"
nbdcopy "$URI" "$WORK/out"
cmp -n $BYTES "$WORK/img" "$WORK/out"
"$ERAID" stop --dir "$WORK/array"
[ ! -e "$WORK/array/nbd.sock" ] || { echo "nbd_roundtrip: the socket was left behind"; exit 1; }
"$ERAID" serve --dir "$WORK/array" --daemon
nbdcopy "$URI" "$WORK/out2"
cmp -n $BYTES "$WORK/img" "$WORK/out2"
"$ERAID" status --dir "$WORK/array"
"$ERAID" stop --dir "$WORK/array"
echo "nbd_roundtrip: $BYTES bytes in and out over NBD, equal before and after a restart"
