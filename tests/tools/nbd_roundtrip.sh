#!/usr/bin/env bash
# End to end through real NBD with the user's commands: `eraid create`, `eraid serve
# --daemon`, nbdcopy of a random image into the volume and back out (cmp), then `eraid
# stop`, a new server (its CRC cache a few segments' worth), and the image read back
# again. The image is 256 MiB less 1,535 bytes: not a multiple of 4 KiB, so its last
# request is unaligned, as a tar file's often is. Then a trim of the first quarter
# through fio's nbd engine: block status (nbdinfo --map) must call it a hole, the
# volume's valid bytes must fall, and it must read back as zeros, also after a restart. `eraid status` along the way: no WA figures on a
# fresh array, per-interval figures while the copy runs, lifetime figures after the
# restart. Usage: nbd_roundtrip.sh BUILD_DIR [MiB]
set -euo pipefail
BUILD=$1
MIB=${2:-256}
for tool in nbdkit nbdcopy nbdinfo fio; do
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
# Honest statistics: a fresh array has no WA to show (null, not a ratio of nothing).
"$ERAID" status --dir "$WORK/array" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert all(v is None for v in d["wa"].values()), d["wa"]
assert d["segments"]["raid5"] + d["segments"]["raid10"] == 0 < d["segments"]["open"], d["segments"]'
# Zeroing is an unmap, so fast zero is advertised, and block status answers from the map.
nbdinfo "$URI" > "$WORK/info"
grep -q "can_fast_zero: true" "$WORK/info" && grep -q "base:allocation" "$WORK/info" ||
  { cat "$WORK/info"; echo "nbd_roundtrip: fast zero or block status not advertised"; exit 1; }
"$ERAID" status --dir "$WORK/array" --interval 1 --count 3 --json > "$WORK/interval" &
STATUS_PID=$!
nbdcopy "$WORK/img" "$URI"
wait $STATUS_PID
python3 - "$WORK/interval" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert len(lines) == 3, lines
# The copy writes during the interval: some interval wrote more than 1 MiB and has a log WA.
busy = [l for l in lines if l["user_bytes_per_sec"] > 2**20]
assert busy and all(l["wa"]["log"] is not None and l["wa"]["log"] >= 1.0 for l in busy), lines
assert all(any(v["name"] == "default" and v["write_iops"] > 0 for v in l["volumes"]) for l in busy), lines
print("status --interval:", lines)
PY
nbdcopy "$URI" "$WORK/out"
cmp -n $BYTES "$WORK/img" "$WORK/out"
valid() { "$ERAID" status --dir "$WORK/array" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["valid_bytes"])'; }
BEFORE=$(valid)
QUARTER=$(((MIB << 20) / 4))
fio --name=trim --ioengine=nbd --uri="$URI" --rw=trim --bs=1M --size=$QUARTER --output=/dev/null
AFTER=$(valid)
[ "$AFTER" -le $((BEFORE - QUARTER)) ] || { echo "nbd_roundtrip: valid bytes $BEFORE -> $AFTER after trimming $QUARTER"; exit 1; }
nbdinfo --map "$URI" > "$WORK/map"
head -1 "$WORK/map" | awk -v q=$QUARTER '$1 != 0 || $2 != q || $3 != 3 { print "nbd_roundtrip: block status does not start with a hole of " q ": " $0; exit 1 }'
head -c $QUARTER /dev/zero > "$WORK/zeros"
dd if="$WORK/img" of="$WORK/zeros" bs=1M skip=$((QUARTER >> 20)) seek=$((QUARTER >> 20)) status=none
cp "$WORK/zeros" "$WORK/img"
nbdcopy "$URI" "$WORK/out"
cmp -n $BYTES "$WORK/img" "$WORK/out"
"$ERAID" stop --dir "$WORK/array"
[ ! -e "$WORK/array/nbd.sock" ] || { echo "nbd_roundtrip: the socket was left behind"; exit 1; }
# Served again with a CRC cache of a few segments' CRCs: the image reads back whole and
# verified, most segments' CRCs read back from their summaries.
"$ERAID" serve --dir "$WORK/array" --daemon --crc-cache 16K
nbdcopy "$URI" "$WORK/out"
cmp -n $BYTES "$WORK/img" "$WORK/out"
# Lifetime statistics survive the restart: the copy's writes are still counted (and so
# WA is given), while since this open nothing was written (no figure).
"$ERAID" status --dir "$WORK/array" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
c = d["counters"]
assert c["user_written_bytes"] >= '$BYTES', c
assert d["wa"]["log"] is not None and d["wa"]["raid"] is not None, d["wa"]
assert d["wa_since_open"]["log"] is None, d["wa_since_open"]
assert c["opens"] >= 3 and "note" not in c, c
# The open, timed by stage: the stages add up to (at most) the whole.
o = d["open"]
assert o["seconds"] > 0 and o["drives_seconds"] > 0 and o["array_seconds"] > 0, o
assert o["drives_seconds"] + o["array_seconds"] + o["log_seconds"] <= o["seconds"] * 1.001 + 1e-5, o
assert o["crashed_drives"] == 0, o  # stopped cleanly: no crash recovery
k = d["crc_cache"]
assert k["loads"] > 10 and k["evictions"] > 10, k
assert k["bytes"] <= 16384 + 8 * 3072, k  # the bound, and the open segments
m = d["memory"]
assert m["crc_cache_bytes"] == k["bytes"], m
# 64 Ki blocks written, a quarter trimmed: the log maps each of the 48 Ki left (4 bytes
# and more), the drives map each in 6-byte entries: twice under RAID10, once plus a third
# of a parity block under RAID5 over 3+1. How many of the trimmed quarter the drives
# still map depends on which segments the collector has reached, so the lower bound
# counts only the blocks left, all as RAID5.
assert 4 * 49152 <= m["log_bytes"] < 64 * 65536 and m["array_bytes"] > 0, m
assert 8 * 49152 <= m["drive_map_bytes"] < 64 * 65536, m'
# The server asks for huge pages for its tables (eraid serve sets glibc's tunable).
PID=$(pgrep -f "nbdkit.*dir=$WORK/array" | head -1)
tr '\0' '\n' < /proc/$PID/environ | grep -q '^GLIBC_TUNABLES=.*glibc.malloc.hugetlb=1' ||
  { echo "nbd_roundtrip: the server runs without glibc.malloc.hugetlb=1"; exit 1; }
grep -q "eraid: opened .* in .* s after a clean stop (drives" "$WORK/array/serve.log" ||
  { cat "$WORK/array/serve.log"; echo "nbd_roundtrip: the open time is not in the log"; exit 1; }
nbdcopy "$URI" "$WORK/out2"
cmp -n $BYTES "$WORK/img" "$WORK/out2"
"$ERAID" status --dir "$WORK/array"
"$ERAID" stop --dir "$WORK/array"
# A damaged counters file is not the data: the array opens, and status says the counts
# start again.
sed -i 's/^opens=/opens=x/' "$WORK/array/eraid.stats"
"$ERAID" status --dir "$WORK/array" | grep -q "counting again" || { echo "nbd_roundtrip: a damaged eraid.stats went unmentioned"; exit 1; }
echo "nbd_roundtrip: $BYTES bytes in and out over NBD, a quarter trimmed ($BEFORE -> $AFTER valid bytes), equal before and after a restart"
