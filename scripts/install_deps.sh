#!/usr/bin/env bash
# Installs the Debian packages mixprec needs to build, test and run its examples, when missing.
# Knows Debian 12 (bookworm: LibTorch 1.13.1, GCC 12, clang 14) and Debian 13 (trixie: LibTorch
# 2.6.0, GCC 14, clang 19); on anything else it stops with a message naming those two.
# Idempotent: packages already installed are left alone and apt is not touched at all.
# On Debian 12 it also puts Highway's pinned release in /var/cache/mixprec/highway-src, once (from
# Debian 13's source package, through a private apt configuration that leaves the machine's alone:
# scripts/lib/highway_source.sh), for the packaging test of the FetchContent fallback, which
# cannot reach GitHub.
#
# Usage: scripts/install_deps.sh [--cuda]
#   --cuda (Debian 13 only; implied where libtorch-cuda-dev is installed): Debian's CUDA build of
#   LibTorch 2.6 instead of the CPU one (libtorch-cuda-dev, python3-torch-cuda, libgloo-cuda-dev;
#   they replace libtorch-dev, python3-torch and libgloo-dev), nvcc 12.4 (nvidia-cuda-toolkit,
#   with g++-13 as its host compiler) and NCCL's headers (libnccl-dev). They are in Debian's
#   contrib and non-free sections, which must be enabled in apt's sources. libtorch-cuda pulls
#   nvidia-cudnn, a downloader that fetches cuDNN from NVIDIA's site once you accept its license
#   (docs/install.md).
set -euo pipefail

codename=$( (. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}") || true)
cuda=0
case ${1:-} in
  "") ;;
  --cuda) cuda=1 ;;
  *) echo "usage: scripts/install_deps.sh [--cuda]" >&2; exit 2 ;;
esac
# A machine that has Debian's CUDA LibTorch keeps it: the CPU packages would replace it.
if dpkg-query -W -f='${Status}' libtorch-cuda-dev 2>/dev/null | grep -q "install ok installed"; then
  cuda=1
fi
COMMON=(
  cmake ninja-build g++ pkg-config git
  libgtest-dev libgmock-dev
  libbenchmark-dev
  libhwy-dev librandom123-dev
  zlib1g-dev
  gnuplot-nox
  python3 iproute2
  libc6-dbg
)
case $codename in
  bookworm)
    if ((cuda)); then
      echo "mixprec: --cuda needs Debian 13 (trixie), whose contrib section has libtorch-cuda-dev;" \
        "Debian 12 has no CUDA LibTorch (docs/install.md)" >&2
      exit 2
    fi
    # debootstrap: the test suite's LibTorch 2.6 stages make Debian 13 roots with it.
    # llvm-NN: llvm-symbolizer for the sanitizers; libc6-dbg (above): names for libc's frames.
    # dpkg-dev: `apt-get source` (scripts/lib/highway_source.sh). python3-venv: the venv of the
    # current-PyTorch stage (scripts/current_torch_stage.sh: the torch wheel from PyPI, over HTTPS:
    # ca-certificates, which also takes in the machine's own CAs of /usr/local/share/ca-certificates).
    PACKAGES=("${COMMON[@]}" libtorch-dev libgloo-dev
      clang libclang-rt-14-dev libomp-14-dev llvm-14 debootstrap dpkg-dev python3-venv
      ca-certificates)
    ;;
  trixie)
    # python3-torch(-cuda): the differential tests against torch.amp.GradScaler("cpu") and torch.load.
    PACKAGES=("${COMMON[@]}" clang libclang-rt-19-dev libomp-19-dev llvm-19)
    if ((cuda)); then
      PACKAGES+=(libtorch-cuda-dev python3-torch-cuda libgloo-cuda-dev nvidia-cuda-toolkit
        libnccl-dev)
    else
      PACKAGES+=(libtorch-dev python3-torch libgloo-dev)
    fi
    ;;
  *)
    echo "mixprec: scripts/install_deps.sh knows Debian 12 (bookworm) and Debian 13 (trixie);" \
      "this is '${codename:-unknown}'. Install LibTorch, GoogleTest, Google Benchmark, Highway," \
      "Gloo and clang yourself (docs/install.md), or use one of those two." >&2
    exit 2
    ;;
esac

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
if ((${#missing[@]})); then
  echo "mixprec: installing ${missing[*]}"
  $SUDO apt-get update -qq
  if ((cuda)) && ! apt-cache show libtorch-cuda-dev >/dev/null 2>&1; then
    echo "mixprec: libtorch-cuda-dev is not in apt's sources: enable Debian's contrib and" \
      "non-free sections (Components: main contrib non-free in" \
      "/etc/apt/sources.list.d/debian.sources)" >&2
    exit 2
  fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if [[ $codename == bookworm ]]; then
  $SUDO bash "$(dirname "$0")/lib/highway_source.sh"  # a no-op when the archive is there
fi
