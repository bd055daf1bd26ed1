#!/usr/bin/env bash
# The one-shot GPU check (docs/gpu_check.md). On a machine with a GPU, nvcc and a Python torch 2.x
# wheel built with CUDA, it configures mixprec against the wheel's LibTorch, builds only the GPU
# targets, runs the CUDA core tests, the GPU tests, seed example 3, the differential run against
# Python, the FP8 cast timings and the GPU benchmark, and writes everything to ONE markdown file:
#   ${OUT:-gpu_check_out}/gpu_check.md     (logs of every stage next to it, in logs/)
# Every stage is timed and has its own timeout (the build's: GPU_CHECK_BUILD_S, default 270 s)
# inside an overall budget (GPU_CHECK_BUDGET_S, default 450 s); a failing stage is recorded and
# the next one runs.
#
# Usage: scripts/gpu_check.sh [--dry-run | --build-only]
#   --dry-run     detect python/torch/nvcc/GPU and write the plan, build and run nothing.
#   --build-only  every stage up to the first that needs a device (dependencies, configure,
#                 build), on a machine without a GPU: what must pass before a GPU is lent.
# Environment:
#   PYTHON                python with torch (default: the first of python3, python with CUDA torch)
#   GTEST_SOURCE_DIR      GoogleTest sources (default /usr/src/googletest when present)
#   BENCHMARK_SOURCE_DIR  Google Benchmark sources (no default)
#   HWY_SOURCE_DIR        Highway sources, for a machine without libhwy-dev (no default)
#   RANDOM123_INCLUDE_DIR the folder holding Random123/ (header-only), for a machine without
#                         librandom123-dev (no default; passed as MIXPREC_RANDOM123_INCLUDE_DIR)
#     Both are built with the wheel's _GLIBCXX_USE_CXX11_ABI (wheels before torch 2.7 use 0) and
#     installed into the build folder; without them the system packages are used when the ABI
#     allows it (ABI 1), otherwise the stages that need them fail with a clear message.
#   CUDACXX               nvcc (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc)
#   CUDA_ARCH             CMAKE_CUDA_ARCHITECTURES (default native with CMake >= 3.24, else 90)
#   BUILD_DIR             build folder (default build-gpu in the repository)
#   JOBS                  build jobs (default: all cores)
# Exit code: 0 when every stage passed, 1 when one failed, 2 when the environment is unusable.
set -uo pipefail  # no -e: a failing stage must not stop the next ones

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${OUT:-gpu_check_out}"
mkdir -p "$out" && out="$(cd "$out" && pwd)"
logs="$out/logs"
mkdir -p "$logs"
rm -f "$logs"/*.log  # no stale logs from an earlier run in the same folder
report="$out/gpu_check.md"
build="${BUILD_DIR:-$root/build-gpu}"
jobs="${JOBS:-$(nproc 2>/dev/null || echo 4)}"
budget="${GPU_CHECK_BUDGET_S:-450}"
build_cap="${GPU_CHECK_BUILD_S:-270}"  # the build stage's cap: 16 cores; a 2-core machine needs ~900
dry_run=0
build_only=0
case "${1:-}" in
  "") ;;
  --dry-run) dry_run=1 ;;
  --build-only) build_only=1 ;;
  *) echo "usage: scripts/gpu_check.sh [--dry-run | --build-only]" >&2; exit 2 ;;
esac

start_s=$SECONDS
deadline=$((start_s + budget))
env_lines=()   # "- key: value" lines of the report header
rows=()        # stage table rows
details=()     # per-stage log excerpts
bench_table="" # markdown made from the benchmark JSON
fp8_table=""   # the FP8 cast timings GpuFp8.PrintsAmaxAndQuantizeBandwidthNextToADeviceCopy prints
overall=0

note() { echo "gpu_check: $*" >&2; }

write_report() {
  {
    echo "# mixprec GPU check"
    echo
    echo "Written by \`scripts/gpu_check.sh\` on $(date -u '+%Y-%m-%d %H:%M:%S UTC'), host $(hostname)."
    echo
    printf '%s\n' "${env_lines[@]}"
    echo "- total time: $((SECONDS - start_s)) s (budget ${budget} s)"
    echo
    echo "| stage | result | time (s) | note |"
    echo "|---|---|---|---|"
    printf '%s\n' "${rows[@]}"
    if [[ -n "$fp8_table" ]]; then
      echo
      echo "## FP8 casts"
      echo
      echo '```'
      echo "$fp8_table"
      echo '```'
    fi
    if [[ -n "$bench_table" ]]; then
      echo
      echo "## Benchmark"
      echo
      echo "$bench_table"
    fi
    echo
    echo "## Stage output (last lines; full logs in logs/)"
    for d in "${details[@]}"; do printf '\n%s\n' "$d"; done
  } >"$report"
}

# record <stage> <PASS|FAIL|TIMEOUT|SKIPPED> <seconds> <note> [log file]
record() {
  local stage="$1" result="$2" secs="$3" text="$4" log="${5:-}"
  rows+=("| $stage | **$result** | $secs | ${text//|/\\|} |")
  if [[ -n "$log" && -f "$log" ]]; then
    details+=("### $stage ($result)"$'\n\n```\n'"$(tail -n 40 "$log" | cut -c1-300)"$'\n```')
  fi
  [[ "$result" == PASS || "$result" == SKIPPED ]] || overall=1
  write_report
}

# stage <name> <cap seconds> <note on success> -- command...: runs the command with a timeout of
# min(cap, time left), logs to logs/<name>.log, records the result. Returns the command's status.
stage() {
  local name="$1" cap="$2" ok_note="$3"
  shift 4
  local log="$logs/$name.log" left=$((deadline - SECONDS))
  local limit=$((cap < left ? cap : left))
  if ((limit < 5)); then
    record "$name" SKIPPED 0 "no time left in the ${budget} s budget"
    return 1
  fi
  if [[ "$1" == */* && ! -x "$1" ]]; then  # a program of this build that is not there
    record "$name" FAIL 0 "$1 was not built (see logs/build.log)"
    return 1
  fi
  note "stage $name (timeout ${limit} s)"
  local t0=$SECONDS rc
  # bash -c: the command may be one of the functions below (exported); timeout signals the whole
  # process group, so compilers and tests started by the stage end with it.
  timeout --kill-after=10 "$limit" bash -c '"$@"' stage "$@" >"$log" 2>&1
  rc=$?
  local secs=$((SECONDS - t0))
  if ((rc == 0)); then
    record "$name" PASS "$secs" "$ok_note" "$log"
  elif ((rc == 124 || rc == 137)); then
    record "$name" TIMEOUT "$secs" "killed after ${limit} s" "$log"
  else
    record "$name" FAIL "$secs" "exit code $rc; see logs/$name.log" "$log"
  fi
  return "$rc"
}

