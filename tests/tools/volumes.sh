#!/usr/bin/env bash
# Named volumes end to end, with the user's commands: `eraid volume create/list/resize/
# delete` while served, each volume an NBD export by name; fio with verify=crc32c on one
# volume while others are created, resized and deleted beside it (a volume's delete is
# refused while a client has it open); data in each volume read back after a restart; the
# default export unchanged; thin volumes that add up to more than the array holds run
# out with ENOSPC, and a delete gives the space back. Usage: volumes.sh BUILD_DIR
set -euo pipefail
BUILD=$1
for tool in nbdkit nbdcopy nbdinfo fio python3; do
  command -v $tool >/dev/null || { echo "volumes: $tool missing (tools/install-deps.sh installs it)"; exit 1; }
done
ERAID=$BUILD/tools/eraid
WORK=$(mktemp -d "${TMPDIR:-/tmp}/eraid-volumes.XXXXXX")
cleanup() {
  "$ERAID" stop --dir "$WORK/array" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
[ -n "${KEEP:-}" ] && trap - EXIT
step() { echo "volumes: $*"; }
A=$WORK/array
SOCK=$A/nbd.sock
uri() { echo "nbd+unix:///$1?socket=$SOCK"; }
field() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

"$ERAID" create --dir "$A" --devices 4 --device-size 64M >/dev/null
CAP=$("$ERAID" status --dir "$A" --json | field 'd["capacity_bytes"]')
"$ERAID" volume create --dir "$A" --name alpha --size 48M
"$ERAID" volume create --dir "$A" --name beta --size 16M
"$ERAID" serve --dir "$A" --daemon >/dev/null
nbdinfo --list "$(uri "")" > "$WORK/list"
for name in default alpha beta; do grep -q "export=\"$name\"" "$WORK/list" || { echo "volumes: export $name not listed"; exit 1; }; done
[ "$(nbdinfo --size "$(uri alpha)")" -eq $((48 << 20)) ] || { echo "volumes: alpha's export has the wrong size"; exit 1; }
step "exports listed: default, alpha, beta; capacity $((CAP >> 20)) MiB"

# fio writes and verifies alpha while the other volumes change beside it.
fio --name=alpha --ioengine=nbd --uri="$(uri alpha)" --rw=randwrite --bs=4k --size=48M --iodepth=8 \
    --verify=crc32c --verify_fatal=1 --buffer_compress_percentage=50 --refill_buffers \
    --output="$WORK/fio.log" &
FIO=$!
# A client holding beta open (nbdcopy waiting on its input): beta is not deleted under it.
mkfifo "$WORK/fifo"
nbdcopy "$WORK/fifo" "$(uri beta)" &
HOLD=$!
exec 3> "$WORK/fifo"
for _ in $(seq 100); do
  [ "$("$ERAID" volume list --dir "$A" --json | field '[v for v in d["volumes"] if v["name"]=="beta"][0]["connections"]')" -gt 0 ] && break
  sleep 0.1
done
if "$ERAID" volume delete --dir "$A" --name beta 2> "$WORK/err"; then echo "volumes: deleted a volume in use"; exit 1; fi
grep -q "connection" "$WORK/err" || { echo "volumes: refusal did not say why: $(cat "$WORK/err")"; exit 1; }
step "delete of beta while a client has it open: $(cat "$WORK/err")"
head -c 4096 /dev/urandom >&3
exec 3>&-
wait $HOLD
"$ERAID" volume create --dir "$A" --name gamma --size 8M
"$ERAID" volume resize --dir "$A" --name gamma --size 24M
"$ERAID" volume delete --dir "$A" --name beta
head -c $((24 << 20)) /dev/urandom > "$WORK/gamma.img"
nbdcopy "$WORK/gamma.img" "$(uri gamma)"
wait $FIO || { cat "$WORK/fio.log"; echo "volumes: fio on alpha failed"; exit 1; }
grep -q "err= 0" "$WORK/fio.log" || { cat "$WORK/fio.log"; exit 1; }
step "fio verify=crc32c on alpha passed while gamma was created, resized and written and beta deleted"

# After a restart: gamma as written; the default export still answers; beta is gone.
"$ERAID" stop --dir "$A" >/dev/null
"$ERAID" serve --dir "$A" --daemon >/dev/null
nbdcopy "$(uri gamma)" "$WORK/gamma.out"
cmp "$WORK/gamma.img" "$WORK/gamma.out"
fio --name=alpha --ioengine=nbd --uri="$(uri alpha)" --rw=randwrite --bs=4k --size=48M --verify=crc32c \
    --verify_only --verify_fatal=1 --buffer_compress_percentage=50 --refill_buffers --output="$WORK/fio2.log" ||
  { cat "$WORK/fio2.log"; echo "volumes: alpha does not verify after the restart"; exit 1; }
nbdinfo --size "$(uri "")" >/dev/null
if nbdinfo --size "$(uri beta)" >/dev/null 2>&1; then echo "volumes: beta still served"; exit 1; fi
step "after a restart: gamma equal, alpha verifies, default export up, beta gone"

# Thin: two more volumes as big as the array; filling them runs out with ENOSPC.
"$ERAID" volume create --dir "$A" --name t1 --size $((CAP / 4096 * 4096))
"$ERAID" volume create --dir "$A" --name t2 --size $((CAP / 4096 * 4096))
head -c $((CAP / 4096 * 4096)) /dev/urandom > "$WORK/big.img"
# One request in flight: nbdkit 1.32 (Debian 12) can abort on an assertion when a client
# that got an error closes the connection while other requests are still being answered.
nbdcopy --connections=1 --requests=1 "$WORK/big.img" "$(uri t1)" 2> "$WORK/nospace" || true
if nbdcopy --connections=1 --requests=1 "$WORK/big.img" "$(uri t2)" 2>> "$WORK/nospace"; then
  echo "volumes: wrote more than the array holds"; exit 1
fi
grep -qi "no space" "$WORK/nospace" || { cat "$WORK/nospace"; echo "volumes: running out was not ENOSPC"; exit 1; }
VALID=$("$ERAID" status --dir "$A" --json | field 'd["valid_bytes"]')
[ "$VALID" -le "$CAP" ] || { echo "volumes: $VALID valid bytes over a capacity of $CAP"; exit 1; }
step "thin volumes adding up to $(( (48 + 24) + 2 * (CAP >> 20) )) MiB on a $((CAP >> 20)) MiB array: ENOSPC at $((VALID >> 20)) MiB valid"
T1=$("$ERAID" volume list --dir "$A" --json | field '[v for v in d["volumes"] if v["name"]=="t1"][0]["valid_bytes"]')
[ "$T1" -gt $((8 << 20)) ] || { echo "volumes: t1 got only $T1 bytes before the array was full"; exit 1; }
"$ERAID" volume delete --dir "$A" --name t1
head -c $((T1 - (4 << 20))) "$WORK/big.img" > "$WORK/t2.img"
nbdcopy "$WORK/t2.img" "$(uri t2)"
nbdcopy "$(uri t2)" "$WORK/t2.out"
cmp -n $((T1 - (4 << 20))) "$WORK/t2.img" "$WORK/t2.out"
nbdcopy "$(uri gamma)" "$WORK/gamma.out"
cmp "$WORK/gamma.img" "$WORK/gamma.out"
"$ERAID" volume list --dir "$A"
step "deleting t1 gave its $((T1 >> 20)) MiB to t2; gamma intact"
