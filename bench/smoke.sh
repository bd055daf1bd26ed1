#!/usr/bin/env bash
# CTest bench.smoke: the pieces scripts/bench.sh glues together, on a short run: both benchmark
# programs write JSON, bench/python_overhead.py runs where python3-torch >= 2.4 is installed, and
# bench/ratios.py reads them all. Checks that they work, not how fast (scripts/bench.sh measures).
# Usage: smoke.sh UNSCALE_BENCHMARK OPTIM_BENCHMARK FP8_BENCHMARK FP4_BENCHMARK OUT_DIR
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
unscale=$1 optim=$2 fp8=$3 fp4=$4 out=$5
mkdir -p "$out"
"$unscale" --benchmark_filter='scale_loop|mixprec_fp32_64M|pytorch_fp32_64M' \
  --benchmark_min_time=0.05 --benchmark_format=json >"$out/smoke_unscale.json"
"$optim" --benchmark_filter='tiny' --benchmark_min_time=0.05 --benchmark_format=json \
  >"$out/smoke_optim.json"
# The FP8 rows are the 64M runs (a few iterations each).
"$fp8" --benchmark_filter="/$((64 << 20))" --benchmark_min_time=0.05 --benchmark_format=json \
  >"$out/smoke_fp8.json"
# The FP4 rows at 16M, one iteration each: the program runs and reports every case.
"$fp4" --benchmark_filter="/$((16 << 20))" --benchmark_min_time=0.01 --benchmark_format=json \
  >"$out/smoke_fp4.json"
python3 - "$out/smoke_fp4.json" <<'PY'
import json, sys
names = {b["name"] for b in json.load(open(sys.argv[1]))["benchmarks"] if "error_occurred" not in b}
want = {"loop_4to1", "nvfp4_quantize_1d", "mxfp4_quantize_floor", "nvfp4_amax_and_quantize_1d",
        "nvfp4_quantize_2d", "nvfp4_quantize_1d_stochastic", "hadamard16", "nvfp4_dequantize"}
missing = sorted(w for w in want if not any(n.startswith("BM_" + w + "/") for n in names))
if missing:
    sys.exit("bench.smoke: fp4_benchmark did not report " + ", ".join(missing))
PY
results=("$out/smoke_unscale.json" "$out/smoke_optim.json" "$out/smoke_fp8.json")
status=0
python3 "$here/python_overhead.py" >"$out/smoke_python.json" || status=$?
if [[ $status -eq 0 ]]; then
  results+=("$out/smoke_python.json")
elif [[ $status -ne 77 ]]; then
  echo "bench.smoke: python_overhead.py failed with exit $status" >&2
  exit 1
fi
report=$(python3 "$here/ratios.py" "${results[@]}")
echo "$report"
# The rows bench.sh's users read must be there, with numbers.
for row in "unscale fp32_64M vs scale loop" "GradScaler overhead per iteration" \
  "FP8 amax+quantize e4m3 64M vs 4:1 loop"; do
  if ! grep -q "^$row.*[0-9]x" <<<"$report" && ! grep -q "^$row.*[0-9] us" <<<"$report"; then
    echo "bench.smoke: no measured row '$row' in ratios.py's report" >&2
    exit 1
  fi
done
