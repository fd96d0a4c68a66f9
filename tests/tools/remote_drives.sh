#!/usr/bin/env bash
# Drives on other hosts, end to end with the user's commands (issue 18). Each drive's
# flash is an nbdkit `file` export on a "drive host": a network namespace made here, joined
# to this one by a veth pair (10.201.K.2, reached from 10.201.K.1), or — where namespaces
# cannot be made — an nbdkit on its own loopback port. Five hosts: four drives and a
# spare. `eraid create --device nbd://...` over the four, served, its I/O timeout set to 2 s
# live (`eraid set`); then,
# one fault at a time, each under fio random writes (rate-limited, so the fault lands
# mid-run) with verify=crc32c:
#   1. a drive host hangs (SIGSTOP): writes go on within the deadline, the drive is
#      failed with a timeout; `replace --with` the spare's URI rebuilds onto another host;
#   2. (namespaces only) the link to a drive host is cut (ip link set down): the same;
#      the link comes back and the drive is rebuilt onto that host's export again;
#   3. a drive host is killed (SIGKILL): the drive fails at once (no deadline to wait);
#   4. a drive failed when the server starts is refused by re-add (its changes are
#      unknown) and rebuilt in full by replace; so is one whose host is down when the
#      server starts (the array opens without it, degraded);
#   5. with the volume written full, a drive host hangs while 5% of the volume is
#      written: `re-add` is refused while the host holds writes it may still carry out;
#      it resumes (what it had queued lands late, and the old connection ends): `re-add`
#      checks it is the drive that left and rebuilds only the segments it missed — a
#      fraction of a full rebuild. (Last: scrubs of a full volume over NBD take seconds.)
# After each fault fio verifies every block it wrote (degraded), after each rebuild
# `scrub` reports 0 mismatches and fio verifies again. No request waits more than the
# deadline plus 3 s (fio's maximum completion latency). `status --json` shows each remote
# drive's link: its URI, state and latency.
# Usage: remote_drives.sh BUILD_DIR
set -euo pipefail
BUILD=$1
for tool in nbdkit fio python3; do
  command -v $tool >/dev/null || { echo "remote_drives: $tool missing (tools/install-deps.sh installs it)"; exit 1; }
