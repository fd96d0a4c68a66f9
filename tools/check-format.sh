#!/usr/bin/env bash
# Fails if a C++ source is not formatted as .clang-format says (Google base, 100 columns),
# naming each file and the first lines that differ. `--fix` rewrites them instead.
# The formatter is Debian 12's clang-format (14): another version formats a few
# constructs differently, so the check runs only with that major version.
# Usage: tools/check-format.sh [--fix] [ROOT]   (run by ctest as `format`)
set -euo pipefail
FIX=0
[ "${1:-}" = --fix ] && { FIX=1; shift; }
case "${1:-}" in -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;; esac
ROOT=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$ROOT"
FORMAT=$(command -v clang-format-14 || command -v clang-format || true)
[ -n "$FORMAT" ] || { echo "format: clang-format missing (tools/install-deps.sh installs it)" >&2; exit 1; }
# (Not `--version | grep -q`: under pipefail, grep leaving early can fail the pipe.)
VERSION=$("$FORMAT" --version)
case "$VERSION" in
  *"version 14."*) ;;
  *) echo "format: $VERSION is not clang-format 14, whose output the tree follows" >&2; exit 1 ;;
esac
# The tracked sources (in a tarball without .git: every source under the layers and tests).
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.cc' '*.h')
else
  mapfile -t files < <(find common compress raid log scheduler tools tests -name '*.cc' -o -name '*.h' | sort)
fi
if [ "$FIX" = 1 ]; then
  "$FORMAT" -i "${files[@]}"
  echo "format: ${#files[@]} files formatted"
  exit 0
fi
bad=0
for f in "${files[@]}"; do
  if ! "$FORMAT" "$f" | cmp -s - "$f"; then
    echo "format: $f differs from clang-format's output (tools/check-format.sh --fix):" >&2
    "$FORMAT" "$f" | diff -u "$f" - | sed -n '3,12p' >&2 || true
    bad=$((bad + 1))
  fi
done
[ "$bad" -eq 0 ] || { echo "format: $bad of ${#files[@]} files not formatted" >&2; exit 1; }
echo "format: ${#files[@]} files as clang-format formats them"
