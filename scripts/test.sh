#!/usr/bin/env bash
# The whole test suite: installs missing packages, then
#   1. the reliability stage (scripts/sanitize.sh: ASan+UBSan, TSan, bounded libFuzzer runs),
#   2. the main build (with the CUDA kernels when nvcc is there) and every CTest test.
# Usage: scripts/test.sh   (build folder: build/, or $MIXPREC_BUILD_DIR;
#                           MIXPREC_SKIP_SANITIZERS=1 skips stage 1 for a quick local run)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
if [[ ${MIXPREC_SKIP_SANITIZERS:-0} != 1 ]]; then
  bash scripts/sanitize.sh
fi

BUILD_DIR=${MIXPREC_BUILD_DIR:-build}
CUDA_ARGS=()
NVCC=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
if [[ -n $NVCC ]]; then
  # No GPU is needed to compile and link the CUDA kernels; their tests skip without a device.
  CUDA_ARGS=(-DMIXPREC_WITH_CUDA=ON -DCMAKE_CUDA_COMPILER="$NVCC")
fi
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "${CUDA_ARGS[@]}"
cmake --build "$BUILD_DIR" -j "$(nproc)"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)"