# ---- environment ---------------------------------------------------------------------------
# A python whose torch is 2.x and built with CUDA.
py=""
for candidate in "${PYTHON:-}" python3 python; do
  [[ -n "$candidate" ]] && command -v "$candidate" >/dev/null 2>&1 || continue
  if "$candidate" - >/dev/null 2>&1 <<'EOF'
import torch, sys
sys.exit(0 if int(torch.__version__.split(".")[0]) >= 2 and torch.version.cuda else 1)
EOF
  then py="$(command -v "$candidate")"; break; fi
done
if [[ -z "$py" ]]; then
  msg="no python with a CUDA build of torch 2.x found (tried \$PYTHON, python3, python: 'import torch' fails, torch < 2, or torch.version.cuda is None). Install a torch 2.x CUDA wheel or set PYTHON."
  note "$msg"
  env_lines+=("- python/torch: **not found** — $msg")
  record environment FAIL 0 "no CUDA torch 2.x"
  exit 2
fi
torch_info="$("$py" - 2>&1 <<'EOF'
import os, torch
n = torch.cuda.device_count() if torch.cuda.is_available() else 0
names = ", ".join(torch.cuda.get_device_name(i) for i in range(n)) or "none visible"
cap = "%d.%d" % torch.cuda.get_device_capability(0) if n else "-"  # never empty: read splits on tabs
# The prefix is the torch package's folder: with torch/share/cmake (torch.utils.cmake_prefix_path)
# LibTorch's config finds a system LibTorch's libc10.so first (docs/install.md).
print(torch.__version__, torch.version.cuda, int(torch._C._GLIBCXX_USE_CXX11_ABI),
      os.path.dirname(torch.__file__), n, cap, sep="\t", end="\t")
