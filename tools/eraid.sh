#!/usr/bin/env bash
# One entry point for a fresh machine: installs what is missing, builds, and runs.
#   tools/eraid.sh demo      the main job (see README)
#   tools/eraid.sh test      the whole test suite: a release build, then ASan+UBSan
#   tools/eraid.sh build     just build (build/)
# Options for test: --no-sanitize (skip the ASan+UBSan pass), -j N.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
JOBS=$(nproc)

cmd=${1:-}
shift || true
sanitize=1
while [ $# -gt 0 ]; do
  case "$1" in
    --no-sanitize) sanitize=0 ;;
    -j) JOBS=$2; shift ;;
    *) echo "eraid.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

build() {  # build DIR [cmake args...]
  local dir=$1; shift
  cmake -S "$ROOT" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
  cmake --build "$dir" -j "$JOBS"
}

case "$cmd" in
  build)
    tools/install-deps.sh
    build build
    ;;
  test)
    tools/install-deps.sh
    build build
    (cd build && ctest --output-on-failure -j "$JOBS")
    if [ "$sanitize" = 1 ]; then
      echo "== the same suite under ASan+UBSan =="
      build build-asan -DERAID_SANITIZE=address -DERAID_BUILD_BENCH=OFF
      (cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
         ctest --output-on-failure -j "$JOBS")
    fi
    ;;
  demo)
    tools/install-deps.sh
    build build
    build/tools/eraid demo
    ;;
  *)
    echo "usage: tools/eraid.sh demo|test|build [--no-sanitize] [-j N]" >&2
    exit 2
    ;;
esac
