#!/usr/bin/env bash
# Installs the Debian packages mixprec needs to build, test and run its examples, when missing.
# Knows Debian 12 (bookworm: LibTorch 1.13.1, GCC 12, clang 14) and Debian 13 (trixie: LibTorch
# 2.6.0, GCC 14, clang 19); on anything else it stops with a message naming those two.
# Idempotent: packages already installed are left alone and apt is not touched at all.
set -euo pipefail

codename=$( (. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}") || true)
COMMON=(
  cmake ninja-build g++ pkg-config git
  libtorch-dev
  libgtest-dev libgmock-dev
  libbenchmark-dev
  libhwy-dev
  gnuplot-nox
  libgloo-dev
)
case $codename in
  bookworm)
    # debootstrap: the test suite's LibTorch 2.6 stage makes a Debian 13 root with it.
    PACKAGES=("${COMMON[@]}" clang libclang-rt-14-dev libomp-14-dev debootstrap)
    ;;
  trixie)
    # python3-torch: the differential tests against torch.amp.GradScaler("cpu") and torch.load.
    PACKAGES=("${COMMON[@]}" clang libclang-rt-19-dev libomp-19-dev python3-torch)
    ;;
  *)
    echo "mixprec: scripts/install_deps.sh knows Debian 12 (bookworm) and Debian 13 (trixie);" \
      "this is '${codename:-unknown}'. Install LibTorch, GoogleTest, Google Benchmark, Highway," \
      "Gloo and clang yourself, or use one of those two." >&2
    exit 2
    ;;
esac

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
