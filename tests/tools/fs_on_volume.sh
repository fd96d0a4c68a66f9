#!/usr/bin/env bash
# A file system on an eraid volume, as a user would put one there: `eraid serve`, nbdfuse
# exposing the export as a file, a loop device over it with the kernel's default 512-byte
# sectors (requests of any size and alignment reach the server), mkfs.ext4 (which
# discards the whole device), a tree of files of odd sizes written and checksummed, half
# of it deleted and fstrim-ed, more written after the trim, a drive failed, fsck clean,
# every remaining file checked; then a rebuild, a scrub, and the files checked again after
# a remount. Needs root (loop devices, mounts) and /dev/fuse.
# Usage: fs_on_volume.sh BUILD_DIR [SEED]
set -euo pipefail
BUILD=$1
SEED=${2:-${ERAID_SEED:-$RANDOM}}
echo "fs_on_volume: seed $SEED (fs_on_volume.sh BUILD_DIR SEED replays)"
ERAID=$BUILD/tools/eraid
for tool in nbdkit nbdfuse mkfs.ext4 fsck.ext4 losetup fstrim sha256sum blockdev; do
  command -v $tool >/dev/null || { echo "fs_on_volume: $tool missing (tools/install-deps.sh installs it)" >&2; exit 1; }
done
[ "$(id -u)" -eq 0 ] || { echo "fs_on_volume: needs root (loop devices and mounts)" >&2; exit 1; }
[ -c /dev/fuse ] || { echo "fs_on_volume: no /dev/fuse" >&2; exit 1; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/eraid-fs.XXXXXX")
A=$WORK/array FUSE=$WORK/fuse MNT=$WORK/mnt LOOP="" NBDFUSE=""
mkdir -p "$FUSE" "$MNT"
cleanup() {
  local rc=$?
  set +e  # undo as much as can be undone, and keep the test's own exit status
  mountpoint -q "$MNT" && umount "$MNT"
  [ -n "$LOOP" ] && losetup -d "$LOOP" 2>/dev/null
  mountpoint -q "$FUSE" && umount "$FUSE"
  [ -n "$NBDFUSE" ] && kill "$NBDFUSE" 2>/dev/null
  "$ERAID" stop --dir "$A" >/dev/null 2>&1
  rm -rf "$WORK"
  exit $rc
}
trap cleanup EXIT
step() { echo "fs_on_volume: $*"; }

"$ERAID" create --dir "$A" --devices 4 --device-size 128M >/dev/null
"$ERAID" serve --dir "$A" --daemon >/dev/null
nbdfuse "$FUSE" "nbd+unix:///?socket=$A/nbd.sock" &
NBDFUSE=$!
for _ in $(seq 100); do [ -e "$FUSE/nbd" ] && break; sleep 0.1; done
[ -e "$FUSE/nbd" ] || { echo "fs_on_volume: nbdfuse did not come up" >&2; exit 1; }
LOOP=$(losetup -f --show "$FUSE/nbd")
step "$LOOP over nbdfuse, $(cat "/sys/block/$(basename "$LOOP")/queue/logical_block_size")-byte sectors"
valid_mib() { "$ERAID" status --dir "$A" --json | grep -o '"valid_bytes":[0-9]*' | head -1 | cut -d: -f2 | awk '{ print int($1 / 1048576) }'; }
mkfs.ext4 -q "$LOOP"
# mkfs discards the whole device first: trims unmap, so the volume holds only what mkfs
# wrote afterwards (a few MiB of metadata), not the whole device as zeros.
AFTER_MKFS=$(valid_mib)
CAP_MIB=$(($(blockdev --getsize64 "$LOOP") >> 20))
[ "$AFTER_MKFS" -lt $((CAP_MIB / 4)) ] || { echo "fs_on_volume: $AFTER_MKFS of $CAP_MIB MiB valid after mkfs: its discard freed nothing" >&2; exit 1; }
step "mkfs.ext4: $AFTER_MKFS of $CAP_MIB MiB valid in the volume after its discard"
mount "$LOOP" "$MNT"

# write_tree DIR N: N files of odd sizes (1 byte .. 300 KB) in 20 directories.
write_tree() {
  local dir=$1 n=$2 i
  mkdir -p "$MNT/$dir"
  for ((i = 0; i < n; i++)); do
    mkdir -p "$MNT/$dir/d$((i % 20))"
    head -c $((1 + (i * 7919 + SEED * 104729) % 300000)) /dev/urandom > "$MNT/$dir/d$((i % 20))/f$i"
  done
}
# Reads must reach the server, not the loop device's or the FUSE file's page cache.
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
reconstructions() { "$ERAID" status --dir "$A" --json | grep -o '"reconstructions":[0-9]*' | cut -d: -f2; }
checksums() { (cd "$MNT" && find . -type f ! -path './lost+found/*' -print0 | sort -z | xargs -0 sha256sum); }
write_tree a 400
write_tree b 400
sync
step "$(du -sh "$MNT" | cut -f1) written"
BEFORE_TRIM=$(valid_mib)
rm -rf "$MNT/b"
sync
step "fstrim: $(fstrim -v "$MNT")"
AFTER_TRIM=$(valid_mib)
# Half the files' blocks were deleted and trimmed: the volume's valid bytes fall by a
# good part of it (ext4 keeps its metadata and journal).
[ "$AFTER_TRIM" -lt $((BEFORE_TRIM * 3 / 4)) ] || { echo "fs_on_volume: valid $BEFORE_TRIM -> $AFTER_TRIM MiB: fstrim freed too little" >&2; exit 1; }
step "valid bytes in the volume: $BEFORE_TRIM -> $AFTER_TRIM MiB after deleting half and fstrim"
write_tree c 200
sync
checksums > "$WORK/sums"
step "$(wc -l < "$WORK/sums") files checksummed"
"$ERAID" fail --dir "$A" --device 2 >/dev/null
umount "$MNT"
drop_caches
fsck.ext4 -fn "$LOOP" > "$WORK/fsck.log" 2>&1 || { cat "$WORK/fsck.log"; echo "fs_on_volume: fsck found errors, degraded" >&2; exit 1; }
step "degraded: fsck clean"
mount "$LOOP" "$MNT"
(cd "$MNT" && sha256sum -c --quiet "$WORK/sums") || { echo "fs_on_volume: files differ, degraded" >&2; exit 1; }
[ "$(reconstructions)" -gt 0 ] || { echo "fs_on_volume: no read was reconstructed: the checks read a cache" >&2; exit 1; }
step "degraded: every file matches ($(reconstructions) blocks reconstructed from redundancy)"
umount "$MNT"
"$ERAID" replace --dir "$A" --device 2 >/dev/null 2>&1
"$ERAID" scrub --dir "$A" --json | grep -q '"mismatches":0' || { echo "fs_on_volume: scrub mismatches" >&2; exit 1; }
drop_caches
fsck.ext4 -fn "$LOOP" > "$WORK/fsck.log" 2>&1 || { cat "$WORK/fsck.log"; echo "fs_on_volume: fsck found errors, rebuilt" >&2; exit 1; }
mount "$LOOP" "$MNT"
(cd "$MNT" && sha256sum -c --quiet "$WORK/sums") || { echo "fs_on_volume: files differ, rebuilt" >&2; exit 1; }
echo "fs_on_volume: ext4 over 512-byte sectors: mkfs, trim, a failed drive, fsck, rebuild and scrub, every file intact"
