#!/usr/bin/env bash
# The whole test suite: installs missing packages, then
#   1. the reliability stage (scripts/sanitize.sh: ASan+UBSan, TSan, bounded libFuzzer runs; on
#      Debian 12 TSan and the fuzzers, ASan+UBSan being stage 5's),
#   2. the build, with MIXPREC_WITH_CUDA's default (ON with a CUDA LibTorch and nvcc; on Debian 12
#      ON for mixprec::core's kernels alone when nvcc is installed), and every
#      CTest test; any skip that tests/expected_skips.txt does not expect here fails the stage
#      (scripts/lib/check_skips.py prints each skip with its reason),
#   3. the main job, as a user runs it: scripts/main.sh, checked by scripts/check_main_job.sh, on
#      stage 2's build (Debian's LibTorch: MIXPREC_TORCH=system; stage 4: the wheel, its default),
#   4. on Debian 12 (LibTorch 1.13): today's PyTorch, LibTorch 2.15 from the torch wheel on PyPI
#      (scripts/current_torch_stage.sh): its CUDA build with nvcc 13, Gloo and NCCL, stages 2 and
#      3 again, the `python` tests against that torch 2.15,
#   5. on Debian 12: LibTorch 2.6 in a Debian 13 root (scripts/debian13_stage.sh cpu): ASan +
#      UBSan, build, tests with the differential tests against PyTorch 2.6, main job.
# The Debian 13 CUDA root (LibTorch 2.6's CUDA build with nvcc 12.4, a stand-in cuDNN) left CI
# when the wheel's real CUDA stack came in: MIXPREC_DEBIAN13_CUDA=1 adds it (stage 6), and
# scripts/fresh_machine_check.sh runs it.
# Prints each stage's time. Usage: scripts/test.sh   (build folder: build/, or $MIXPREC_BUILD_DIR)
# For a quicker local run: MIXPREC_SKIP_SANITIZERS=1 skips stage 1, MIXPREC_SKIP_CURRENT_TORCH=1
# stage 4, MIXPREC_SKIP_DEBIAN13=1 stage 5. CI sets none. MIXPREC_REQUIRE_CUDA=1 (the CUDA
# stages) fails the build stage unless the CUDA targets were configured.
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
codename=$( (. /etc/os-release && echo "${VERSION_CODENAME:-}") || true)
sanitizer_env=()
if [[ ${MIXPREC_SKIP_SANITIZERS:-0} != 1 ]]; then
  if [[ $codename == bookworm && ${MIXPREC_SKIP_DEBIAN13:-0} != 1 ]]; then
    # ASan + UBSan run once, in the Debian 13 stage (stage 5), where LibTorch 2.6 compiles the
    # most code (the FP8 ops and fp8::Linear are left out on 1.13); TSan and the fuzzers test the
    # core, the same code on both releases, here. For time (docs/testing.md).
    sanitizer_env=("MIXPREC_SANITIZERS=${MIXPREC_SANITIZERS:-tsan fuzz}")
  fi
  stage "sanitizers and fuzzers" env "${sanitizer_env[@]}" bash scripts/sanitize.sh
fi

BUILD_DIR=${MIXPREC_BUILD_DIR:-build}
CUDA_ARGS=()
NVCC=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
if [[ $codename == bookworm && -n $NVCC ]]; then
  # Debian 12 has no CUDA LibTorch, so MIXPREC_WITH_CUDA defaults to OFF; where an nvcc is
  # installed (CUDA 13 here) it still compiles mixprec::core's CUDA kernels and their tests, so a
  # second CUDA release is covered. The CUDA LibTorch is the Debian 13 CUDA stage's.
  CUDA_ARGS=(-DMIXPREC_WITH_CUDA=ON -DCMAKE_CUDA_COMPILER="$NVCC")
fi
build() {
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "${CUDA_ARGS[@]}"
  cmake --build "$BUILD_DIR" -j "$(nproc)"
  if [[ ${MIXPREC_REQUIRE_CUDA:-0} == 1 ]] &&
    ! { grep -qx "cuda_build=ON" "$BUILD_DIR/mixprec_test_env.txt" &&
      [[ -x $BUILD_DIR/tests/gpu/mixprec_gpu_tests ]]; }; then
    echo "test.sh: MIXPREC_REQUIRE_CUDA=1, but the CUDA targets were not built" \
      "(MIXPREC_WITH_CUDA defaults to ON only with a CUDA LibTorch and nvcc)" >&2
    return 1
  fi
}
run_tests() {
  local junit=$PWD/$BUILD_DIR/ctest-junit.xml status=0
  # MIXPREC_CTEST_EXCLUDE (a CTest -E regex): tests a stage leaves to the others, for time.
  ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" --output-junit "$junit" \
    ${MIXPREC_CTEST_EXCLUDE:+-E "$MIXPREC_CTEST_EXCLUDE"} || status=$?
  python3 scripts/lib/check_skips.py "$junit" "$BUILD_DIR" || status=1
  return $status
}
stage "build" build
stage "ctest" run_tests
# The main job on this stage's LibTorch and build: Debian's here (main.sh's fallback path); the
# current-PyTorch stage sets MIXPREC_TORCH=pypi, main.sh's default path, on its build.
stage "main job (scripts/main.sh)" env MIXPREC_TORCH="${MIXPREC_TORCH:-system}" \
  MIXPREC_BUILD_DIR="$BUILD_DIR" bash scripts/check_main_job.sh

if [[ $codename == bookworm && ${MIXPREC_SKIP_CURRENT_TORCH:-0} != 1 ]]; then
  stage "LibTorch 2.15 (the PyPI torch wheel, CUDA 13, no GPU)" bash scripts/current_torch_stage.sh
fi
if [[ $codename == bookworm && ${MIXPREC_SKIP_DEBIAN13:-0} != 1 ]]; then
  stage "LibTorch 2.6 (CPU) in a Debian 13 root" bash scripts/debian13_stage.sh cpu
  if [[ ${MIXPREC_DEBIAN13_CUDA:-0} == 1 ]]; then
    stage "LibTorch 2.6 (CUDA, no GPU) in a Debian 13 root" bash scripts/debian13_stage.sh cuda
  fi
fi

echo "== stage times ($release):"
printf '%s\n' "${times[@]}"