print(names)
EOF
)"
IFS=$'\t' read -r torch_version torch_cuda abi torch_prefix gpu_count gpu_cap gpu_names <<<"$torch_info"
[[ $gpu_cap == - ]] && gpu_cap=""
# Torch's CMake config would otherwise detect the architecture by compiling a probe program.
export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-${gpu_cap:-9.0}}"
nvcc="${CUDACXX:-$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)}"
nvcc_version="$("$nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
cmake_version="$(cmake --version 2>/dev/null | sed -n 's/cmake version //p')"
driver="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n1)"
if [[ -z "${CUDA_ARCH:-}" ]]; then
  # "native" needs CMake 3.24 and a GPU to look at; H200/H100 are sm_90.
  if ! ((build_only)) && printf '3.24\n%s\n' "$cmake_version" | sort -V -C; then
    CUDA_ARCH=native
  else
    CUDA_ARCH=90
  fi
fi
env_lines+=("- GPU: ${gpu_names} (${gpu_count} visible, compute capability ${gpu_cap:-?}), driver ${driver:-unknown}")
env_lines+=("- torch ${torch_version} (CUDA ${torch_cuda}, _GLIBCXX_USE_CXX11_ABI=${abi}) from ${py}")
env_lines+=("- LibTorch CMake prefix: ${torch_prefix}")
env_lines+=("- nvcc ${nvcc_version:-not found} (${nvcc}), CMake ${cmake_version:-not found}, CUDA architectures ${CUDA_ARCH}, ${jobs} build jobs")
env_problem=""
[[ -z "$nvcc_version" ]] && env_problem="nvcc not found (set CUDACXX)"
[[ -z "$cmake_version" ]] && env_problem="cmake not found"
if ! ((build_only)) && ! [[ "$gpu_count" =~ ^[0-9]+$ && "$gpu_count" -gt 0 ]]; then
  env_problem="${env_problem:+$env_problem; }torch sees no GPU"
fi
if [[ -n "$env_problem" ]]; then
  record environment FAIL 0 "$env_problem"
  ((dry_run)) || exit 2
elif ((build_only)); then
  record environment PASS 0 "python, CUDA torch, nvcc and cmake found (--build-only: no GPU needed)"
else
  record environment PASS 0 "python, CUDA torch, nvcc, cmake and a GPU found"
fi

gtest_src="${GTEST_SOURCE_DIR:-}"
[[ -z "$gtest_src" && -f /usr/src/googletest/CMakeLists.txt ]] && gtest_src=/usr/src/googletest
bench_src="${BENCHMARK_SOURCE_DIR:-}"
hwy_src="${HWY_SOURCE_DIR:-}"
random123_dir="${RANDOM123_INCLUDE_DIR:-}"
# Absolute: CMake would keep a relative cache path as given.
[[ -n "$random123_dir" ]] && random123_dir="$(cd "$random123_dir" && pwd)"
env_lines+=("- Random123 headers (FP4 kernels): ${random123_dir:-system}")
deps_prefix="$build/_deps/prefix"
targets=(mixprec_cuda_tests mixprec_cuda_ieee_check mixprec_gpu_tests seed_example_3
  mixprec_gpu_differential)
with_bench=1
no_bench_reason=""
if [[ -z "$bench_src" && "$abi" == 0 ]]; then
  with_bench=0  # a system Google Benchmark has the new ABI: it would not link with this wheel
  no_bench_reason="no Google Benchmark built with _GLIBCXX_USE_CXX11_ABI=0: set BENCHMARK_SOURCE_DIR"
