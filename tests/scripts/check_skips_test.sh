#!/usr/bin/env bash
# Tests of scripts/lib/check_skips.py on made-up CTest JUnit files: a GPU test skipped without a
# GPU passes, the same skip on a machine with a GPU fails, a 2.4-only test skipped on LibTorch 2.6
# fails, and a missing LibTorch version is an error rather than "everything expected".
set -euo pipefail
check="$(dirname "$0")/../../scripts/lib/check_skips.py"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
junit() {  # junit NAME REASON: one skipped GoogleTest test
  cat >"$work/junit.xml" <<XML
<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="(empty)" tests="2" failures="0" disabled="0" skipped="1">
  <testcase name="SomeTest.Runs" classname="SomeTest.Runs" time="0.1" status="run"/>
  <testcase name="$1" classname="$1" time="0.1" status="notrun">
    <skipped message="Skip regular expression found in output"/>
    <system-out>[ RUN      ] $1
/src/test.cpp:10: Skipped
$2
</system-out>
  </testcase>
</testsuite>
XML
}
env_file() { printf 'with_torch=ON\ntorch_version=%s\ncuda_build=%s\n' "$1" "$2" >"$work/mixprec_test_env.txt"; }
expect() {  # expect RC ARGS...: check_skips.py ARGS must exit RC
  local want=$1 rc=0
  shift
  python3 "$check" "$work/junit.xml" "$work" "$@" >"$work/out.txt" || rc=$?
  if [[ $rc -ne $want ]]; then
    cat "$work/out.txt"
    echo "FAIL: check_skips.py $* exited $rc, want $want"
    exit 1
  fi
}
junit GpuGradScaler.UnscaleOnCudaEqualsCpuFloat32Arithmetic "no CUDA device"
env_file 2.6.0 ON
expect 0 --gpus 0
grep -q "expected: no-gpu.*no CUDA device" "$work/out.txt" || { echo "FAIL: reason not printed"; exit 1; }
expect 1 --gpus 1
junit PyTorchReferenceOptimTest.AdamMatchesFusedAdam "need LibTorch >= 2.4"
expect 1 --gpus 0
env_file 1.13.1 OFF
expect 0 --gpus 0
junit SomeTest.NotInTheList "some reason"
expect 1 --gpus 0
env_file "" OFF
expect 2 --gpus 0
echo "PASS: check_skips.py tells expected from unexpected skips"
