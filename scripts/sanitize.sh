#!/usr/bin/env bash
# Reliability stage of the test suite (called by scripts/test.sh): the core's and the LibTorch
# adapter's tests under AddressSanitizer + UndefinedBehaviorSanitizer (LibTorch itself
# uninstrumented), the threaded kernels under ThreadSanitizer (clang + LLVM's OpenMP with its
# Archer tool, so OpenMP's own synchronisation is understood), and a bounded run of every
# libFuzzer target on its committed corpus (tests/fuzz/: the update rule, the unscale and MXFP8
# kernels, and every reader of untrusted bytes: state dicts, pickles, checkpoint files, the C ABI,
# and torch.save archives written whole by a structure-aware mutator).
#
# MIXPREC_SANITIZERS selects parts (default "asan tsan fuzz"). CI runs each part once: the Debian
# 13 stage "asan", where LibTorch 2.6 compiles the most of mixprec (the FP8 ops, fp8::Linear), and
# the Debian 12 stage "tsan fuzz", which test the core, the same code on both releases.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZ_SECONDS=${MIXPREC_FUZZ_SECONDS:-15}
PARTS=" ${MIXPREC_SANITIZERS:-asan tsan fuzz} "
JOBS=$(nproc)
export CC=clang CXX=clang++
# clang 14 converts binary16 (used by the tests' reference) through compiler-rt's builtins.
LINK=(-DCMAKE_EXE_LINKER_FLAGS="-rtlib=compiler-rt -unwindlib=libgcc")
# Reports name their frames, and lsan.supp matches by name: the symbolizer of clang's own LLVM.
clang_major=$(clang -dumpversion | cut -d. -f1)
export ASAN_SYMBOLIZER_PATH=/usr/lib/llvm-${clang_major}/bin/llvm-symbolizer
if [[ ! -x $ASAN_SYMBOLIZER_PATH ]]; then
  echo "sanitize.sh: no $ASAN_SYMBOLIZER_PATH (Debian: llvm-${clang_major}; scripts/install_deps.sh)" >&2
  exit 2
fi

asan_run() {  # asan_run TESTS: one gtest executable under ASan + UBSan, leaks checked
  ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$PWD/tests/sanitizers/lsan.supp \
    UBSAN_OPTIONS=print_stacktrace=1 "$1" --gtest_brief=1
}

asan() {
  echo "== ASan + UBSan: core tests, and the LibTorch adapter's tests (LibTorch uninstrumented)"
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMIXPREC_WITH_TORCH=ON \
    -DMIXPREC_BUILD_EXAMPLES=OFF -DMIXPREC_BUILD_BENCHMARKS=OFF "${LINK[@]}" \
    -DCMAKE_CXX_FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" >/dev/null
  cmake --build build-asan -j "$JOBS" --target mixprec_core_tests mixprec_torch_tests \
    mixprec_c_api_tests
  # The core's tests (the longest: ~3 minutes under ASan) run beside the LibTorch adapter's and
  # the C ABI's, which run one after the other; each executable's output is printed whole.
  local core_log status=0
  core_log=$(mktemp)
  asan_run ./build-asan/tests/mixprec_core_tests >"$core_log" 2>&1 &
  local core_pid=$!
  echo "-- mixprec_torch_tests"
  asan_run ./build-asan/tests/torch/mixprec_torch_tests || status=1
  echo "-- mixprec_c_api_tests"
  asan_run ./build-asan/tests/c_api/mixprec_c_api_tests || status=1
  wait "$core_pid" || status=1
  echo "-- mixprec_core_tests"
  cat "$core_log"
  rm -f "$core_log"
  return "$status"
}