elif [[ -z "$bench_src" ]] && ! compgen -G "/usr/lib*/cmake/benchmark/benchmarkConfig.cmake" >/dev/null &&
     ! compgen -G "/usr/lib/*/cmake/benchmark/benchmarkConfig.cmake" >/dev/null &&
     ! compgen -G "/usr/local/lib*/cmake/benchmark/benchmarkConfig.cmake" >/dev/null; then
  with_bench=0
  no_bench_reason="Google Benchmark not installed: set BENCHMARK_SOURCE_DIR"
fi
((with_bench)) && targets+=(gpu_benchmark)

if ((dry_run)); then
  env_lines+=("- dry run: would build ${targets[*]} in ${build}; GoogleTest from ${gtest_src:-system}, Google Benchmark from ${bench_src:-system (skipped with ABI 0)}")
  record dry-run SKIPPED 0 "--dry-run: nothing built or run"
  note "dry run written to $report"
  exit "$overall"
fi

# ---- GoogleTest / Google Benchmark with the wheel's ABI ---------------------------------------
build_dep() {  # build_dep <source> <name> <extra cmake args...>
  local src="$1" name="$2"
  shift 2
  cmake -S "$src" -B "$build/_deps/$name" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_INSTALL_PREFIX="$deps_prefix" -DCMAKE_INSTALL_LIBDIR=lib \
    -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DCMAKE_CXX_FLAGS="-D_GLIBCXX_USE_CXX11_ABI=$abi" "$@" &&
    cmake --build "$build/_deps/$name" -j"$jobs" --target install
}
deps() {
  if [[ -n "$gtest_src" ]]; then
    build_dep "$gtest_src" googletest -DBUILD_GMOCK=OFF -DINSTALL_GTEST=ON || return 1
  elif [[ "$abi" == 0 ]]; then
    echo "GoogleTest: no sources (GTEST_SOURCE_DIR) and the wheel uses the old C++ ABI;" \
         "a system GoogleTest would not link" >&2
    return 1
  fi
  if [[ -n "$hwy_src" ]]; then  # mixprec::core's SIMD (Debian: libhwy-dev)
    build_dep "$hwy_src" highway -DHWY_ENABLE_TESTS=OFF -DHWY_ENABLE_EXAMPLES=OFF \
      -DHWY_ENABLE_CONTRIB=OFF -DBUILD_TESTING=OFF || return 1
  fi
  if [[ -n "$bench_src" ]]; then
    build_dep "$bench_src" benchmark -DBENCHMARK_ENABLE_TESTING=OFF \
      -DBENCHMARK_ENABLE_GTEST_TESTS=OFF -DBENCHMARK_ENABLE_WERROR=OFF \
      -DBENCHMARK_ENABLE_INSTALL=ON || return 1
  fi
  echo "dependencies ready in $deps_prefix"
}
mkdir -p "$build"
export py build deps_prefix abi jobs gtest_src bench_src hwy_src random123_dir root torch_prefix nvcc CUDA_ARCH logs out
export -f build_dep deps
stage dependencies 150 "GoogleTest from ${gtest_src:-system}, Highway from ${hwy_src:-system}, Google Benchmark from ${bench_src:-system}" -- deps
((with_bench)) || record benchmark-deps FAIL 0 "$no_bench_reason"

