#!/usr/bin/env bash
# Installing like a package (README, "Installing"): `cmake --install` into a scratch
# prefix and a .deb from `cpack -G DEB`, unpacked (not installed) into a scratch root.
# Each must give an `eraid` that finds its plugin, serves an array that a client writes
# and reads back over NBD, and stops it; the nbdkit plugin link must reach the plugin
# (so `nbdkit eraid dir=DIR` works once installed in /usr), and the systemd unit must
# run the installed binary.
# Usage: tests/tools/install.sh BUILD_DIR
set -euo pipefail
BUILD=$(cd "$1" && pwd)
T=$(mktemp -d "${TMPDIR:-/tmp}/eraid-install-test.XXXXXX")
cleanup() {
  for a in "$T"/*/array; do [ -d "$a" ] && "$(dirname "$a")/eraid-bin" stop --dir "$a" >/dev/null 2>&1 || true; done
  rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "install test: $*" >&2; exit 1; }

# check_tree ROOT PREFIX: the installed tree under ROOT (the prefix as the files name it).
check_tree() {
  local root=$1 prefix=$2
  for f in bin/eraid bin/eraid-sim bin/eraid-tracegen lib/eraid/nbdkit-eraid-plugin.so \
           lib/systemd/system/eraid@.service share/doc/eraid/README.md share/doc/eraid/format; do
    [ -e "$root$prefix/$f" ] || fail "$f missing under $root$prefix"
  done
  local link
  link=$(find "$root$prefix" -path '*nbdkit/plugins/nbdkit-eraid-plugin.so' | head -1)
  [ -n "$link" ] || fail "no link in an nbdkit plugin directory under $root$prefix"
  [ -L "$link" ] && cmp -s "$link" "$root$prefix/lib/eraid/nbdkit-eraid-plugin.so" ||
    fail "$link does not reach the plugin"
  grep -q "^ExecStart=$prefix/bin/eraid serve --dir %f$" "$root$prefix/lib/systemd/system/eraid@.service" ||
    fail "the unit does not run $prefix/bin/eraid"
  PLUGIN_LINK=$link
}

# round_trip NAME ERAID PLUGIN: create, serve, write 8 MiB, read it back, stop; then the
# same array served by nbdkit itself through PLUGIN (the plugin directory's link).
round_trip() {
  local w=$T/run-$1 eraid=$2 plugin=$3
  mkdir -p "$w"
  ln -s "$eraid" "$w/eraid-bin"
  "$eraid" create --dir "$w/array" --devices 3 --device-size 64M >/dev/null
  "$eraid" serve --dir "$w/array" --daemon >/dev/null
  head -c 8M /dev/urandom > "$w/data"
  local uri="nbd+unix:///?socket=$w/array/nbd.sock"
  nbdcopy "$w/data" "$uri" || fail "$1: nbdcopy to the served array failed"
  nbdcopy "$uri" "$w/back"  # the whole volume
  cmp -s -n $((8 << 20)) "$w/data" "$w/back" || fail "$1: data read back differs"
  "$eraid" stop --dir "$w/array" >/dev/null
  # nbdkit loading the plugin by the link's path, as `nbdkit eraid` does from its
  # directory, forking into the background as nbdkit does without -f: new data written,
  # flushed and read back, the array closed cleanly, then served again and read.
  head -c 8M /dev/urandom > "$w/data2"
  # (dir= relative: nbdkit changes to / as it forks, before the plugin opens the array.)
  (cd "$w" && nbdkit -U - "$plugin" dir=array --run "nbdcopy '$w/data2' \"\$uri\" && nbdcopy \"\$uri\" '$w/back2'") \
    2> "$w/nbdkit.err" || { cat "$w/nbdkit.err" >&2; fail "$1: nbdkit through the plugin link failed"; }
  ! grep -E "terminate|error|Abort" "$w/nbdkit.err" || fail "$1: nbdkit reported the above"
  cmp -s -n $((8 << 20)) "$w/data2" "$w/back2" || fail "$1: data read through the plugin link differs"
  "$eraid" serve --dir "$w/array" --daemon >/dev/null
  nbdcopy "$uri" "$w/back3"
  "$eraid" stop --dir "$w/array" >/dev/null
  cmp -s -n $((8 << 20)) "$w/data2" "$w/back3" || fail "$1: what nbdkit wrote is not there after its close"
  echo "install test: $1: 8 MiB written and read back through eraid serve and through the plugin link"
}

# 1. cmake --install into a prefix.
cmake --install "$BUILD" --prefix "$T/prefix" >/dev/null
check_tree "" "$T/prefix"
round_trip prefix "$T/prefix/bin/eraid" "$PLUGIN_LINK"

# 2. The Debian package, unpacked into a scratch root (prefix /usr inside it).
(cd "$T" && cpack -G DEB --config "$BUILD/CPackConfig.cmake" -B "$T/pkg" >/dev/null) || fail "cpack -G DEB failed"
deb=$(ls "$T"/pkg/eraid_*.deb 2>/dev/null | head -1)
[ -n "$deb" ] || fail "cpack made no eraid_*.deb"
depends=$(dpkg-deb -f "$deb" Depends)
for d in nbdkit fio libzstd1 liburing2 libisal2; do
  [[ $depends == *"$d"* ]] || fail "the package's Depends lacks $d: $depends"
done
dpkg-deb -x "$deb" "$T/root"
check_tree "$T/root" /usr
round_trip deb "$T/root/usr/bin/eraid" "$PLUGIN_LINK"
echo "install test: $(basename "$deb") ($(du -k "$deb" | cut -f1) KiB), Depends: $depends"