done
ERAID=$BUILD/tools/eraid
# eraid serve --daemon, with the server's log shown if it does not start.
serve() { "$ERAID" serve --dir "$A" --daemon || { tail -40 "$A/serve.log" >&2; return 1; }; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/eraid-remote.XXXXXX")
TAG=$$
TIMEOUT_S=2
HOSTS=5
declare -a PIDS URIS
NETNS=0
cleanup() {
  "$ERAID" stop --dir "$WORK/array" >/dev/null 2>&1 || true
  # Under ASan, a stopped server's nbdkit can hang in exit() after the array is closed
  # (libp11-kit's destructor waiting on glibc's locale lock), the earlier restarts' too:
  # nothing of the array is left in them, so any that remain are killed.
  pkill -KILL -f -- "dir=$WORK/array" 2>/dev/null || true
  pkill -KILL -f -- "serve --dir $WORK/array" 2>/dev/null || true
  # SIGKILL: a host whose link was cut still holds the dead connection, and nbdkit
  # waits for its connections before it exits on SIGTERM.
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -KILL "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ $NETNS = 1 ]; then
    for k in $(seq 0 $((HOSTS - 1))); do
      ip netns del "eraid-$TAG-$k" 2>/dev/null || true
      ip link del "er$TAG-$k" 2>/dev/null || true
    done
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

# Drive hosts: namespaces if this machine lets us make them.
if ip netns add "eraid-$TAG-probe" 2>/dev/null; then
  ip netns del "eraid-$TAG-probe"
  NETNS=1
fi
start_host() {  # K: serve WORK/hostK/flash (112 MiB, sparse) as drive host K
  local k=$1
  mkdir -p "$WORK/host$k"
  [ -e "$WORK/host$k/flash" ] || truncate -s 112M "$WORK/host$k/flash"
  if [ $NETNS = 1 ]; then
    ip netns exec "eraid-$TAG-$k" nbdkit -f -p 10809 -i "10.201.$k.2" file "$WORK/host$k/flash" \
      2>>"$WORK/host$k/log" &
    PIDS[$k]=$!
    URIS[$k]="nbd://10.201.$k.2:10809/"
  else
    local port=$((20000 + (TAG % 20000) + k))
    nbdkit -f -p $port -i 127.0.0.1 file "$WORK/host$k/flash" 2>>"$WORK/host$k/log" &
    PIDS[$k]=$!
    URIS[$k]="nbd://127.0.0.1:$port/"
  fi
  for _ in $(seq 100); do nbdinfo --size "${URIS[$k]}" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "remote_drives: drive host $k did not come up"; cat "$WORK/host$k/log"; exit 1
}
# resume_host K: SIGCONT. nbdkit 1.32 may abort (`raw_send_socket: Assertion sock >= 0`,
# fixed in 1.33.10) answering on a connection whose client has gone; like a host that
# reboots, it is then started again on the same file, which keeps what it had written.
resume_host() {
  local k=$1
  kill -CONT "${PIDS[$k]}"
  sleep 1
  if ! kill -0 "${PIDS[$k]}" 2>/dev/null; then
    echo "remote_drives: drive host $k's nbdkit died on resuming (nbdkit 1.32's assertion); started again"
    start_host "$k"
  fi
}
for k in $(seq 0 $((HOSTS - 1))); do
  if [ $NETNS = 1 ]; then
    ns="eraid-$TAG-$k"
    ip netns add "$ns"
    ip link add "er$TAG-$k" type veth peer name eth0 netns "$ns"
    ip addr add "10.201.$k.1/24" dev "er$TAG-$k"
    ip link set "er$TAG-$k" up
    ip netns exec "$ns" ip addr add "10.201.$k.2/24" dev eth0
    ip netns exec "$ns" ip link set eth0 up
    ip netns exec "$ns" ip link set lo up
  fi
  start_host $k
done
echo "remote_drives: drive hosts in $([ $NETNS = 1 ] && echo 'network namespaces (veth)' || echo 'loopback ports: namespaces unavailable')"

A=$WORK/array
"$ERAID" create --dir "$A" --io-timeout 30 \
  --device "${URIS[0]}" --device "${URIS[1]}" --device "${URIS[2]}" --device "${URIS[3]}"
serve
URI="nbd+unix:///?socket=$A/nbd.sock"
# The timeout changed while served: every connection takes it at once (the hang below
# fails at 2000 ms, not 30 s), and the manifest keeps it for the next start.
"$ERAID" set --dir "$A" --io-timeout $TIMEOUT_S
"$ERAID" status --dir "$A" --json | python3 -c 'import json, sys; t = json.load(sys.stdin)["io_timeout_ms"]; assert t == int(sys.argv[1]) * 1000, t' $TIMEOUT_S
grep -q "^io_timeout_ms=$((TIMEOUT_S * 1000))\$" "$A/eraid.conf" || { echo "remote_drives: the manifest kept no new timeout"; cat "$A/eraid.conf"; exit 1; }
SPARE=4

status_check() {  # DEVICE EXPECTED_STATE [LINK_STATE [ERROR_WORD]]
  "$ERAID" status --dir "$A" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
dev, want = int(sys.argv[1]), sys.argv[2]
link_state = sys.argv[3] if len(sys.argv) > 3 else None
word = sys.argv[4] if len(sys.argv) > 4 else None
x = d["devices"][dev]
assert x["state"] == want, (dev, x)
if link_state:
    l = x["link"]
    assert l["state"] == link_state, (dev, l)
    assert l["uri"].startswith("nbd://"), l
    if word: assert word in l["error"], (word, l)
    if link_state == "connected": assert l["requests"] > 0 and l["latency_p99_us"] >= l["latency_p50_us"] > 0, l
print("device", dev, x["state"], x.get("link"))' "$@"
}

# fio over the volume; FAULT (a command) runs 1.5 s in. Writes 32 MiB at 3000 IOPS (~2.7 s),
# then reads every block back and checks it. Fails if any request took longer than the
# deadline plus 3 s.
fio_with_fault() {
  local name=$1 fault=$2
  fio --name="$name" --ioengine=nbd --uri="$URI" --rw=randwrite --bs=4k --iodepth=16 --size=32M \
    --rate_iops=3000 --verify=crc32c --do_verify=1 --verify_state_save=0 \
    --buffer_compress_percentage=50 --refill_buffers --randseed=$RANDOM \
    --output-format=json --output="$WORK/$name.json" &
  local fio_pid=$!
  sleep 1.5
  eval "$fault"
  wait $fio_pid || { cat "$WORK/$name.json"; echo "remote_drives: fio failed ($name)"; exit 1; }
  python3 - "$WORK/$name.json" $TIMEOUT_S <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
limit = (float(sys.argv[2]) + 3) * 1e9
w, r = j["write"], j["read"]
assert j["error"] == 0, j["error"]
assert w["io_bytes"] == 32 << 20 and r["io_bytes"] == 32 << 20, (w["io_bytes"], r["io_bytes"])
assert w["clat_ns"]["max"] < limit, ("a write waited", w["clat_ns"]["max"] / 1e9, "s")
print(f"{j['jobname']}: writes max {w['clat_ns']['max'] / 1e6:.0f} ms, p99.9 {w['clat_ns']['percentile']['99.900000'] / 1e6:.1f} ms; every block verified")
PY
}
verify_again() {  # [--verify_only]: check what the last call wrote
  fio --name=verify --ioengine=nbd --uri="$URI" --rw=randwrite --bs=4k --iodepth=16 --size=32M \
    --verify=crc32c --do_verify=1 --verify_state_save=0 --buffer_compress_percentage=50 --refill_buffers \
    --randseed=42 --output=/dev/null "$@" || { echo "remote_drives: fio verify failed $*"; exit 1; }
}
rebuild_onto() {  # DEVICE HOST
  # Onto the failed drive's own export, replace first waits for the old connection's
  # abandoned writes (up to the timeout): after a cut link, TCP delivers its backlog at its
  # next retransmission, which can be seconds off. A user retries, as the message says.
  local try
  for try in $(seq 10); do
    "$ERAID" replace --dir "$A" --device "$1" --with "${URIS[$2]}" 2>"$WORK/err" && break
    grep -q "cannot be rebuilt onto its own export yet" "$WORK/err" && [ $try -lt 10 ] || { cat "$WORK/err"; exit 1; }
    echo "replace: $(cat "$WORK/err") — again"
  done
  "$ERAID" scrub --dir "$A" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["mismatches"] == 0 and d["unrepairable"] == 0, d
print("scrub:", d)'
  status_check "$1" ok connected
  verify_again
}

for d in 0 1 2 3; do status_check $d ok connected; done

echo "== 1. drive host 1 hangs (SIGSTOP)"
fio_with_fault hang "kill -STOP ${PIDS[1]}"
status_check 1 failed failed "within $((TIMEOUT_S * 1000)) ms"
# The verify's reads of flushed records went on the healthy drives' read lanes (nbdkit's
# file plugin offers multi-conn).
"$ERAID" status --dir "$A" --json | python3 -c '
import json, sys
links = [x["link"] for x in json.load(sys.stdin)["devices"] if x["state"] == "ok"]
assert all(l["lanes"] <= 8 for l in links) and sum(l["lane_reads"] for l in links) > 0, links
print("lane reads:", [l["lane_reads"] for l in links])'
resume_host 1
rebuild_onto 1 $SPARE   # device 1 now lives on host 4; host 1 is free
SPARE=1

if [ $NETNS = 1 ]; then
  echo "== 2. the link to drive host 2 is cut (ip link set down)"
  fio_with_fault link "ip link set er$TAG-2 down"
  status_check 2 failed failed "within"
  ip link set "er$TAG-2" up
  rebuild_onto 2 2      # the host is back: the drive is rebuilt onto its own export
fi

echo "== 3. drive host 3 is killed (SIGKILL)"
fio_with_fault kill "kill -KILL ${PIDS[3]}"
status_check 3 failed failed
rebuild_onto 3 $SPARE

echo "== 4. a drive failed when the server starts; a drive host down when it starts"
# A drive failed when the server starts is not re-added (what it lacks is not known):
# replace rebuilds it in full, onto its own export again.
"$ERAID" fail --dir "$A" --device 2
"$ERAID" stop --dir "$A"
serve
"$ERAID" re-add --dir "$A" --device 2 2>"$WORK/err" && { echo "remote_drives: re-add after a restart accepted"; exit 1; }
grep -q "replace" "$WORK/err" || { cat "$WORK/err"; exit 1; }
rebuild_onto 2 2

# A drive host that is down when the server starts: the array opens without it, degraded,
# serves every block, and replace brings the drive back once the host is up again.
verify_again
"$ERAID" stop --dir "$A"
kill -KILL "${PIDS[0]}"
serve
status_check 0 failed unreachable
verify_again --verify_only
start_host 0
rebuild_onto 0 0

echo "== 5. drive host 0 hangs, misses writes, resumes: re-add resyncs only what changed"
# The volume written full first, so a full rebuild has everything to copy.
fio --name=fill --ioengine=nbd --uri="$URI" --rw=write --bs=1M --iodepth=4 --size=176M \
  --buffer_compress_percentage=50 --refill_buffers --output=/dev/null
"$ERAID" scrub --dir "$A" >/dev/null
# Late writes: the stopped host still holds writes of the old connection, which it will
# carry out when it resumes. re-add waits for that connection to end (up to the 2 s
# timeout) and refuses, rather than resync what they could then overwrite. Whether a write
# (rather than only a flush or a read) is in flight at the deadline depends on where the
# array was when the host stopped; an outage that left none is checked for what it must
# do then (re-add at once, nothing can land late) and the outage is tried again.
for attempt in 1 2 3 4; do
  kill -STOP "${PIDS[0]}"
  fio --name=outage --ioengine=nbd --uri="$URI" --rw=randwrite --bs=4k --iodepth=16 --size=176M --io_size=11M \
    --buffer_compress_percentage=50 --refill_buffers --output=/dev/null
  status_check 0 failed failed "within"
  abandoned=$("$ERAID" status --dir "$A" --json |
    python3 -c 'import json, sys; l = json.load(sys.stdin)["devices"][0]["link"]; print(l["abandoned_writes"] if l["draining"] else 0)')
  echo "drive 0's link (outage $attempt): $abandoned abandoned writes may still land"
  [ "$abandoned" -gt 0 ] && break
  [ $attempt -lt 4 ] || { echo "remote_drives: no write was in flight at the deadline in $attempt outages"; exit 1; }
  resume_host 0
  "$ERAID" re-add --dir "$A" --device 0 >/dev/null  # nothing was in flight: accepted at once
  status_check 0 ok connected
done
if "$ERAID" re-add --dir "$A" --device 0 2>"$WORK/err"; then
  echo "remote_drives: re-add accepted while the host was stopped with writes queued"; exit 1
fi
grep -q "cannot be re-added yet.*writes were in flight" "$WORK/err" || { cat "$WORK/err"; exit 1; }
resume_host 0   # what it had queued from the old connection lands now, and the connection ends
"$ERAID" re-add --dir "$A" --device 0 --json > "$WORK/readd.json"
python3 - "$WORK/readd.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
frac = r["resynced_bytes"] / r["total_bytes"]
print(f"re-add: {r['resynced_bytes'] >> 20} MiB of {r['total_bytes'] >> 20} MiB ({frac:.1%}), "
      f"{r['segments_resynced']} of {r['segments_total']} segments, {r['seconds']:.2f} s")
assert 0 < r["resynced_bytes"] and frac < 0.3, r
PY
status_check 0 ok connected
"$ERAID" scrub --dir "$A" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["mismatches"] == 0 and d["unrepairable"] == 0, d
print("scrub after re-add:", d["blocks_checked"], "blocks, 0 mismatches")'
verify_again
# A drive that is healthy is not re-added; nor is one failed before the server started.
"$ERAID" re-add --dir "$A" --device 0 2>"$WORK/err" && { echo "remote_drives: re-add of a healthy drive accepted"; exit 1; }
grep -q "not failed" "$WORK/err" || { cat "$WORK/err"; exit 1; }

# A restart reconnects to every host, and everything still verifies.
"$ERAID" stop --dir "$A"
serve
verify_again --verify_only
for d in 0 1 2 3; do status_check $d ok connected; done
echo "remote_drives: OK"
