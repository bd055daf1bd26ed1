#!/usr/bin/env bash
# scripts/gpu_check.sh --dry-run where a CUDA torch is installed but no GPU is visible (the test
# suite's CUDA stage): it finds python's CUDA torch, its LibTorch prefix and nvcc, reports that no
# GPU is visible, and writes the plan. What runs on a GPU machine is not run here.
# Usage: gpu_check_dry_run_test.sh OUT_DIR
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out=$1
rm -rf "$out"
OUT=$out bash "$here/../../scripts/gpu_check.sh" --dry-run
report=$out/gpu_check.md
cat "$report"
fail() { echo "FAIL: $*"; exit 1; }
grep -q "^- torch 2\.[0-9.]*.* (CUDA [0-9]" "$report" || fail "the report names no CUDA torch 2.x"
grep -q "^- nvcc [0-9]" "$report" || fail "the report names no nvcc"
grep -q "torch sees no GPU" "$report" || fail "no GPU is visible here, and the report must say so"
grep -q "dry run: would build mixprec_cuda_tests" "$report" || fail "no build plan in the report"
echo "PASS: gpu_check.sh --dry-run detected the CUDA torch, nvcc and the missing GPU"
