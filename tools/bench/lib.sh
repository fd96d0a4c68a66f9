# Shared by the benchmark scripts (sourced, not run).

# write_section NAME FILE: replaces docs/benchmarks.md's part between
# <!-- NAME:begin --> and <!-- NAME:end --> with FILE (appending the markers if absent).
write_section() {
  local name=$1 section=$2 doc=$ROOT/docs/benchmarks.md
  grep -q "$name:begin" "$doc" || printf '\n<!-- %s:begin -->\n<!-- %s:end -->\n' "$name" "$name" >> "$doc"
  awk -v sec="$section" -v b="<!-- $name:begin -->" -v e="<!-- $name:end -->" '
    $0 == b {print; while ((getline l < sec) > 0) print l; skip=1; next}
    $0 == e {skip=0}
    !skip {print}' "$doc" > "$section.doc" && mv "$section.doc" "$doc"
  echo "$name: wrote $doc" >&2
}
