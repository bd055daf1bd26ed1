#!/usr/bin/env bash
# Builds the Release benchmarks (unscale-and-check, GradScaler + fused optimizer steps, per-iteration
# overhead, the FP8 and FP4 casts, fp8::Linear against a bf16 torch::nn::Linear) and runs them once
# (JSON), with bench/python_overhead.py where python3-torch >= 2.4 is installed, then prints the
# ratios of that run.
# Usage: scripts/bench.sh [extra Google Benchmark flags]; BUILD_DIR and JOBS override the defaults.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build-bench}"
jobs="${JOBS:-2}"

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMIXPREC_BUILD_BENCHMARKS=ON >/dev/null
cmake --build "$build" -j"$jobs" --target unscale_benchmark optim_benchmark fp8_benchmark \
  fp4_benchmark

json="$build/unscale_benchmark.json"
# Interleaved repetitions smooth out a shared machine (load that comes and goes hits every
# benchmark alike); ratios.py uses the medians.
"$build/bench/unscale_benchmark" --benchmark_format=json --benchmark_repetitions=5 \
  --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true \
  "$@" >"$json"
optim_json="$build/optim_benchmark.json"
"$build/bench/optim_benchmark" --benchmark_format=json --benchmark_enable_random_interleaving=true \
  "$@" >"$optim_json"
fp8_json="$build/fp8_benchmark.json"
"$build/bench/fp8_benchmark" --benchmark_format=json --benchmark_repetitions=5 \
  --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true \
  "$@" >"$fp8_json"
results=("$json" "$optim_json" "$fp8_json")
# The FP4 casts beside the same 4:1 loop (docs/performance.md, "FP4 casts"): printed as Google
# Benchmark prints it.
"$build/bench/fp4_benchmark" --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true \
  --benchmark_report_aggregates_only=true "$@"
# fp8::Linear on the CPU beside a bf16 torch::nn::Linear (LibTorch >= 2.1 builds it): printed as
# Google Benchmark prints it, the two side by side.
if cmake --build "$build" -j"$jobs" --target fp8_linear_benchmark >/dev/null 2>&1; then
  "$build/bench/fp8_linear_benchmark" "$@"
fi
# Python's GradScaler overhead, where python3-torch >= 2.4 is installed (exit 77 otherwise).
python_json="$build/python_overhead.json"
if python3 "$root/bench/python_overhead.py" >"$python_json"; then results+=("$python_json"); fi
echo "results: ${results[*]}"
python3 "$root/bench/ratios.py" "${results[@]}"