tsan() {
  echo "== TSan: threaded kernels"
  cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMIXPREC_WITH_TORCH=OFF \
    -DMIXPREC_BUILD_EXAMPLES=OFF -DMIXPREC_BUILD_BENCHMARKS=OFF "${LINK[@]}" \
    -DCMAKE_CXX_FLAGS="-fsanitize=thread -fno-omit-frame-pointer" >/dev/null
  cmake --build build-tsan -j "$JOBS" --target mixprec_core_tests
  ARCHER=$(ls /usr/lib/llvm-*/lib/libarcher.so 2>/dev/null | head -n1 || true)
  OMP_TOOL_LIBRARIES=${ARCHER} TSAN_OPTIONS="halt_on_error=1 ignore_noninstrumented_modules=1" \
    ./build-tsan/tests/mixprec_core_tests --gtest_brief=1 --gtest_filter='*Thread*:*ManySmall*'
}

fuzz_run() {  # fuzz_run TARGET: a bounded libFuzzer run on a copy of the target's corpus
  local work status=0
  work=$(mktemp -d)
  cp -r "tests/fuzz/corpus/$1"/. "$work"/ 2>/dev/null || true
  LSAN_OPTIONS=suppressions=$PWD/tests/sanitizers/lsan_fuzz.supp ASAN_OPTIONS=malloc_context_size=2 \
    "./build-fuzz/tests/fuzz/$1" -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=4096 \
    -print_final_stats=1 "$work" || status=$?
  rm -rf "$work"
  return "$status"
}

fuzz() {
  echo "== libFuzzer: ${FUZZ_SECONDS}s per target"
  # The fuzzers run the Highway target that dynamic dispatch picks on this machine, and only that
  # one: compiling just it (-march=native, HWY_COMPILE_ONLY_STATIC) loses no coverage and cuts the
  # build of the FP8 tile kernels under the sanitizers from ~10 minutes to seconds. Every target is
  # still built and run under ASan (the asan part) and by the conformance tests.
  cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMIXPREC_BUILD_FUZZERS=ON \
    -DMIXPREC_BUILD_TESTS=OFF -DMIXPREC_BUILD_EXAMPLES=OFF -DMIXPREC_BUILD_BENCHMARKS=OFF "${LINK[@]}" \
    -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -march=native -DHWY_COMPILE_ONLY_STATIC=1" >/dev/null
  # fuzz_scaler_archive (LibTorch's own torch::load reader) is left out: LibTorch crashes on it
  # (docs/testing.md, tests/fuzz/crashes_libtorch/).
  local targets=(fuzz_unscale fuzz_update_rule fuzz_dequantize_mxfp8 fuzz_dequantize_fp4 fuzz_state_dict
                 fuzz_pickle_load fuzz_load_checkpoint fuzz_c_load_state_dict fuzz_torch_save)
  cmake --build build-fuzz -j "$JOBS" --target "${targets[@]}"
  # Each run is single-threaded: JOBS of them at a time, each on a copy of its corpus.
  local i j
  for ((i = 0; i < ${#targets[@]}; i += JOBS)); do
    local batch=("${targets[@]:i:JOBS}") pids=() logs=()
    for target in "${batch[@]}"; do
      logs+=("$(mktemp)")
      fuzz_run "$target" >"${logs[-1]}" 2>&1 &
      pids+=($!)
    done
    for j in "${!batch[@]}"; do
      echo "-- ${batch[j]}"
      if ! wait "${pids[j]}"; then
        tail -n 60 "${logs[j]}"
        echo "FAILED: ${batch[j]} found a crash or a mismatch (input saved as crash-* in $(pwd))"
        wait || true
        exit 1
      fi
      grep -E "stat::number_of_executed_units|DONE" "${logs[j]}" || true
      rm -f "${logs[j]}"
    done
  done
}

for part in $PARTS; do
  case $part in
    asan | tsan | fuzz) "$part" ;;
    *) echo "sanitize.sh: unknown part '$part' in MIXPREC_SANITIZERS (asan, tsan, fuzz)" >&2; exit 2 ;;
  esac
done
echo "sanitizers and fuzzers (${PARTS# }): done"