# ---- configure and build ----------------------------------------------------------------------
configure() {
  local cuda_root
  cuda_root="$(cd "$(dirname "$nvcc")/.." && pwd)"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$deps_prefix;$torch_prefix" \
    -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" \
    -DCUDAToolkit_ROOT="$cuda_root" -DCUDA_TOOLKIT_ROOT_DIR="$cuda_root" \
    -DMIXPREC_WITH_DISTRIBUTED=OFF \
    ${random123_dir:+"-DMIXPREC_RANDOM123_INCLUDE_DIR=$random123_dir"} || return 1
  # MIXPREC_WITH_CUDA is left to its default, as in the test suite's CUDA stage and for a user:
  # ON with a CUDA LibTorch and nvcc. The point of the check: it must be ON here.
  grep -q "MIXPREC_WITH_CUDA ON" "$logs/configure.log" || {
    echo "configure: MIXPREC_WITH_CUDA defaulted to OFF: mixprec did not see a CUDA LibTorch" \
      "and nvcc" >&2
    return 1
  }
}
export -f configure
stage configure 120 "MIXPREC_TORCH_CUDA ON" -- configure
# Only targets the configure step created (ninja stops at an unknown target); -k 0 builds every
# target that can be built, so one broken target does not block the others.
known=()
for t in "${targets[@]}"; do
  if ninja -C "$build" -t query "$t" >/dev/null 2>&1; then known+=("$t"); else
    record "target $t" FAIL 0 "not configured (see logs/configure.log)"
  fi
