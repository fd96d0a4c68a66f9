#!/usr/bin/env bash
# Fails on a function of more than 100 lines in the libraries or tools (issue 55: long
# functions are cut into steps with names). A function here is a definition that starts
# in column 0 and ends at the next `}` in column 0, as clang-format lays them out (members
# defined inside a class body are not measured: they are short by habit). Lines counted:
# the signature's first line to the closing brace.
# Usage: tools/check-functions.sh [ROOT]   (run by ctest as `function_length`)
set -euo pipefail
ROOT=${1:-$(cd "$(dirname "$0")/.." && pwd)}
case "$ROOT" in -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;; esac
cd "$ROOT"
exec python3 - "$@" <<'PY'
import os, re, sys
LIMIT = 100
SKIP = ("//", "#", "}", "namespace", "using", "static_assert", "template", "class ", "struct ",
        "enum ", "extern ", "typedef ")
long = {}
for root in ("common", "compress", "raid", "log", "scheduler", "tools"):
    for dirpath, _, files in os.walk(root):
        for f in sorted(files):
            if not f.endswith((".cc", ".h")):
                continue
            path = os.path.join(dirpath, f)
            lines = open(path, encoding="utf-8").read().split("\n")
            i = 0
            while i < len(lines):
                line = lines[i]
                if line and not line[0].isspace() and not line.startswith(SKIP) and "(" in line:
                    j = i
                    while j < len(lines) and not lines[j].rstrip().endswith(("{", ";")):
                        j += 1
                    if j < len(lines) and lines[j].rstrip().endswith("{"):
                        k = j + 1
                        while k < len(lines) and not lines[k].startswith("}"):
                            k += 1
                        m = re.search(r"([A-Za-z_][\w:]*)\s*\(", line)
                        name = m.group(1) if m else line.strip()
                        if k - i + 1 > LIMIT:
                            long[(path, name)] = (k - i + 1, i + 1)
                        i = k
                i += 1
for (path, name), (n, at) in sorted(long.items()):
    print(f"function_length: {path}:{at} {name} is {n} lines (at most {LIMIT}: cut it into steps with names)", file=sys.stderr)
print(f"function_length: {len(long)} functions over {LIMIT} lines")
sys.exit(1 if long else 0)
PY
