#!/usr/bin/env bash
# The whole test suite: installs missing packages, then
#   1. the reliability stage (scripts/sanitize.sh: ASan+UBSan, TSan, bounded libFuzzer runs),
#   2. the main build (with the CUDA kernels when nvcc is there) and every CTest test,
#   3. the main job, as a user runs it: scripts/main.sh, checked by scripts/check_main_job.sh,
#   4. on Debian 12 (LibTorch 1.13): stages 2 and 3 again against LibTorch 2.6 in a Debian 13
#      root (scripts/debian13_stage.sh), with the differential tests against PyTorch 2.6.
# Prints each stage's time. Usage: scripts/test.sh   (build folder: build/, or $MIXPREC_BUILD_DIR)
# For a quicker local run: MIXPREC_SKIP_SANITIZERS=1 skips stage 1, MIXPREC_SKIP_DEBIAN13=1
# skips stage 4. CI sets neither.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/debian_root.sh
release=$( (. /etc/os-release && echo "${PRETTY_NAME:-unknown}") || echo unknown)
times=()
stage() {  # stage NAME COMMAND...: runs COMMAND, prints and records its time
  local name=$1 t0
  shift
  t0=$(date +%s)
  echo "== stage: $name ($release)"
  "$@"
  times+=("$(printf '%5d s  %s' "$(seconds_since "$t0")" "$name")")
  echo "== stage done in $(seconds_since "$t0") s: $name"
}

stage "install packages" bash scripts/install_deps.sh
if [[ ${MIXPREC_SKIP_SANITIZERS:-0} != 1 ]]; then
  stage "sanitizers and fuzzers" bash scripts/sanitize.sh
fi

BUILD_DIR=${MIXPREC_BUILD_DIR:-build}
CUDA_ARGS=()
NVCC=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
if [[ -n $NVCC ]]; then
  # No GPU is needed to compile and link the CUDA kernels; their tests skip without a device.
  CUDA_ARGS=(-DMIXPREC_WITH_CUDA=ON -DCMAKE_CUDA_COMPILER="$NVCC")
fi
build() {
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "${CUDA_ARGS[@]}"
  cmake --build "$BUILD_DIR" -j "$(nproc)"
}
stage "build" build
stage "ctest" ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)"
stage "main job (scripts/main.sh)" bash scripts/check_main_job.sh

codename=$( (. /etc/os-release && echo "${VERSION_CODENAME:-}") || true)
if [[ $codename == bookworm && ${MIXPREC_SKIP_DEBIAN13:-0} != 1 ]]; then
  stage "LibTorch 2.6 in a Debian 13 root" bash scripts/debian13_stage.sh
fi

echo "== stage times ($release):"
printf '%s\n' "${times[@]}"
