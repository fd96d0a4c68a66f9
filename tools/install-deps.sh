#!/usr/bin/env bash
# Installs, from Debian's packages, exactly the build and test dependencies of eraid that
# are missing. Safe to run again: it does nothing when everything is present.
#   tools/install-deps.sh            build + test dependencies
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config
  liburing-dev libisal-dev libzstd-dev libboost-program-options-dev nlohmann-json3-dev
  libgtest-dev libbenchmark-dev
  fio nbdkit nbdkit-plugin-dev libnbd-bin libnbd-dev
  gnuplot-nox bc
  clang libclang-rt-14-dev clang-format
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