done
if ((${#known[@]})); then
  stage build "$build_cap" "built: ${known[*]}" -- cmake --build "$build" -j"$jobs" --target "${known[@]}" -- -k 0
fi

if ((build_only)); then
  for s in gpu-tests fp8-bandwidth seed-example-3 differential benchmark; do
    record "$s" SKIPPED 0 "--build-only: needs a GPU"
  done
  env_lines+=("- result: $( ((overall == 0)) && echo '**every build stage PASS** (--build-only)' || echo '**a build stage FAILED** (see the table)')")
  write_report
  note "report: $report"
  exit "$overall"
fi

# ---- run ----------------------------------------------------------------------------------------
# The CUDA kernel tests and the GPU tests, as CTest runs them in the test suite, one at a time
# (they share the GPU); then the skip check of the test suite with this machine's GPUs: a GPU test
# that skips here fails the stage (tests/expected_skips.txt).
gpu_ctest() {
  local rc=0
  ctest --test-dir "$build" -L '^(cuda|gpu)$' --output-on-failure \
    --output-junit "$out/gpu_ctest.xml" || rc=1
  "$py" "$root/scripts/lib/check_skips.py" "$out/gpu_ctest.xml" "$build" || rc=1
  return $rc
}
export -f gpu_ctest
stage gpu-tests 200 "" -- gpu_ctest
rows[-1]="${rows[-1]% |} $(grep -E 'tests passed|skipped tests:' "$logs/gpu-tests.log" | tr '\n' ' ' | sed 's/|/\\|/g') |"

# The FP8 cast timings (tests/gpu/fp8_cuda_test.cpp, also run by gpu-tests, where CTest keeps its
# output): amax and quantize in GB/s next to a device copy, printed into the report. The test is
# compiled only against a LibTorch with float8 dtypes (>= 2.1).
fp8_bandwidth() {
  local bin="$build/tests/gpu/mixprec_gpu_tests"
  [[ -x "$bin" ]] || { echo "$bin was not built (see logs/build.log)"; return 1; }
  "$bin" --gtest_filter='GpuFp8.PrintsAmaxAndQuantizeBandwidthNextToADeviceCopy' || return 1
  grep -q '^FP8 casts of' "$logs/fp8-bandwidth.log" || {
    echo "no FP8 timings printed: mixprec_gpu_tests has no FP8 tests (LibTorch < 2.1?)" >&2
    return 1
  }
}
export -f fp8_bandwidth
stage fp8-bandwidth 60 "see the FP8 casts section" -- fp8_bandwidth
fp8_table="$(sed -n '/^FP8 casts of/,/^\[/p' "$logs/fp8-bandwidth.log" 2>/dev/null | grep -v '^\[')"
write_report

seed3() {  # stdout must be exactly the seed's two lines; it must have run on the GPU
  local bin="$1"
  [[ -x "$bin" ]] || { echo "$bin was not built (see logs/build.log)"; return 1; }
  "$bin" >"$out/seed_example_3.out" 2>"$out/seed_example_3.err" || return 1
  cat "$out/seed_example_3.out" "$out/seed_example_3.err"
  diff -u "$root/tests/seed/expected_seed_example_3.txt" "$out/seed_example_3.out" || return 1
  if grep -qi "CUDA is not available" "$out/seed_example_3.err"; then
    echo "autocast reported CUDA unavailable: the example did not run on the GPU" >&2
    return 1
  fi
}
export -f seed3
stage seed-example-3 45 "two lines equal tests/seed/expected_seed_example_3.txt" -- \
  seed3 "$build/examples/seed_example_3"

differential() {
  local bin="$build/tests/gpu/mixprec_gpu_differential"
  [[ -x "$bin" ]] || { echo "$bin was not built (see logs/build.log)"; return 1; }
  "$py" "$root/tests/gpu/differential.py" --exe "$bin" --dir "$out/differential"
}
export py
export -f differential
stage differential 120 "" -- differential
rows[-1]="${rows[-1]% |} $(grep -E '^(PASS|FAIL) ' "$logs/differential.log" | tr '\n' ' ' | cut -c1-600 | sed 's/|/\\|/g') |"

if ((with_bench)); then
  stage benchmark 150 "see the Benchmark section" -- "$build/bench/gpu_benchmark" \
    --benchmark_out="$out/gpu_benchmark.json" --benchmark_out_format=json
  # Tables (GB/s, share of the copy ceiling, speed-up) from the JSON; plain python, no numpy.
  bench_table="$("$py" - "$out/gpu_benchmark.json" 2>&1 <<'EOF'
import json, sys
try:
    runs = json.load(open(sys.argv[1]))["benchmarks"]
except Exception as e:  # the benchmark died before writing its JSON
    print(f"(no benchmark results: {e})"); sys.exit(0)
res = {}
for b in runs:
    group, variant, case = b["name"].split("/")[:3]
    res[(group, case, variant)] = b
def gbs(b):
    return None if b is None or b.get("error_occurred") else b.get("GB/s")
def cell(b, ceiling):
    if b is None: return "not run"
    if b.get("error_occurred"): return b.get("error_message", "error")[:80]
    g = gbs(b)
    share = f" ({100 * g / ceiling:.0f}% of copy)" if ceiling else ""
    return f"{b['real_time']:.3g} {b['time_unit']}, {g:.0f} GB/s{share}"
def ratio(a, b):
    return f"{gbs(a) / gbs(b):.2f}x" if gbs(a) and gbs(b) else "n/a"
cases = sorted({c for g, c, v in res if g == "unscale"}, key=lambda c: [k[1] for k in res].index(c))
print("Unscale-and-check (time per call, GB/s = bytes read + written / time):\n")
print("| list | copy ceiling | mixprec | PyTorch | mixprec / PyTorch |")
print("|---|---|---|---|---|")
for c in cases:
    ceil = gbs(res.get(("unscale", c, "copy_ceiling")))
    m, t = res.get(("unscale", c, "mixprec")), res.get(("unscale", c, "torch"))
    print(f"| {c} | {cell(res.get(('unscale', c, 'copy_ceiling')), None)} | {cell(m, ceil)} "
          f"| {cell(t, ceil)} | {ratio(m, t)} |")
print("\nAdamW step with GradScaler, GPT-2-small parameters (fp32; 32 bytes moved per parameter):\n")
print("| variant | time, GB/s | vs torch::optim + unscale_ | vs PyTorch fused |")
print("|---|---|---|---|")
ceil = gbs(res.get(("adamw", "gpt2_124M", "copy_ceiling")))
base, fused = res.get(("adamw", "gpt2_124M", "torch_optim_unscale")), res.get(("adamw", "gpt2_124M", "torch_fused"))
for v in ["copy_ceiling", "mixprec_fused", "torch_fused", "torch_optim_unscale"]:
    b = res.get(("adamw", "gpt2_124M", v))
    print(f"| {v} | {cell(b, None if v == 'copy_ceiling' else ceil)} | {ratio(b, base)} | {ratio(b, fused)} |")
EOF
)"
  write_report
fi

env_lines+=("- result: $( ((overall == 0)) && echo '**all stages PASS**' || echo '**some stages FAILED** (see the table)')")
write_report
note "report: $report"
exit "$overall"
