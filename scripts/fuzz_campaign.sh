#!/usr/bin/env bash
# A long fuzzing campaign outside CI (docs/testing.md, "Campaigns"): each libFuzzer target named
# runs until it has used CPU_SECONDS of CPU time (not wall time: the machine may be shared), on a
# copy of its committed corpus, under ASan + UBSan as scripts/sanitize.sh builds them; JOBS targets
# at a time, niced. Each target's log, final stats and new corpus stay in OUT/<target>/; a crash
# leaves its input there as crash-* and fails the script.
# Usage: scripts/fuzz_campaign.sh BUILD_DIR OUT CPU_SECONDS TARGET...   (JOBS=2 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=$(realpath "$1") out=$(realpath -m "$2") cpu_seconds=$3
shift 3
jobs=${JOBS:-2}
ticks=$(getconf CLK_TCK)
mkdir -p "$out"

run_target() {
  local target=$1 dir="$out/$1"
  mkdir -p "$dir/corpus"
  cp -r "$root/tests/fuzz/corpus/$target/." "$dir/corpus/" 2>/dev/null || true
  (cd "$dir" && LSAN_OPTIONS=suppressions=$root/tests/sanitizers/lsan_fuzz.supp \
    ASAN_OPTIONS=malloc_context_size=2 exec nice -n 19 "$build/tests/fuzz/$target" \
    -max_total_time=86400 -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 corpus \
    >log.txt 2>&1) &
  local pid=$!
  sleep 2
  local fuzzer
  fuzzer=$(pgrep -P "$pid" -f "$target" || echo "$pid")
  while kill -0 "$pid" 2>/dev/null; do
    local used
    used=$(awk -v t="$ticks" '{print int(($14 + $15) / t)}' "/proc/$fuzzer/stat" 2>/dev/null || echo 0)
    if ((used >= cpu_seconds)); then
      kill -INT "$fuzzer" 2>/dev/null || true
      break
    fi
    sleep 10
  done
  wait "$pid" || true
  echo "$target: $(grep -E 'stat::number_of_executed_units|cov:' "$dir/log.txt" | tail -2 | tr '\n' ' ')"
  if ls "$dir"/crash-* "$dir"/leak-* "$dir"/timeout-* "$dir"/oom-* >/dev/null 2>&1; then
    echo "$target: FOUND $(ls "$dir" | grep -E '^(crash|leak|timeout|oom)-' | tr '\n' ' ')"
    return 1
  fi
}

status=0
running=0
for target in "$@"; do
  run_target "$target" || status=1 &
  running=$((running + 1))
  if ((running >= jobs)); then
    wait -n || status=1
    running=$((running - 1))
  fi
done
wait || status=1
exit $status
