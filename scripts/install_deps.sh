#!/usr/bin/env bash
# Installs the Debian packages mixprec needs to build, test and run its examples, when missing.
# Idempotent: packages already installed are left alone and apt is not touched at all.
set -euo pipefail

PACKAGES=(
  cmake ninja-build g++ pkg-config
  libtorch-dev
  libgtest-dev libgmock-dev
  libbenchmark-dev
  libhwy-dev
  clang libclang-rt-14-dev libomp-14-dev
  gnuplot-nox
  libgloo-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "mixprec: installing ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
