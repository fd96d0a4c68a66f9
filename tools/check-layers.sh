#!/usr/bin/env bash
# Fails on an include of a higher layer. The layers, bottom up (DESIGN.md, "Layers and
# folders"): common, compress, raid, log, scheduler, tools. A library folder includes
# only itself and the folders below it; tests/LAYER the same (plus tests/ helpers).
# Usage: tools/check-layers.sh [ROOT]   (run by ctest as `layering`)
set -euo pipefail
ROOT=${1:-$(cd "$(dirname "$0")/.." && pwd)}
case "$ROOT" in -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;; esac
cd "$ROOT"
LAYERS=(common compress raid log scheduler tools)
rank() {
  local i
  for i in "${!LAYERS[@]}"; do [ "${LAYERS[$i]}" = "$1" ] && { echo "$i"; return; }; done
  echo -1
}
bad=0
checked=0
check_dir() {  # check_dir DIR LAYER
  local dir=$1 layer=$2 own file inc target
  own=$(rank "$layer")
  while IFS= read -r file; do
    checked=$((checked + 1))
    while IFS= read -r inc; do
      target=${inc%%/*}
      [ "$target" = tests ] && [ "${dir%%/*}" = tests ] && continue
      local r
      r=$(rank "$target")
      [ "$r" -lt 0 ] && continue  # not a layer (a system or generated header)
      if [ "$r" -gt "$own" ]; then
        echo "layering: $file ($layer) includes \"$inc\" ($target is above it)" >&2
        bad=$((bad + 1))
      fi
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file")
  done < <(find "$dir" -name '*.h' -o -name '*.cc' | sort)
}
for layer in "${LAYERS[@]}"; do
  [ -d "$layer" ] && check_dir "$layer" "$layer"
  [ -d "tests/$layer" ] && check_dir "tests/$layer" "$layer"
done
if [ "$bad" -gt 0 ]; then
  echo "layering: $bad include(s) of a higher layer in $checked files" >&2
  exit 1
fi
echo "layering: $checked files include only their own layer and those below"
